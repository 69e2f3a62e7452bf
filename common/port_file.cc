#include "common/port_file.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status WritePortFile(const std::string& path, int grpc_port,
                           int metrics_port) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "grpc_port=" << grpc_port << "\nmetrics_port=" << metrics_port
        << "\n";
    if (!out.flush()) {
      return absl::UnavailableError(
          absl::StrCat("cannot write port file ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace ps
