// A CTR worker's training samples, streamed from the Criteo file each epoch
// instead of held (docs/sparse.md, "Data: streamed, shuffled in windows"):
// the worker's shard is read in file order, a window of samples at a time,
// and each window is trained in a shuffled order, so the worker's memory is
// one window whatever the size of the data.
#ifndef PS_WORKER_CTR_SAMPLES_H_
#define PS_WORKER_CTR_SAMPLES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/criteo_reader.h"

namespace ps {

struct CtrSampleStreamOptions {
  // Samples per shuffle window (>= 1). Default 65536: about 17 MB of
  // samples (264 bytes each) and their order.
  int64_t window = int64_t{1} << 16;
};

// The epoch order of a shard of `per_worker` samples (the first per_worker
// of the shard; the rest of it is not trained): window k holds the shard's
// samples [k * window, min((k + 1) * window, per_worker)), the windows come
// in file order, and window k's samples in the order WindowOrder(seed,
// epoch, k, its size). Not thread-safe.
class CtrSampleStream {
 public:
  // The samples of `shard` of the Criteo file `path` (max_samples as for
  // ReadCriteoFile), `per_worker` >= 1 of them each epoch, shuffled with
  // `seed`. Opens nothing yet (Seek does).
  CtrSampleStream(std::string path, int64_t max_samples, CriteoShard shard,
                  int64_t per_worker, uint64_t seed,
                  CtrSampleStreamOptions options = {});

  // The order of window `index` of `size` samples in epoch `epoch`: a
  // permutation of [0, size). Window 0's is DataPartition::Create(size, 1)
  // ->EpochOrder(seed, epoch, 0), so a shard that fits one window trains in
  // the order of a shard held whole; window k > 0 draws from std::mt19937_64
  // seeded through a std::seed_seq of (seed's two halves, epoch, 0, k).
  // Thread-safe.
  static std::vector<int64_t> WindowOrder(uint64_t seed, int epoch,
                                          int64_t index, int64_t size);

  // Positions the stream at sample `position` (in [0, per_worker]) of epoch
  // `epoch`'s order: opens the file again and reads up to that window.
  // Errors: the file's (CriteoStream), OUT_OF_RANGE when the shard has
  // fewer than per_worker samples.
  absl::Status Seek(int epoch, int64_t position);

  // Copies the next `count` samples of the epoch's order into the buffers
  // (resized: count x 13 dense values, count x 26 ids, count labels),
  // reading windows as needed. Errors: FAILED_PRECONDITION without a Seek
  // or past the epoch's per_worker samples; the file's; OUT_OF_RANGE as
  // for Seek.
  absl::Status Next(int64_t count, std::vector<float>* dense,
                    std::vector<uint64_t>* ids, std::vector<int32_t>* labels);

  // The epoch and the position in its order of the next sample Next gives
  // (-1 before the first Seek).
  int epoch() const { return epoch_; }
  int64_t position() const { return position_; }

 private:
  // Reads window `index` of the epoch (the stream is at its start) and
  // shuffles it.
  absl::Status LoadWindow(int64_t index);

  const std::string path_;
  const int64_t max_samples_;
  const CriteoShard shard_;
  const int64_t per_worker_;
  const uint64_t seed_;
  const CtrSampleStreamOptions options_;
  std::optional<CriteoStream> file_;
  int epoch_ = -1;
  int64_t position_ = 0;
  int64_t window_index_ = -1;  // The window in window_.
  CtrDataset window_;
  std::vector<int64_t> order_;  // window_'s order.
};

}  // namespace ps

#endif  // PS_WORKER_CTR_SAMPLES_H_
