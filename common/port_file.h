// Lets a process started with port 0 tell its launcher which ports it bound.
#ifndef PS_COMMON_PORT_FILE_H_
#define PS_COMMON_PORT_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace ps {

// Writes "grpc_port=<p>\nmetrics_port=<m>\n" to `path` atomically (a temporary
// file renamed into place), so a reader never sees a partial file. Errors:
// UNAVAILABLE naming the path.
absl::Status WritePortFile(const std::string& path, int grpc_port,
                           int metrics_port);

}  // namespace ps

#endif  // PS_COMMON_PORT_FILE_H_
