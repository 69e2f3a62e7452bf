// The C++ answers to what the Python SDK computes again (docs/python.md,
// "What the SDK shares with the C++"), for tests/python/
// test_layout_conformance.py: a test tool, built but never installed.
//
// Reads lines from stdin and writes one JSON object per line to stdout:
//   spec <JobSpec JSON>     (Protobuf's JSON mapping, as psctl submit reads)
//     {"tensors": [{"name", "shape", "from_worker"}...], "digest",
//      "derived_block_elems" (DeriveBlockElems of the model and num_servers),
//      "block_elems" (the spec's after ApplyJobSpecDefaults), "blocks":
//      [[key, tensor, offset, num_elems]...] (SplitIntoBlocks), "staleness"
//      (EffectiveStaleness), "servers": [[keys of server s]...] (the
//      coordinator's PlanShards, grouped as ParameterClient::Create groups a
//      server's blocks), "valid": true}; {"valid": false, "invalid":
//      ValidateJobSpec's message} for a spec the coordinator refuses; or
//      {"error": "..."} when the JSON or the model does not parse.
//   floats <hex bits> ...   (float32 bit patterns)
//     {"fp16": [...], "bf16": [...]} (EncodeFp16, EncodeBf16: wire gradients)
//   ids <table> <num_buckets> <id> ...   (decimal uint64 ids)
//     {"buckets": [...]} (BucketOfId: where a sparse row lives)
// A spec's "digest" covers its sparse tables (ModelDigest(tensors, model)).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/half_codec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/sparse_keys.h"
#include "coordinator/shard_planner.h"

