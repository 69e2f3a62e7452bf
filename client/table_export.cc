#include "client/table_export.h"

#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/model_tables.h"
#include "common/status_macros.h"
#include "ps/v1/parameter.grpc.pb.h"

namespace ps {
namespace {

// Appends one page's rows to `writer`, checking their sizes.
absl::Status AppendPage(const v1::ReadRowsResponse& page,
                        const v1::ModelSpec& model, const std::string& server,
                        ModelFileWriter* writer) {
  for (const v1::SparseRows& rows : page.rows()) {
    if (rows.table() >= static_cast<uint32_t>(model.sparse_tables_size())) {
      return absl::DataLossError(
          absl::StrCat("server ", server, " sent rows of table ", rows.table(),
                       " of ", model.sparse_tables_size()));
    }
    const size_t dim = model.sparse_tables(rows.table()).dim();
    const size_t n = rows.keys().size() / 8;
    if (rows.keys().size() % 8 != 0 || rows.values().size() != n * dim * 4) {
      return absl::DataLossError(absl::StrCat(
          "server ", server, " sent malformed rows of table ", rows.table()));
    }
    PS_RETURN_IF_ERROR(writer->AppendRows(
        rows.table(),
        std::span(reinterpret_cast<const uint64_t*>(rows.keys().data()), n),
        std::span(reinterpret_cast<const float*>(rows.values().data()),
                  n * dim)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ExportModelWithTables(
    const v1::TrainedModel& model, const v1::ShardMap& shard_map,
    const std::string& path, const TableExportOptions& options) {
  if (model.model().sparse_tables_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", model.job_id(), " has no sparse tables"));
  }
  PS_ASSIGN_OR_RETURN(auto writer, ModelFileWriter::Create(model, path));
  for (int s = 0; s < shard_map.servers_size(); ++s) {
    const std::string& address = shard_map.servers(s);
    auto stub =
        v1::ParameterService::NewStub(CreateChannel(address, options.channel));
    v1::ReadRowsRequest request;
    request.set_job_id(model.job_id());
    request.set_server_index(s);
    request.set_max_bytes(options.page_bytes);
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
      v1::ReadRowsResponse page;
      const grpc::Status status = stub->ReadRows(&ctx, request, &page);
      if (!status.ok()) {
        const absl::Status error = FromGrpcStatus(status);
        return absl::Status(error.code(),
                            absl::StrCat("reading the rows of server ", s, " (",
                                         address, "): ", error.message()));
      }
      PS_RETURN_IF_ERROR(
          AppendPage(page, model.model(), address, writer.get()));
      if (page.done()) break;
      request.set_table(page.next_table());
      request.set_bucket(page.next_bucket());
    }
  }
  PS_RETURN_IF_ERROR(writer->Finish());
  return writer->rows();
}

}  // namespace ps
