#include "server/peer_fetch.h"

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "ps/v1/parameter.grpc.pb.h"

namespace ps {
namespace {

// Stubs by address.
class PeerStubs {
 public:
  explicit PeerStubs(ChannelSecurity security)
      : security_(std::move(security)) {}

  v1::ParameterService::Stub* For(const std::string& address) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<v1::ParameterService::Stub>& stub = stubs_[address];
    if (stub == nullptr) {
      stub = v1::ParameterService::NewStub(CreateChannel(address, security_));
    }
    return stub.get();
  }

 private:
  const ChannelSecurity security_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<v1::ParameterService::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

UnitMover::RemoteFetch MakePeerFetch(ChannelSecurity security) {
  auto stubs = std::make_shared<PeerStubs>(std::move(security));
  return [stubs](const std::string& address,
                 const v1::FetchUnitsRequest& request)
             -> absl::StatusOr<v1::FetchUnitsResponse> {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::FetchUnitsResponse response;
    grpc::Status status =
        stubs->For(address)->FetchUnits(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  };
}

}  // namespace ps
