// Requests and replies of parameter_wire_test and its parameter_wire_*_test
// neighbours: pushes and pull replies built with Protobuf, bytes cut into
// segments or mutated at random, and checks that an in-place view holds
// exactly a message's fields.
#ifndef PS_TESTS_UNIT_COMMON_PARAMETER_WIRE_FIXTURE_H_
#define PS_TESTS_UNIT_COMMON_PARAMETER_WIRE_FIXTURE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/parameter_wire.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter.pb.h"

namespace ps::parameter_wire_test {

// The bytes of `values` as float32 (the wire's layout).
inline std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

// A push of float32 blocks (key, number of values) with distinct values.
inline v1::PushRequest Request(
    const std::string& job_id, int32_t worker, int64_t clock, int64_t version,
    const std::vector<std::pair<uint64_t, size_t>>& blocks) {
  v1::PushRequest r;
  r.set_job_id(job_id);
  r.set_worker_index(worker);
  r.set_clock(clock);
  r.set_map_version(version);
  float next = 0.5f;
  for (const auto& [key, floats] : blocks) {
    v1::Block* b = r.add_gradients();
    b->set_key(key);
    std::vector<float> values(floats);
    for (float& v : values) v = (next += 0.25f);
    b->set_data(FloatBytes(values));
  }
  return r;
}

// `bytes` cut into segments at the given offsets.
inline std::vector<std::string_view> Split(std::string_view bytes,
                                           std::vector<size_t> cuts) {
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::string_view> out;
  size_t at = 0;
  for (size_t cut : cuts) {
    cut = std::min(cut, bytes.size());
    if (cut < at) continue;
    out.push_back(bytes.substr(at, cut - at));  // Empty segments too.
    at = cut;
  }
  out.push_back(bytes.substr(at));
  return out;
}

// `view` holds exactly the fields of `message`.
inline void ExpectSame(const v1::PushRequest& message, const PushView& view) {
  EXPECT_EQ(view.job_id, message.job_id());
  EXPECT_EQ(view.worker_index, message.worker_index());
  EXPECT_EQ(view.clock, message.clock());
  EXPECT_EQ(view.map_version, message.map_version());
  EXPECT_EQ(view.gradient_encoding, message.gradient_encoding());
  ASSERT_EQ(view.gradients.size(), message.gradients_size());
  for (int i = 0; i < message.gradients_size(); ++i) {
    EXPECT_EQ(view.gradients[i].key, message.gradients(i).key());
    EXPECT_EQ(view.gradients[i].data.ToString(), message.gradients(i).data());
  }
  ASSERT_EQ(view.sparse.size(), message.sparse_size());
  for (int i = 0; i < message.sparse_size(); ++i) {
    EXPECT_EQ(view.sparse[i].table, message.sparse(i).table());
    EXPECT_EQ(view.sparse[i].keys.ToString(), message.sparse(i).keys());
    EXPECT_EQ(view.sparse[i].values.ToString(), message.sparse(i).values());
  }
}

// `r` with rows of sparse tables: (table, ids, dim) each.
inline v1::PushRequest WithSparse(
    v1::PushRequest r,
    const std::vector<std::tuple<uint32_t, std::vector<uint64_t>, int>>&
        tables) {
  float next = 0.125f;
  for (const auto& [table, ids, dim] : tables) {
    v1::SparseRows* rows = r.add_sparse();
    rows->set_table(table);
    rows->set_keys(std::string(reinterpret_cast<const char*>(ids.data()),
                               ids.size() * sizeof(uint64_t)));
    std::vector<float> values(ids.size() * dim);
    for (float& v : values) v = (next += 0.5f);
    rows->set_values(FloatBytes(values));
  }
  return r;
}

// A request whose gradients are in `encoding`, 2 bytes a value.
inline v1::PushRequest Encoded(v1::PushRequest r, v1::Precision encoding) {
  r.set_gradient_encoding(encoding);
  for (v1::Block& b : *r.mutable_gradients()) {
    b.mutable_data()->resize(b.data().size() / 2);
  }
  return r;
}

// `bytes` with 1 to 4 random edits: a byte replaced, inserted, erased or
// with one bit flipped.
inline std::string Mutated(std::string bytes, std::mt19937& rng) {
  const int edits = 1 + rng() % 4;
  for (int e = 0; e < edits; ++e) {
    const size_t at = bytes.empty() ? 0 : rng() % bytes.size();
    switch (rng() % 4) {
      case 0:
        if (!bytes.empty()) bytes[at] = static_cast<char>(rng());
        break;
      case 1:
        bytes.insert(at, 1, static_cast<char>(rng()));
        break;
      case 2:
        if (!bytes.empty()) bytes.erase(at, 1);
        break;
      case 3:
        if (!bytes.empty()) bytes[at] ^= static_cast<char>(1 << (rng() % 8));
        break;
    }
  }
  return bytes;
}

// Random mutations of valid messages (`trials` of them, drawn from `rng`):
// each is `seeds[i]` for a random i, Mutated, then parsed by Protobuf as a
// `Message` and by `parse` (ParsePushRequest, ParsePullResponse) from the
// bytes cut at two random offsets. Both must accept, or both refuse (a
// fatal failure otherwise, naming the trial); `accepted(message, view)`
// checks what both accepted, `refused(status)` what both refused. Adds to
// `*parsed` the number that Protobuf accepted.
template <typename Message, typename Parse, typename Accepted, typename Refused>
void CheckMutatedInput(const std::vector<std::string>& seeds, int trials,
                       std::mt19937& rng, Parse parse, Accepted accepted,
                       Refused refused, int* parsed) {
  for (int trial = 0; trial < trials; ++trial) {
    const std::string bytes = Mutated(seeds[rng() % seeds.size()], rng);
    Message message;
    const bool ok = message.ParseFromString(bytes);
    const std::vector<std::string_view> segments =
        Split(bytes, {rng() % (bytes.size() + 1), rng() % (bytes.size() + 1)});
    const auto view = parse(segments);
    ASSERT_EQ(view.ok(), ok)
        << "trial " << trial << ": "
        << (view.ok() ? "accepted" : view.status().ToString());
    if (ok) {
      ++*parsed;
      accepted(message, *view);
    } else {
      refused(view.status());
    }
  }
}

// A pull reply of float32 blocks (key, number of values) with distinct
// values, `min_clock` and the workers' `clocks`.
inline v1::PullResponse PullReply(
    const std::vector<std::pair<uint64_t, size_t>>& blocks, int64_t min_clock,
    const std::vector<int64_t>& clocks) {
  v1::PullResponse r;
  float next = -3.0f;
  for (const auto& [key, floats] : blocks) {
    v1::Block* b = r.add_blocks();
    b->set_key(key);
    std::vector<float> values(floats);
    for (float& v : values) v = (next += 0.5f);
    b->set_data(FloatBytes(values));
  }
  r.set_min_clock(min_clock);
  for (int64_t c : clocks) r.add_worker_clocks(c);
  return r;
}

// `bytes` read as float32 values.
inline std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  // memcpy of nothing still needs valid pointers (an empty vector's data()
  // is null): UBSan.
  if (!out.empty()) {
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  }
  return out;
}

// `view` holds exactly the fields of `message`.
inline void ExpectSamePull(const v1::PullResponse& message,
                           const PullView& view) {
  EXPECT_EQ(view.min_clock, message.min_clock());
  EXPECT_EQ(view.worker_clocks,
            std::vector<int64_t>(message.worker_clocks().begin(),
                                 message.worker_clocks().end()));
  ASSERT_EQ(view.blocks.size(), message.blocks_size());
  for (int i = 0; i < message.blocks_size(); ++i) {
    EXPECT_EQ(view.blocks[i].key, message.blocks(i).key());
    EXPECT_EQ(view.blocks[i].data.ToString(), message.blocks(i).data());
  }
  ASSERT_EQ(view.sparse.size(), message.sparse_size());
  for (int i = 0; i < message.sparse_size(); ++i) {
    EXPECT_EQ(view.sparse[i].table, message.sparse(i).table());
    EXPECT_EQ(view.sparse[i].values.ToString(), message.sparse(i).values());
  }
}

}  // namespace ps::parameter_wire_test

#endif  // PS_TESTS_UNIT_COMMON_PARAMETER_WIRE_FIXTURE_H_
