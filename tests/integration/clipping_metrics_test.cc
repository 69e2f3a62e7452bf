// What gradient clipping did is exported by the workers
// (ps_worker_gradient_norm, ps_worker_clipped_steps_total,
// ps_worker_clipped_values_total; docs/training.md, "Gradient clipping").
#include <map>
#include <string>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/testing/bsp_training.h"
#include "tests/testing/fashion_mnist.h"

namespace ps {
namespace {

// Every unlabelled gauge and counter of `registry`, by name.
std::map<std::string, double> Values(prometheus::Registry& registry) {
  std::map<std::string, double> values;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    for (const prometheus::ClientMetric& metric : family.metric) {
      if (!metric.label.empty()) continue;
      if (family.type == prometheus::MetricType::Gauge) {
        values[family.name] = metric.gauge.value;
      } else if (family.type == prometheus::MetricType::Counter) {
        values[family.name] = metric.counter.value;
      }
    }
  }
  return values;
}

v1::JobSpec ClippedJob(float max_value, float max_global_norm) {
  v1::JobSpec spec =
      testing::FashionMnistMlpJob("clipping-metrics", 16, 256, 100);
  spec.set_batch_size(32);  // 8 clocks.
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.mutable_gradient_clipping()->set_max_value(max_value);
  spec.mutable_gradient_clipping()->set_max_global_norm(max_global_norm);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

TEST(ClippingMetricsTest, ATightNormBoundScalesEveryStepAndExportsTheNorm) {
  if (!testing::HaveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST";
  prometheus::Registry registry;
  testing::TrainOnServers(ClippedJob(0, 1e-4f), "job-clip-norm", 8, &registry);
  const auto values = Values(registry);
  EXPECT_EQ(values.at("ps_worker_clipped_steps_total"), 8);
  EXPECT_GT(values.at("ps_worker_gradient_norm"), 1e-4);
  EXPECT_EQ(values.at("ps_worker_clipped_values_total"), 0);
}

TEST(ClippingMetricsTest, ValueClippingCountsTheValuesItClamps) {
  if (!testing::HaveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST";
  prometheus::Registry registry;
  testing::TrainOnServers(ClippedJob(1e-6f, 0), "job-clip-value", 8, &registry);
  const auto values = Values(registry);
  EXPECT_GT(values.at("ps_worker_clipped_values_total"), 8);
  EXPECT_EQ(values.at("ps_worker_clipped_steps_total"), 0);
  EXPECT_EQ(values.at("ps_worker_gradient_norm"), 0);  // Norm clipping off.
}

TEST(ClippingMetricsTest, WithoutClippingNothingIsCounted) {
  if (!testing::HaveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST";
  prometheus::Registry registry;
  testing::TrainOnServers(ClippedJob(0, 0), "job-clip-off", 8, &registry);
  const auto values = Values(registry);
  EXPECT_EQ(values.at("ps_worker_clipped_steps_total"), 0);
  EXPECT_EQ(values.at("ps_worker_clipped_values_total"), 0);
  EXPECT_EQ(values.at("ps_worker_gradient_norm"), 0);
}

}  // namespace
}  // namespace ps
