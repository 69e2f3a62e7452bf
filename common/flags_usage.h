// --help for the executables: lists each executable's own flags.
#ifndef PS_COMMON_FLAGS_USAGE_H_
#define PS_COMMON_FLAGS_USAGE_H_

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace ps {

// Sets the program's usage message and makes --help and --helpshort list the
// flags defined in *_main.cc files (each executable's own, with their
// defaults) and the members' shared flags (common/member_flags.cc). Abseil's
// default lists only flags of a file named after the program
// (ps-coordinator.cc, main.cc), which no file here is, so --help printed "No
// flags matched". Call first in main(), before absl::ParseCommandLine. Not
// thread-safe.
inline void SetUpFlagsUsage(absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "_main.cc") ||
           absl::EndsWith(file, "common/member_flags.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace ps

#endif  // PS_COMMON_FLAGS_USAGE_H_
