// Reader for IDX files (the MNIST / Fashion-MNIST format), plain or gzip.
#ifndef PS_COMMON_IDX_READER_H_
#define PS_COMMON_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// A labelled data set held in memory: `features` is row-major
// [num_samples x dim]. A plain value type; no internal synchronisation.
struct Dataset {
  int64_t num_samples = 0;
  int64_t dim = 0;
  std::vector<float> features;  // uint8 pixels scaled to [0, 1].
  std::vector<int32_t> labels;  // num_samples labels, each in [0, 256).
};

// Reads an IDX3 unsigned-byte images file ([count x rows x cols]) and an IDX1
// unsigned-byte labels file ([count]), each gzip-compressed or plain, keeping
// the first `max_samples` samples (0 or negative: all). Pixels become
// features pixel / 255. Thread-safe (touches no shared state).
// Errors: NOT_FOUND for a missing file (the message names the path);
// INVALID_ARGUMENT for a bad magic number, an unsupported element type or rank,
// an empty image shape, or different sample counts in the two files (the
// message names the path and what was wrong); DATA_LOSS for a file shorter
// than its header says or a corrupt gzip stream; another code for other I/O
// failures (for example PERMISSION_DENIED).
absl::StatusOr<Dataset> ReadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       int64_t max_samples);

}  // namespace ps

#endif  // PS_COMMON_IDX_READER_H_
