// ServerJob's sparse tier (docs/sparse.md, "Memory: the budget and the
// estimate"): opening the job's tier directory, and its health and metrics.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "prometheus/labels.h"
#include "server/server_job.h"

namespace ps {
namespace {

// A directory name for `job_id`: itself when it is plain, else its bytes in
// hex.
std::string TierDirName(const std::string& job_id) {
  const bool plain =
      !job_id.empty() && job_id.size() <= 128 && job_id[0] != '.' &&
      std::all_of(job_id.begin(), job_id.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
               c == '_' || c == '.';
      });
  if (plain) return job_id;
  std::string hex = "x";
  for (unsigned char c : job_id.substr(0, 100)) {
    absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  }
  return hex;
}

}  // namespace

absl::Status ServerJob::OpenTier(const ServerJobOptions& options) {
  namespace fs = std::filesystem;
  if (options.sparse_memory_bytes <= 0 ||
      assignment_.spec().model().sparse_tables().empty()) {
    return absl::OkStatus();
  }
  std::string root = options.sparse_tier_dir;
  if (root.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                     "/ps-sparse-tier-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat(
          "job ", job_id_, ": cannot make a temporary directory for the ",
          "sparse tier: ", strerror(errno)));
    }
    root = tier_temp_root_ = pattern;
  }
  // <root>/<job>.<pid>.<unique>: a job reopened in this process (its old
  // instance still closing) gets a directory of its own; those of earlier
  // processes (killed before they removed theirs) are removed now.
  const std::string prefix = absl::StrCat(TierDirName(job_id_), ".");
  const std::string mine = absl::StrCat(prefix, getpid(), ".");
  std::error_code error;
  fs::create_directories(root, error);
  for (fs::directory_iterator it(root, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.rfind(mine, 0) != 0) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }
  std::string path = absl::StrCat(root, "/", mine, "XXXXXX");
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("job ", job_id_, ": cannot make ",
                                            path, ": ", strerror(errno)));
  }
  auto tier = SparseTier::Open({.path = path});
  if (!tier.ok()) return tier.status();
  tier_ = *std::move(tier);
  return absl::OkStatus();
}

absl::Status ServerJob::TierHealthLocked() {
  if (absl::Status tier = sparse_->TierStatus(); !tier.ok() && closed_.ok()) {
    closed_ = absl::UnavailableError(absl::StrCat(
        "job ", job_id_,
        ": the sparse tier failed, refusing requests: ", tier.message()));
    PS_LOG_ERROR(closed_.message());
  }
  return closed_;
}

void ServerJob::ExportTierCountsLocked() {
  const auto& specs = assignment_.spec().model().sparse_tables();
  exported_tier_.resize(sparse_->size());
  // RocksDB's size estimate walks its files: at most once a second.
  const absl::Time now_time = absl::Now();
  const bool disk =
      tier_ != nullptr && now_time - disk_bytes_exported_ >= absl::Seconds(1);
  if (disk) disk_bytes_exported_ = now_time;
  for (size_t t = 0; t < sparse_->size(); ++t) {
    const SparseTierCounts now = sparse_->TierCounts(t);
    SparseTierCounts& before = exported_tier_[t];
    const prometheus::Labels labels = {{"table", specs[t].name()}};
    metrics_->sparse_memory_bytes.Add(labels).Set(
        static_cast<double>(now.memory_bytes));
    if (tier_ == nullptr) {
      before = now;
      continue;
    }
    if (disk) {
      metrics_->sparse_disk_bytes.Add(labels).Set(
          static_cast<double>(sparse_->TierDiskBytes(t)));
    }
    metrics_->sparse_tier_hits.Add(labels).Increment(
        static_cast<double>(now.hits - before.hits));
    metrics_->sparse_tier_misses.Add(labels).Increment(
        static_cast<double>(now.misses - before.misses));
    metrics_->sparse_tier_disk_reads.Add(labels).Increment(
        static_cast<double>(now.disk_reads - before.disk_reads));
    before = now;
  }
}

}  // namespace ps
