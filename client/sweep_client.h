// A small C++ client library for SweepService, with a deadline on every call.
#ifndef PS_CLIENT_SWEEP_CLIENT_H_
#define PS_CLIENT_SWEEP_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/job_client.h"
#include "ps/v1/sweep_service.grpc.pb.h"

namespace ps {

// Parses a SweepSpec from JSON (Protobuf's JSON mapping). Unknown fields are
// errors. INVALID_ARGUMENT with the parser's message.
absl::StatusOr<v1::SweepSpec> SweepSpecFromJson(const std::string& json);

// Thread-compatible. Takes JobClient's options (the same coordinator,
// channel security and token). Errors are the coordinator's statuses; an
// unreachable coordinator gives UNAVAILABLE or DEADLINE_EXCEEDED naming its
// address.
class SweepClient {
 public:
  explicit SweepClient(JobClientOptions options);

  absl::StatusOr<std::string> Submit(const v1::SweepSpec& spec);
  absl::StatusOr<v1::SweepStatus> Get(const std::string& sweep_id);
  // Every sweep, without the trials' base spec.
  absl::StatusOr<std::vector<v1::SweepStatus>> List();
  absl::StatusOr<v1::SweepStatus> Cancel(const std::string& sweep_id);
  // Streams the sweep's status to `on_update` until it ends and returns the
  // final status; reconnects with backoff for up to `reconnect_window` when
  // the stream breaks (a coordinator restart). Errors: NOT_FOUND; the last
  // error once reconnecting gives up.
  absl::StatusOr<v1::SweepStatus> Watch(
      const std::string& sweep_id,
      const std::function<void(const v1::SweepStatus&)>& on_update,
      absl::Duration reconnect_window = absl::Seconds(60));

 private:
  absl::Status Annotate(const absl::Status& status) const;

  const JobClientOptions options_;
  std::unique_ptr<v1::SweepService::Stub> stub_;
};

}  // namespace ps

#endif  // PS_CLIENT_SWEEP_CLIENT_H_
