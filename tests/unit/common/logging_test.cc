// Log lines stay single lines whatever text a client sends.
#include "common/logging.h"

#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(EscapeForLogTest, ControlBytesCannotForgeALine) {
  EXPECT_EQ(EscapeForLog("job-000001 submitted: plain name"),
            "job-000001 submitted: plain name");
  EXPECT_EQ(EscapeForLog("x\n2026-01-01T00:00:00.000 I job-000002 cancelled"),
            "x\\n2026-01-01T00:00:00.000 I job-000002 cancelled");
  EXPECT_EQ(EscapeForLog("a\rb\tc"), "a\\rb\\tc");
  EXPECT_EQ(EscapeForLog(std::string("nul\0esc\x1b[31m", 12)),
            "nul\\x00esc\\x1b[31m");
  EXPECT_EQ(EscapeForLog("del\x7f"), "del\\x7f");
  // Backslashes are doubled so that an escape in the text reads as text.
  EXPECT_EQ(EscapeForLog("a\\nb"), "a\\\\nb");
  // UTF-8 passes through.
  EXPECT_EQ(EscapeForLog("modèle"), "modèle");
}

}  // namespace
}  // namespace ps
