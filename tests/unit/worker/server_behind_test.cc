// How a worker reads a server's refusal of its shard map (worker/trainer.h:
// IsMapChange, ServerBehind): from the structured detail the refusal
// carries (common/status_details.h), never from its message.
#include "common/status_details.h"
#include "gtest/gtest.h"
#include "worker/trainer.h"

namespace ps {
namespace {

absl::Status Refusal(int64_t request_version, int64_t server_version) {
  v1::MapVersionRefusal refusal;
  refusal.set_request_map_version(request_version);
  refusal.set_server_map_version(server_version);
  return WithMapVersionRefusal(
      absl::FailedPreconditionError("push from server a: refused"), refusal);
}

TEST(ServerBehindTest, TheRefusalsDetailSaysWhetherTheServerIsBehind) {
  EXPECT_TRUE(IsMapChange(Refusal(4, 3)));
  EXPECT_TRUE(ServerBehind(Refusal(4, 3), 4));
  EXPECT_FALSE(ServerBehind(Refusal(4, 4), 4));
  EXPECT_FALSE(ServerBehind(Refusal(4, 5), 4));
  // A server that left the job does not know its version: not behind.
  EXPECT_FALSE(ServerBehind(Refusal(4, 0), 4));
}

TEST(ServerBehindTest, TheMessageIsNotParsed) {
  const absl::Status text = absl::FailedPreconditionError(
      "map_version: request has shard map version 4, this server has "
      "version 3");
  EXPECT_TRUE(IsMapChange(text));  // A refusal still, by its prefix.
  EXPECT_FALSE(ServerBehind(text, 4));
  EXPECT_FALSE(ServerBehind(absl::UnavailableError("x"), 4));
}

}  // namespace
}  // namespace ps
