#include "worker/elastic_plan.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// The permutation of epoch `epoch`: std::shuffle driven by std::mt19937_64
// seeded through a std::seed_seq of the seed's halves, the epoch and a tag.
std::vector<int64_t> EpochPermutation(int64_t num_samples, uint64_t seed,
                                      int epoch) {
  std::vector<int64_t> order(num_samples);
  std::iota(order.begin(), order.end(), 0);
  constexpr uint32_t kElasticTag = 0x656c6173;  // "elas"
  std::seed_seq seq{static_cast<uint32_t>(seed),
                    static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch), kElasticTag};
  std::mt19937_64 rng(seq);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

}  // namespace

absl::StatusOr<ElasticPlan> ElasticPlan::Create(
    int64_t num_samples, int64_t batch, int epochs, uint64_t seed,
    const MembershipHistory& history, int initial_workers) {
  if (num_samples < 1 || batch < 1 || epochs < 1 || initial_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("elastic plan: ", num_samples, " samples, batch ", batch,
                     ", ", epochs, " epochs, ", initial_workers, " workers"));
  }
  ElasticPlan plan;
  plan.batch_ = batch;
  int64_t clock = 0;
  std::shared_ptr<const std::vector<int>> members;
  int64_t members_from = -1;  // The clock `members` was taken at.
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::vector<int64_t> order = EpochPermutation(num_samples, seed, epoch);
    const int64_t epoch_start = clock;
    int64_t pos = 0;
    while (true) {
      std::vector<int> now = MembersAt(history, clock, initial_workers);
      if (members == nullptr || *members != now) {
        members = std::make_shared<const std::vector<int>>(std::move(now));
      }
      // A change at this clock whose places left: their samples not applied
      // everywhere are trained again, first.
      if (members_from != clock) {
        members_from = clock;
        for (const v1::MembershipChange& change : history) {
          if (change.clock() != clock || change.left().empty()) continue;
          std::vector<int64_t> again;
          for (int i = 0; i < change.left_size(); ++i) {
            const int place = change.left(i);
            const int64_t from = std::max(
                i < change.left_clocks_size() ? change.left_clocks(i) : clock,
                epoch_start);
            for (int64_t c = from; c < clock; ++c) {
              const Clock& at = plan.clocks_[c];
              const auto& m = *at.members;
              auto rank = std::find(m.begin(), m.end(), place);
              if (rank == m.end()) continue;
              const int64_t begin = at.offset + (rank - m.begin()) * batch;
              again.insert(again.end(), order.begin() + begin,
                           order.begin() + begin + batch);
            }
          }
          order.insert(order.begin() + pos, again.begin(), again.end());
        }
      }
      const int64_t global = static_cast<int64_t>(members->size()) * batch;
      if (members->empty() ||
          pos + global > static_cast<int64_t>(order.size())) {
        break;
      }
      plan.clocks_.push_back(
          {.epoch = epoch, .offset = pos, .members = members});
      pos += global;
      ++clock;
    }
    if (clock == epoch_start) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch_size: ", members->size(), " workers of ", batch,
                       " samples need more than the ", num_samples,
                       " samples of the training set"));
    }
    plan.orders_.push_back(std::move(order));
  }
  return plan;
}

bool ElasticPlan::Member(int64_t clock, int place) const {
  if (clock < 0 || clock >= total_clocks()) return false;
  const auto& m = *clocks_[clock].members;
  return std::find(m.begin(), m.end(), place) != m.end();
}

std::span<const int64_t> ElasticPlan::Samples(int64_t clock, int place) const {
  if (clock < 0 || clock >= total_clocks()) return {};
  const Clock& at = clocks_[clock];
  const auto& m = *at.members;
  auto rank = std::find(m.begin(), m.end(), place);
  if (rank == m.end()) return {};
  return std::span<const int64_t>(orders_[at.epoch])
      .subspan(at.offset + (rank - m.begin()) * batch_, batch_);
}

}  // namespace ps
