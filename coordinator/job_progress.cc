#include "coordinator/job_progress.h"

#include <algorithm>
#include <climits>

namespace ps {

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
  record->set_loss(report.loss());
}

}  // namespace ps
