// ps-worker --device: which backend each choice gives, and the errors.
#include "worker/model/device.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/cuda/cuda_backend.h"

namespace ps {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(DeviceTest, CpuIsAlwaysTheCpuBackend) {
  auto backend = CreateBackend("cpu", 1);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
}

TEST(DeviceTest, AutoTakesTheGpuOnlyWhenOneIsUsable) {
  auto backend = CreateBackend("auto", 1);
  ASSERT_TRUE(backend.ok()) << backend.status();
  if (CudaDeviceCount() > 0) {
    EXPECT_THAT((*backend)->name(), StartsWith("cuda:0"));
  } else {
    EXPECT_EQ((*backend)->name(), "cpu");
  }
}

TEST(DeviceTest, GpuWithoutAGpuSaysWhy) {
  auto backend = CreateBackend("gpu", 1);
  if (CudaDeviceCount() > 0) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_THAT((*backend)->name(), StartsWith("cuda:0"));
    return;
  }
  // No silent fallback to the CPU: asking for a GPU that is not there fails
  // with the reason (no CUDA backend in the build, or no usable device).
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  const std::string message(backend.status().message());
  if (CudaBackendBuilt()) {
    EXPECT_THAT(message,
                AnyOf(HasSubstr("does not exist"), HasSubstr("cannot load")));
  } else {
    EXPECT_THAT(message, HasSubstr("no CUDA backend"));
  }
}

TEST(DeviceTest, UnknownDeviceIsInvalidArgument) {
  for (const char* device : {"tpu", "GPU", ""}) {
    auto backend = CreateBackend(device, 1);
    ASSERT_FALSE(backend.ok()) << device;
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(backend.status().message()),
                HasSubstr("must be auto, cpu or gpu"));
  }
}

}  // namespace
}  // namespace ps
