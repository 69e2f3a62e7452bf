// Helpers shared by the libFuzzer targets: invariant checks that abort (so
// libFuzzer records the input as a crash), scratch files, and the checks
// every decoded job spec must pass.
#ifndef PS_TESTS_FUZZ_FUZZ_UTIL_H_
#define PS_TESTS_FUZZ_FUZZ_UTIL_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "coordinator/request_validation.h"
#include "google/protobuf/stubs/logging.h"

// Each fuzz target is one file that includes this header once.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Protobuf logs every string field with invalid UTF-8 it refuses; those
  // are expected here.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

namespace ps::fuzz {

// Aborts with `what` unless `cond` holds: an invariant of the code under test.
#define PS_FUZZ_REQUIRE(cond, what)                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::fprintf(stderr, "fuzz invariant failed: %s: %s\n", #cond, \
                   std::string(what).c_str());                       \
      std::abort();                                                  \
    }                                                                \
  } while (0)

// A refusal must be a specific status whose message names a field ("field:
// reason") and stays short whatever the input (nothing of it is echoed
// unbounded).
inline void RequireFieldError(const absl::Status& status) {
  PS_FUZZ_REQUIRE(!status.ok(), "not an error");
  PS_FUZZ_REQUIRE(status.code() == absl::StatusCode::kInvalidArgument ||
                      status.code() == absl::StatusCode::kResourceExhausted,
                  status.ToString());
  PS_FUZZ_REQUIRE(status.message().find(':') != absl::string_view::npos,
                  status.ToString());
  PS_FUZZ_REQUIRE(status.message().size() < 2048, status.ToString());
}

// A directory for scratch files, made once per process (in /dev/shm when
// there is one: files are rewritten for every input).
inline const std::string& ScratchDir() {
  static const std::string* dir = [] {
    std::string pattern = access("/dev/shm", W_OK) == 0
                              ? "/dev/shm/ps-fuzz-XXXXXX"
                              : "/tmp/ps-fuzz-XXXXXX";
    PS_FUZZ_REQUIRE(mkdtemp(pattern.data()) != nullptr, pattern);
    // Removed when the fuzzer exits (libFuzzer ends with exit()), so that
    // runs do not pile up directories in /dev/shm.
    std::atexit(+[] {
      std::error_code ignored;
      std::filesystem::remove_all(ScratchDir(), ignored);
    });
    return new std::string(pattern);
  }();
  return *dir;
}

// Writes `bytes` to `name` in the scratch directory; returns its path.
inline std::string WriteScratch(const std::string& name, const char* bytes,
                                size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  PS_FUZZ_REQUIRE(f != nullptr, path);
  PS_FUZZ_REQUIRE(size == 0 || std::fwrite(bytes, 1, size, f) == size, path);
  std::fclose(f);
  return path;
}

// What the coordinator does with a submitted spec, and what must then hold:
// a refusal names the field; an admitted spec's model splits into at most
// kMaxBlocksPerJob distinct blocks and its JSON form reads back unchanged
// (what is stored and shown is what was submitted).
inline void CheckSpec(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  const absl::Status valid = ValidateJobSpec(spec);
  const absl::Status submitted = ValidateSubmittedSpec(spec, JobLimits());
  if (!valid.ok()) {
    PS_FUZZ_REQUIRE(valid.code() == absl::StatusCode::kInvalidArgument,
                    valid.ToString());
    // The coordinator checks the model's size against its limit first: a
    // model too large for it is refused as such (RESOURCE_EXHAUSTED naming
    // "model"), whatever else is wrong with it.
    const bool too_large =
        submitted.code() == absl::StatusCode::kResourceExhausted &&
        absl::StartsWith(submitted.message(), "model: ");
    PS_FUZZ_REQUIRE(submitted == valid || too_large, submitted.ToString());
    RequireFieldError(valid);
    return;
  }
  if (!submitted.ok()) {
    // Too large a model, or fields the spec does not define.
    RequireFieldError(submitted);
    if (submitted.code() == absl::StatusCode::kInvalidArgument) return;
  }
  auto tensors = ModelTensors(spec.model());
  PS_FUZZ_REQUIRE(tensors.ok(), tensors.status().ToString());
  const std::vector<BlockSpec> blocks =
      SplitIntoBlocks(*tensors, spec.block_elems());
  PS_FUZZ_REQUIRE(static_cast<int64_t>(blocks.size()) <= kMaxBlocksPerJob,
                  std::to_string(blocks.size()));
  absl::flat_hash_set<uint64_t> keys;
  for (const BlockSpec& b : blocks) {
    PS_FUZZ_REQUIRE(keys.insert(b.key).second, std::to_string(b.key));
    PS_FUZZ_REQUIRE(b.num_elems >= 1 && b.num_elems <= spec.block_elems(),
                    std::to_string(b.num_elems));
  }
  // A refused spec is never stored: only an admitted one must read back.
  if (!submitted.ok()) return;
  auto again = JobSpecFromJson(JobSpecToJson(spec));
  PS_FUZZ_REQUIRE(again.ok(), again.status().ToString());
  PS_FUZZ_REQUIRE(again->SerializeAsString() == spec.SerializeAsString(),
                  JobSpecToJson(spec));
}

}  // namespace ps::fuzz

#endif  // PS_TESTS_FUZZ_FUZZ_UTIL_H_
