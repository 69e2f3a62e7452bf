// The membership version of a push (elastic jobs; PushRequest field 8) on
// the hand-written wire path: PushFramer writes it last, as Protobuf does,
// and ParsePushRequest reads it.
#include <string>
#include <string_view>
#include <vector>

#include "common/parameter_wire.h"
#include "gtest/gtest.h"
#include "ps/v1/parameter.pb.h"

namespace ps {
namespace {

TEST(PushWireMembershipTest, FramerWritesAndParserReadsTheVersion) {
  for (int64_t version : {int64_t{0}, int64_t{1}, int64_t{1} << 40}) {
    v1::PushRequest r;
    r.set_job_id("job-1");
    r.set_worker_index(3);
    r.set_clock(17);
    r.set_map_version(2);
    r.set_gradient_encoding(v1::FP16);
    v1::Block* block = r.add_gradients();
    block->set_key(5);
    block->set_data(std::string(8, '\1'));
    v1::SparseRows* rows = r.add_sparse();
    rows->set_table(1);
    rows->set_keys(std::string(8, '\2'));
    rows->set_values(std::string(4, '\3'));
    r.set_membership_version(version);
    const PushFramer framer(r.job_id(), r.worker_index(), r.clock(),
                            r.map_version(), r.gradient_encoding(), version);
    std::string framed = framer.Header();
    framed += PushFramer::BlockPrefix(block->key(), block->data().size());
    framed += block->data();
    framed += framer.Trailer();
    framed += PushFramer::SparseRowsField(rows->table(), rows->keys(),
                                          rows->values());
    framed += framer.Ending();
    EXPECT_EQ(framed, r.SerializeAsString()) << version;
    EXPECT_EQ(framer.Ending().empty(), version == 0);
    const std::vector<std::string_view> segments = {framed};
    auto parsed = ParsePushRequest(segments);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->membership_version, version);
    EXPECT_EQ(parsed->Header().membership_version(), version);
    EXPECT_EQ(ViewOf(r).membership_version, version);
  }
}

}  // namespace
}  // namespace ps