namespace ps {
namespace {

// `text` as a JSON string (quotes, backslashes and control bytes escaped;
// other bytes, UTF-8 included, as they are).
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string ErrorLine(const absl::Status& status) {
  return absl::StrCat("{\"error\": ", JsonString(status.ToString()), "}");
}

// The per-server key lists of `spec`'s shard map on num_servers servers.
absl::StatusOr<std::string> ServersJson(const v1::JobSpec& spec,
                                        const std::vector<BlockSpec>& blocks) {
  std::vector<std::string> addresses;
  addresses.reserve(std::max(1, spec.num_servers()));
  for (int s = 0; s < std::max(1, spec.num_servers()); ++s) {
    addresses.push_back(absl::StrCat("server", s));
  }
  absl::StatusOr<v1::ShardMap> map = PlanShards(spec, addresses, 1);
  if (!map.ok()) return map.status();
  absl::flat_hash_map<uint64_t, int> placement;
  for (const auto& p : map->blocks()) {
    // Sparse tables' buckets are not blocks of the dense layout.
    if (!IsBucketKey(p.key())) placement[p.key()] = p.server();
  }
  if (placement.size() != blocks.size()) {
    return absl::InternalError(absl::StrCat("the shard map places ",
                                            placement.size(), " blocks of ",
                                            blocks.size()));
  }
  std::vector<std::vector<uint64_t>> keys(addresses.size());
  for (const BlockSpec& b : blocks) {
    const auto it = placement.find(b.key);
    if (it == placement.end()) {
      return absl::InternalError(absl::StrCat("block ", b.key, " unplaced"));
    }
    keys[it->second].push_back(b.key);
  }
  std::vector<std::string> lists;
  lists.reserve(keys.size());
  for (const auto& k : keys) {
    lists.push_back(absl::StrCat("[", absl::StrJoin(k, ", "), "]"));
  }
  return absl::StrCat("[", absl::StrJoin(lists, ", "), "]");
}

std::string SpecLine(const std::string& json) {
  absl::StatusOr<v1::JobSpec> parsed = JobSpecFromJson(json);
  if (!parsed.ok()) return ErrorLine(parsed.status());
  absl::StatusOr<std::vector<TensorSpec>> tensors =
      ModelTensors(parsed->model());
  if (!tensors.ok()) return ErrorLine(tensors.status());
  v1::JobSpec spec = *parsed;
  ApplyJobSpecDefaults(&spec);
  const absl::Status valid = ValidateJobSpec(spec);
  if (!valid.ok()) {
    return absl::StrCat("{\"valid\": false, \"invalid\": ",
                        JsonString(std::string(valid.message())), "}");
  }
  const std::vector<BlockSpec> blocks =
      SplitIntoBlocks(*tensors, spec.block_elems());
  absl::StatusOr<std::string> servers = ServersJson(spec, blocks);
  if (!servers.ok()) return ErrorLine(servers.status());

  std::vector<std::string> tensor_json;
  tensor_json.reserve(tensors->size());
  for (const TensorSpec& t : *tensors) {
    tensor_json.push_back(
        absl::StrCat("{\"name\": ", JsonString(t.name), ", \"shape\": [",
                     absl::StrJoin(t.shape, ", "), "], \"from_worker\": ",
                     t.init == InitKind::kFromWorker ? "true" : "false",
                     ", \"buffer\": ", t.buffer ? "true" : "false", "}"));
  }
  std::vector<std::string> block_json;
  block_json.reserve(blocks.size());
  for (const BlockSpec& b : blocks) {
    block_json.push_back(absl::StrCat("[", b.key, ", ", b.tensor_index, ", ",
                                      b.offset, ", ", b.num_elems, "]"));
  }
  return absl::StrCat(
      "{\"tensors\": [", absl::StrJoin(tensor_json, ", "),
      "], \"digest\": ", JsonString(ModelDigest(*tensors, parsed->model())),
      ", \"derived_block_elems\": ",
      DeriveBlockElems(*tensors, parsed->num_servers()),
      ", \"block_elems\": ", spec.block_elems(), ", \"blocks\": [",
      absl::StrJoin(block_json, ", "),
      "], \"staleness\": ", EffectiveStaleness(spec.consistency()),
      ", \"servers\": ", *servers, ", \"valid\": true}");
}

std::string FloatsLine(const std::string& words) {
  std::vector<float> values;
  for (absl::string_view word :
       absl::StrSplit(words, ' ', absl::SkipWhitespace())) {
    uint32_t bits = 0;
    if (!absl::SimpleHexAtoi(word, &bits)) {
      return ErrorLine(absl::InvalidArgumentError(
          absl::StrCat("not a hex float32 bit pattern: ", word)));
    }
    float value;
    std::memcpy(&value, &bits, sizeof value);
    values.push_back(value);
  }
  std::vector<uint16_t> fp16(values.size());
  std::vector<uint16_t> bf16(values.size());
  EncodeFp16(values, fp16.data());
  EncodeBf16(values, bf16.data());
  return absl::StrCat("{\"fp16\": [", absl::StrJoin(fp16, ", "),
                      "], \"bf16\": [", absl::StrJoin(bf16, ", "), "]}");
}

std::string IdsLine(const std::string& words) {
  std::vector<uint64_t> numbers;
  for (absl::string_view word :
       absl::StrSplit(words, ' ', absl::SkipWhitespace())) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(word, &n)) {
      return ErrorLine(absl::InvalidArgumentError(
          absl::StrCat("not a decimal uint64: ", word)));
    }
    numbers.push_back(n);
  }
  if (numbers.size() < 2 || numbers[0] > UINT32_MAX || numbers[1] == 0 ||
      numbers[1] > uint64_t{kMaxBucketsPerTable}) {
    return ErrorLine(absl::InvalidArgumentError(
        "ids <table> <num_buckets> <id>...: a table and a bucket count"));
  }
  const auto table = static_cast<uint32_t>(numbers[0]);
  const auto num_buckets = static_cast<uint32_t>(numbers[1]);
  std::vector<uint32_t> buckets;
  buckets.reserve(numbers.size() - 2);
  for (size_t i = 2; i < numbers.size(); ++i) {
    buckets.push_back(BucketOfId(numbers[i], table, num_buckets));
  }
  return absl::StrCat("{\"buckets\": [", absl::StrJoin(buckets, ", "), "]}");
}

}  // namespace
}  // namespace ps

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.rfind("spec ", 0) == 0) {
      std::cout << ps::SpecLine(line.substr(5)) << "\n";
    } else if (line.rfind("floats ", 0) == 0) {
      std::cout << ps::FloatsLine(line.substr(7)) << "\n";
    } else if (line.rfind("ids ", 0) == 0) {
      std::cout << ps::IdsLine(line.substr(4)) << "\n";
    } else {
      std::cout << ps::ErrorLine(absl::InvalidArgumentError(
                       "a line starts with \"spec \", \"floats \" or \"ids \""))
                << "\n";
    }
  }
  return 0;
}
