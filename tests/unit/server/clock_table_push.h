// The push the clock table tests (clock_table_test and its clock_table_*_test
// neighbours) make again and again: one that must be applied.
#ifndef PS_TESTS_UNIT_SERVER_CLOCK_TABLE_PUSH_H_
#define PS_TESTS_UNIT_SERVER_CLOCK_TABLE_PUSH_H_

#include <cstdint>

#include "gtest/gtest.h"
#include "server/clock_table.h"

namespace ps {

// Checks and records a push that must be applied (a test failure naming the
// worker and clock otherwise); returns RecordPush's result.
inline bool Push(ClockTable& table, int worker, int64_t clock) {
  auto disposition = table.CheckPush(worker, clock);
  EXPECT_TRUE(disposition.ok()) << disposition.status();
  EXPECT_EQ(disposition.value_or(PushDisposition::kDuplicate),
            PushDisposition::kApply)
      << "worker " << worker << " clock " << clock;
  if (!disposition.ok() || *disposition != PushDisposition::kApply) {
    return false;
  }
  return table.RecordPush(worker, clock);
}

}  // namespace ps

#endif  // PS_TESTS_UNIT_SERVER_CLOCK_TABLE_PUSH_H_
