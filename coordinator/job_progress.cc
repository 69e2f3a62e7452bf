#include "coordinator/job_progress.h"

#include <algorithm>
#include <climits>

namespace ps {

v1::ProgressReport NoReport() {
  v1::ProgressReport report;
  report.set_test_accuracy(-1);
  report.set_test_auc(-1);
  report.set_test_log_loss(-1);
  return report;
}

v1::ProgressReport OwnMetrics(v1::ProgressReport report, bool ctr) {
  if (!ctr) {
    report.set_test_auc(-1);
    report.set_test_log_loss(-1);
  }
  return report;
}

v1::ProgressReport WithLatestEvaluation(const v1::ProgressReport& previous,
                                        v1::ProgressReport report) {
  if (report.test_accuracy() < 0) {
    report.set_test_accuracy(previous.test_accuracy());
  }
  if (report.test_auc() < 0) report.set_test_auc(previous.test_auc());
  if (report.test_log_loss() < 0) {
    report.set_test_log_loss(previous.test_log_loss());
  }
  return report;
}

void AggregateProgress(const std::vector<v1::ProgressReport>& reports,
                       v1::JobProgress* progress) {
  int32_t epoch = INT32_MAX;
  int64_t clock = INT64_MAX;
  double loss = 0, rate = 0;
  int reported = 0;
  for (const v1::ProgressReport& r : reports) {
    epoch = std::min(epoch, r.epoch());
    clock = std::min(clock, r.clock());
    if (r.node_id().empty()) continue;  // No report from this worker yet.
    ++reported;
    loss += r.loss();
    rate += r.samples_per_second();
  }
  progress->set_epoch(epoch);
  progress->set_clock(clock);
  progress->set_loss(reported > 0 ? loss / reported : 0);
  progress->set_samples_per_second(rate);
  progress->set_total_clocks(reports[0].total_clocks());
  // Worker 0 evaluates the model on the test set after each epoch.
  const v1::ProgressReport& evaluator = reports[0];
  if (evaluator.test_accuracy() >= 0) {
    progress->set_test_accuracy(evaluator.test_accuracy());
    progress->set_accuracy_epoch(evaluator.epoch());
  }
  // CTR models: measured with the accuracy, kept like it (-1 until then).
  if (evaluator.test_auc() >= 0) progress->set_test_auc(evaluator.test_auc());
  if (evaluator.test_log_loss() >= 0) {
    progress->set_test_log_loss(evaluator.test_log_loss());
  }
}

void RecordEpoch(const v1::ProgressReport& report, int64_t now_ms,
                 v1::JobProgress* progress) {
  auto* epochs = progress->mutable_epochs();
  while (!epochs->empty() &&
         epochs->Get(epochs->size() - 1).epoch() >= report.epoch()) {
    epochs->RemoveLast();
  }
  if (epochs->size() >= kMaxEpochRecords) epochs->RemoveLast();
  v1::EpochRecord* record = epochs->Add();
  record->set_epoch(report.epoch());
  record->set_end_time_ms(now_ms);
  record->set_test_accuracy(report.test_accuracy());
  // Left out (0) for models that measure neither.
  if (report.test_auc() >= 0) record->set_test_auc(report.test_auc());
  if (report.test_log_loss() >= 0) {
    record->set_test_log_loss(report.test_log_loss());
  }
  record->set_loss(report.loss());
}

}  // namespace ps
