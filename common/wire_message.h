// A serialized message in a buffer of its own, and a pool of such buffers:
// what a server hands gRPC as a reply without another copy
// (common/parameter_wire.h, EncodePullResponse).
#ifndef PS_COMMON_WIRE_MESSAGE_H_
#define PS_COMMON_WIRE_MESSAGE_H_

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {

class WireBufferPool;

// A serialized message in one buffer of its own (no zero fill): what a
// server hands gRPC without another copy. Move-only; a buffer taken from a
// WireBufferPool goes back to it when the message is destroyed.
class WireMessage {
 public:
  WireMessage() = default;
  WireMessage(WireMessage&& other) noexcept;
  WireMessage& operator=(WireMessage&& other) noexcept;
  ~WireMessage();
  // A message of `size` bytes in a buffer of its own (contents unset).
  static WireMessage Allocate(size_t size);
  // A message of `size` bytes written into memory it does not own, at
  // `data` (a reply written straight into a worker's shared region); the
  // memory stays valid while `keep_alive` does, which the message holds.
  static WireMessage Borrow(char* data, size_t size,
                            std::shared_ptr<const void> keep_alive);

  char* data() { return borrowed_ != nullptr ? borrowed_ : data_.get(); }
  const char* data() const {
    return borrowed_ != nullptr ? borrowed_ : data_.get();
  }
  size_t size() const { return size_; }
  std::string_view view() const { return {data(), size_}; }

 private:
  friend class WireBufferPool;
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  std::shared_ptr<WireBufferPool> pool_;  // Null: not pooled.
  char* borrowed_ = nullptr;              // Set by Borrow (data_ is null).
  std::shared_ptr<const void> keep_alive_;
};

// Reply buffers kept for reuse, so that a large reply is not allocated and
// page-faulted anew (4 KiB at a time: 16,384 faults for 64 MiB) for every
// pull. Only buffers of kMinPooledBytes and more are pooled: glibc's malloc
// always maps those afresh (its dynamic mmap threshold stops at 32 MiB),
// while smaller ones it serves again from its heap once one of that size has
// been freed (pooling them measured no better, and by keeping large blocks
// from being freed it left the threshold low for the rest of the process).
// Holds at most `max_free` idle buffers; a buffer is reused only for a
// message of at least half its size. Thread-safe; create it with
// std::make_shared (messages keep it alive).
class WireBufferPool : public std::enable_shared_from_this<WireBufferPool> {
 public:
  static constexpr size_t kMinPooledBytes = size_t{32} << 20;

  explicit WireBufferPool(int max_free) : max_free_(max_free) {}

  // A message of `size` bytes (contents unset).
  WireMessage Take(size_t size);
  // Idle buffers held now (tests).
  int free_buffers() const;

 private:
  friend class WireMessage;
  void Return(std::unique_ptr<char[]> data, size_t capacity);

  const int max_free_;
  mutable absl::Mutex mu_;
  std::vector<std::pair<std::unique_ptr<char[]>, size_t>> free_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_COMMON_WIRE_MESSAGE_H_
