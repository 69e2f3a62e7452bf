#include "common/wire_message.h"

#include <utility>

namespace ps {

WireMessage::WireMessage(WireMessage&& other) noexcept
    : data_(std::move(other.data_)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      pool_(std::move(other.pool_)),
      borrowed_(std::exchange(other.borrowed_, nullptr)),
      keep_alive_(std::move(other.keep_alive_)) {}

WireMessage& WireMessage::operator=(WireMessage&& other) noexcept {
  if (this != &other) {
    WireMessage old(std::move(*this));
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    pool_ = std::move(other.pool_);
    borrowed_ = std::exchange(other.borrowed_, nullptr);
    keep_alive_ = std::move(other.keep_alive_);
  }
  return *this;
}

WireMessage::~WireMessage() {
  if (pool_ != nullptr && data_ != nullptr) {
    pool_->Return(std::move(data_), capacity_);
  }
}

WireMessage WireMessage::Allocate(size_t size) {
  WireMessage out;
  out.data_.reset(new char[size]);  // Uninitialised: every byte is written.
  out.size_ = size;
  out.capacity_ = size;
  return out;
}

WireMessage WireMessage::Borrow(char* data, size_t size,
                                std::shared_ptr<const void> keep_alive) {
  WireMessage out;
  out.borrowed_ = data;
  out.size_ = size;
  out.capacity_ = size;
  out.keep_alive_ = std::move(keep_alive);
  return out;
}

WireMessage WireBufferPool::Take(size_t size) {
  if (size < kMinPooledBytes) return WireMessage::Allocate(size);
  WireMessage out;
  out.size_ = size;
  out.pool_ = shared_from_this();
  {
    absl::MutexLock lock(&mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= size && it->second / 2 <= size) {
        out.data_ = std::move(it->first);
        out.capacity_ = it->second;
        free_.erase(it);
        return out;
      }
    }
  }
  out.data_.reset(new char[size]);  // Uninitialised: every byte is written.
  out.capacity_ = size;
  return out;
}

void WireBufferPool::Return(std::unique_ptr<char[]> data, size_t capacity) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(free_.size()) < max_free_) {
    free_.emplace_back(std::move(data), capacity);
  } else if (!free_.empty()) {
    // Keep the most recently used buffers (the likeliest sizes).
    free_.erase(free_.begin());
    free_.emplace_back(std::move(data), capacity);
  }
}

int WireBufferPool::free_buffers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(free_.size());
}

}  // namespace ps
