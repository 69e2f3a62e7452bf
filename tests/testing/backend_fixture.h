// The fixture of the backend suites
// (tests/unit/worker/backend_conformance_test.cc, ctr_backend_test.cc): each
// test runs on every Backend, CPU and CUDA, the CUDA half skipping with the
// reason where no GPU is present.
#ifndef PS_TESTS_TESTING_BACKEND_FIXTURE_H_
#define PS_TESTS_TESTING_BACKEND_FIXTURE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/backend.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/cuda/cuda_backend.h"

namespace ps::testing {

// A named way to make a backend (nullptr: unavailable here).
struct BackendFactory {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
};
inline void PrintTo(const BackendFactory& factory, std::ostream* os) {
  *os << factory.name;
}

// The CPU backend and the CUDA one.
inline std::vector<BackendFactory> Backends() {
  return {
      {"cpu", [] { return std::unique_ptr<Backend>(CpuBackend::Create({})); }},
      {"cuda", []() -> std::unique_ptr<Backend> {
         absl::StatusOr<std::unique_ptr<Backend>> backend =
             CreateCudaBackend({});
         if (!backend.ok()) return nullptr;
         return *std::move(backend);
       }}};
}

// The name of a test's backend, for INSTANTIATE_TEST_SUITE_P.
inline std::string BackendName(
    const ::testing::TestParamInfo<BackendFactory>& info) {
  return info.param.name;
}

// Makes the parameter's backend (skipping the test where it is
// unavailable) and copies vectors to and from it.
class BackendFixture : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override {
    backend_ = GetParam().make();
    if (backend_ == nullptr) {
      GTEST_SKIP() << GetParam().name << " backend unavailable: "
                   << CreateCudaBackend({}).status().message();
    }
  }
  DeviceBuffer ToDevice(const std::vector<float>& host) {
    DeviceBuffer buffer = backend_->Allocate(host.size());
    backend_->CopyToDevice(host.data(), host.size(), buffer.data());
    return buffer;
  }
  std::vector<float> ToHost(const DeviceBuffer& buffer) {
    std::vector<float> host(buffer.size());
    backend_->CopyToHost(buffer.data(), buffer.size(), host.data());
    return host;
  }

  std::unique_ptr<Backend> backend_;
};

// `n` values drawn uniformly from [-1, 1).
inline std::vector<float> RandomVector(int64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_BACKEND_FIXTURE_H_
