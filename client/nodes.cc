#include "client/nodes.h"

#include <algorithm>
#include <array>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "ps/v1/job_service.grpc.pb.h"

namespace ps {
namespace {

constexpr int kColumns = 7;
using Row = std::array<std::string, kColumns>;

std::string RoleOf(v1::NodeRole role) {
  switch (role) {
    case v1::SERVER:
      return "server";
    case v1::WORKER:
      return "worker";
    default:
      return "unknown";
  }
}

Row RowOf(const v1::NodeInfo& node, absl::Time now) {
  const bool assigned = node.state() == v1::NODE_ASSIGNED;
  const absl::Duration since =
      now - absl::FromUnixMillis(node.last_heartbeat_unix_ms());
  return {node.node_id(),
          RoleOf(node.role()),
          node.address().empty() ? node.peer_host() : node.address(),
          assigned ? "assigned" : "idle",
          assigned ? node.job_id() : "-",
          assigned ? absl::StrCat(node.index()) : "-",
          absl::StrFormat("%.1fs ago", absl::ToDoubleSeconds(std::max(
                                           since, absl::ZeroDuration())))};
}

}  // namespace

absl::StatusOr<std::vector<v1::NodeInfo>> ListNodes(
    const JobClientOptions& options) {
  std::unique_ptr<v1::JobService::Stub> stub =
      v1::JobService::NewStub(CreateJobServiceChannel(options));
  PS_ASSIGN_OR_RETURN(
      v1::ListNodesResponse response,
      CallCoordinator(options, *stub, &v1::JobService::Stub::ListNodes,
                      v1::ListNodesRequest()));
  return std::vector<v1::NodeInfo>(
      std::make_move_iterator(response.mutable_nodes()->begin()),
      std::make_move_iterator(response.mutable_nodes()->end()));
}

std::string FormatNodesTable(const std::vector<v1::NodeInfo>& nodes,
                             absl::Time now) {
  if (nodes.empty()) return "no nodes registered\n";
  std::vector<Row> rows = {
      {"NODE", "ROLE", "ADDRESS", "STATE", "JOB", "INDEX", "LAST HEARTBEAT"}};
  for (const v1::NodeInfo& node : nodes) rows.push_back(RowOf(node, now));
  std::array<size_t, kColumns> widths{};
  for (const Row& row : rows) {
    for (int c = 0; c < kColumns; ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  std::string table;
  for (const Row& row : rows) {
    std::string line;
    for (int c = 0; c < kColumns; ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < kColumns) {
        line.append(widths[c] - row[c].size() + 2, ' ');
      }
    }
    absl::StrAppend(&table, line, "\n");
  }
  return table;
}

}  // namespace ps
