// Calls on one ServerJob for its unit tests (server_job_test and its
// server_job_*_test neighbours): requests of float32 blocks, pulls and pushes
// whose callbacks are kept, decoded pull replies, and the shard map of a job
// on one server.
#ifndef PS_TESTS_TESTING_SERVER_JOB_CALLS_H_
#define PS_TESTS_TESTING_SERVER_JOB_CALLS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/float_codec.h"
#include "common/model_layout.h"
#include "gtest/gtest.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/parameter.pb.h"
#include "server/server_job.h"

namespace ps::testing {

// Values of blocks by block key.
using BlockValues = std::map<uint64_t, std::vector<float>>;

// The float32 blocks of a pull reply, decoded.
inline BlockValues ValuesOf(const v1::PullResponse& reply) {
  BlockValues values;
  for (const v1::Block& b : reply.blocks()) {
    std::vector<float>& v = values[b.key()];
    v.resize(FloatCount(b.data()));
    DecodeFloats(b.data(), v);
  }
  return values;
}

// A push of `worker` at `clock` on shard map `version` carrying `gradients`
// as float32 blocks.
inline v1::PushRequest FloatPush(const std::string& job_id, int worker,
                                 int64_t clock, int64_t version,
                                 const BlockValues& gradients) {
  v1::PushRequest request;
  request.set_job_id(job_id);
  request.set_worker_index(worker);
  request.set_clock(clock);
  request.set_map_version(version);
  for (const auto& [key, g] : gradients) {
    v1::Block* block = request.add_gradients();
    block->set_key(key);
    EncodeFloats(g, block->mutable_data());
  }
  return request;
}

// Every block of the assignment's model, cut into `block_elems`, placed on
// server 0 of its shard map (whose servers and version the caller sets).
inline void PlaceEveryBlockOnServer0(v1::Assignment* assignment,
                                     int block_elems) {
  auto tensors = ModelTensors(assignment->spec().model());
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  if (!tensors.ok()) return;
  v1::ShardMap* map = assignment->mutable_shard_map();
  for (const BlockSpec& b : SplitIntoBlocks(*tensors, block_elems)) {
    v1::BlockPlacement* p = map->add_blocks();
    p->set_key(b.key);
    p->set_server(0);
    p->set_num_elems(b.num_elems);
  }
}

// The state of one call (a Pull or a Push): whether its callback ran, and
// with what.
template <typename Response>
struct CallResult {
  int calls = 0;
  absl::StatusOr<Response> reply = absl::UnknownError("not called");
};
using PullResult = CallResult<v1::PullResponse>;
// A Push's callback is parked under BSP until the clock applies.
using PushResult = CallResult<v1::PushResponse>;

// A callback that counts its calls and keeps the reply in `result`.
template <typename Response>
std::function<void(absl::StatusOr<Response>)> KeepIn(
    std::shared_ptr<CallResult<Response>> result) {
  return [result = std::move(result)](absl::StatusOr<Response> reply) {
    ++result->calls;
    result->reply = std::move(reply);
  };
}

// Sends `request` to `job`; the result fills in when the pull is answered
// (at once, or when the clock it waits for comes).
inline std::shared_ptr<PullResult> SendPull(ServerJob& job,
                                            const v1::PullRequest& request) {
  auto result = std::make_shared<PullResult>();
  job.Pull(request, KeepIn(result));
  return result;
}

// Pushes `request` and waits for the job's update-log writer thread, so that
// what the push completes has been answered.
inline std::shared_ptr<PushResult> StartPush(ServerJob& job,
                                             const v1::PushRequest& request) {
  auto result = std::make_shared<PushResult>();
  job.Push(request, KeepIn(result));
  EXPECT_TRUE(job.Flush().ok());
  return result;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_SERVER_JOB_CALLS_H_
