#include "server/bucket_rows_source.h"

#include <string>
#include <vector>

#include "common/status_macros.h"
#include "server/shard_store.h"

namespace ps {

uint64_t BucketRowsBytes(const BucketRowsSource& source) {
  uint64_t bytes = 0;
  for (const BucketRowsSize& bucket : source.buckets()) bytes += bucket.rows;
  return bytes;
}

absl::Status Materialize(const ShardWrite& write, BucketRowsSource& rows,
                         std::vector<std::string>* encoded, ShardWrite* whole) {
  const std::span<const BucketRowsSize> buckets = rows.buckets();
  encoded->assign(buckets.size(), std::string());
  *whole = write;
  whole->blocks.reserve(write.blocks.size() + buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].rows > 0) {
      PS_ASSIGN_OR_RETURN(const std::string_view next, rows.Next());
      (*encoded)[i].assign(next);
    }
    whole->blocks.push_back({.key = buckets[i].key, .rows = (*encoded)[i]});
  }
  return absl::OkStatus();
}

absl::Status WriteMaterialized(ShardStore& store, const ShardWrite& write,
                               BucketRowsSource& rows) {
  std::vector<std::string> encoded;
  ShardWrite whole;
  PS_RETURN_IF_ERROR(Materialize(write, rows, &encoded, &whole));
  return store.Write(whole);
}

}  // namespace ps
