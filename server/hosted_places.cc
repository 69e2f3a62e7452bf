#include "server/hosted_places.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr char kHostedMark[] = "~place";

}  // namespace

std::string HostedStoreId(const std::string& job_id, int place) {
  return absl::StrCat(job_id, kHostedMark, place);
}

bool IsHostedStoreId(const std::string& id) {
  return JobOfHostedStoreId(id) != id;
}

std::string JobOfHostedStoreId(const std::string& id) {
  const size_t at = id.rfind(kHostedMark);
  if (at == std::string::npos || at == 0) return id;
  int place = 0;
  if (!absl::SimpleAtoi(id.substr(at + sizeof(kHostedMark) - 1), &place) ||
      place < 0) {
    return id;
  }
  return id.substr(0, at);
}

HostedPlaceStore::HostedPlaceStore(ShardStore* base, std::string job_id,
                                   int place)
    : base_(base),
      job_id_(std::move(job_id)),
      store_id_(HostedStoreId(job_id_, place)) {}

absl::StatusOr<std::string> HostedPlaceStore::Renamed(
    const std::string& job_id) const {
  if (job_id != job_id_) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard store: job ", job_id, " is not ", job_id_,
                     ", whose place this store holds"));
  }
  return store_id_;
}

absl::Status HostedPlaceStore::Write(const ShardWrite& write) {
  PS_ASSIGN_OR_RETURN(std::string id, Renamed(write.job_id));
  ShardWrite renamed = write;
  renamed.job_id = std::move(id);
  return base_->Write(renamed);
}

absl::Status HostedPlaceStore::WriteStreamed(const ShardWrite& write,
                                             BucketRowsSource& rows) {
  PS_ASSIGN_OR_RETURN(std::string id, Renamed(write.job_id));
  ShardWrite renamed = write;
  renamed.job_id = std::move(id);
  return base_->WriteStreamed(renamed, rows);
}

absl::Status HostedPlaceStore::AppendLog(
    const std::string& job_id, int64_t first_sequence,
    const std::vector<std::string>& records, bool sync) {
  PS_ASSIGN_OR_RETURN(std::string id, Renamed(job_id));
  return base_->AppendLog(id, first_sequence, records, sync);
}

absl::Status HostedPlaceStore::PutJobMeta(const std::string& job_id,
                                          const std::string& meta) {
  PS_ASSIGN_OR_RETURN(std::string id, Renamed(job_id));
  return base_->PutJobMeta(id, meta);
}

absl::StatusOr<StoredJob> HostedPlaceStore::Load(const std::string& job_id) {
  PS_ASSIGN_OR_RETURN(std::string id, Renamed(job_id));
  return base_->Load(id);
}

absl::StatusOr<std::vector<std::string>> HostedPlaceStore::ListJobs() {
  PS_ASSIGN_OR_RETURN(std::vector<std::string> ids, base_->ListJobs());
  std::vector<std::string> out;
  for (const std::string& id : ids) {
    if (id == store_id_) out.push_back(job_id_);
  }
  return out;
}

absl::Status HostedPlaceStore::DeleteJob(const std::string& job_id) {
  PS_ASSIGN_OR_RETURN(std::string id, Renamed(job_id));
  return base_->DeleteJob(id);
}

absl::Status HostedPlaceStore::DropJob(const std::string& job_id) {
  PS_ASSIGN_OR_RETURN(std::string id, Renamed(job_id));
  return base_->DropJob(id);
}

}  // namespace ps
