// gRPC handlers of ParameterService: thin adapters over ParameterManager.
#ifndef PS_SERVER_PARAMETER_SERVICE_H_
#define PS_SERVER_PARAMETER_SERVICE_H_

#include <functional>

#include "absl/time/time.h"
#include "common/authorizer.h"
#include "common/metrics.h"
#include "ps/v1/parameter.grpc.pb.h"
#include "server/parameter_manager.h"
#include "server/payload_carrier.h"
#include "server/shared_region_cache.h"

namespace ps {

// What to do to the reply of one applied push: test-only fault injection, to
// prove that a push whose reply is lost is applied exactly once.
struct PushFault {
  absl::Duration delay_reply =
      absl::ZeroDuration();  // Hold the reply this long.
  bool drop_reply = false;   // Reply UNAVAILABLE although the push was applied.
};
// Decides the fault for each successfully handled push; it sees the request
// without its gradients. Production leaves it empty.
using PushFaultInjector = std::function<PushFault(const v1::PushRequest&)>;

// Callback-API service. A Pull that waits on the staleness bound holds no
// thread: its reactor is finished by the push that lets it through, or
// cancelled when the client's deadline passes. Both methods are raw
// (ByteBuffer) methods, so that the float payloads are copied once at most
// (common/parameter_wire.h): a Push's gradients are applied straight from the
// slices gRPC received; a Pull's reply is serialized from the block values
// into one buffer that gRPC sends as is. Bytes that are not a PushRequest
// (PullRequest) get INVALID_ARGUMENT. Every call must come from a member of
// the cluster (`authorizer`); others get UNAUTHENTICATED.
//
// PushShared and PullShared are Push and Pull with their payloads in
// shared memory, for workers on this host (docs/architecture.md, "Same-host
// payloads"): taken from loopback peers only, when `shared_payloads` is on.
// A pushed request is copied out of the worker's region before it is read
// (the worker could change it meanwhile); a pull's reply is written into
// the worker's region before the call is answered. A push, and a pull, is
// handled by one path whichever way its payload travels: the method only
// picks the PayloadCarrier (server/payload_carrier.h).
//
// Seed (EXTERNAL models' initial values, rare) is an ordinary callback method
// over parsed messages, answered once the seed is durable.
//
// ReadRows (an export's pages of sparse rows) is an ordinary callback method,
// answered from the manager's exporter thread; the caller must be a member
// of the cluster or carry a job token that may export (JobAccess::kWrite).
class ParameterServiceImpl final
    : public v1::ParameterService::WithCallbackMethod_FetchUnits<
          v1::ParameterService::WithCallbackMethod_ReadRows<
              v1::ParameterService::WithCallbackMethod_Seed<
                  v1::ParameterService::WithRawCallbackMethod_Push<
                      v1::ParameterService::WithRawCallbackMethod_Pull<
                          v1::ParameterService::
                              WithRawCallbackMethod_PushShared<
                                  v1::ParameterService::
                                      WithRawCallbackMethod_PullShared<
                                          v1::ParameterService::Service>>>>>>> {
 public:
  // `manager` and `metrics` must outlive the service.
  ParameterServiceImpl(ParameterManager* manager, RpcMetrics* metrics,
                       PushFaultInjector push_faults = nullptr,
                       Authorizer authorizer = Authorizer(),
                       bool shared_payloads = true);

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Seed(grpc::CallbackServerContext* ctx,
                                 const v1::SeedRequest* request,
                                 v1::SeedResponse* response) override;
  grpc::ServerUnaryReactor* ReadRows(grpc::CallbackServerContext* ctx,
                                     const v1::ReadRowsRequest* request,
                                     v1::ReadRowsResponse* response) override;
  // A server move's copy of units (ParameterManager::FetchUnits), from
  // another member of the cluster; answered at once.
  grpc::ServerUnaryReactor* FetchUnits(
      grpc::CallbackServerContext* ctx, const v1::FetchUnitsRequest* request,
      v1::FetchUnitsResponse* response) override;
  grpc::ServerUnaryReactor* PushShared(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PullShared(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

 private:
  // Whether the caller may call this way: authorized as a member
  // (UNAUTHENTICATED otherwise), then admitted by the carrier.
  absl::Status Admit(PayloadCarrier& carrier,
                     const grpc::CallbackServerContext& ctx) const;
  // A pull whose request, and reply, `carrier` carries; `method` names it
  // in metrics.
  grpc::ServerUnaryReactor* HandlePull(const char* method,
                                       PayloadCarrier& carrier,
                                       const grpc::CallbackServerContext& ctx,
                                       const grpc::ByteBuffer& request,
                                       grpc::ByteBuffer* response);
  // A push whose request `carrier` carries: its PushRequest is parsed and
  // handed to the manager (which reads the carrier's bytes only during the
  // call).
  grpc::ServerUnaryReactor* HandlePush(const char* method,
                                       PayloadCarrier& carrier,
                                       const grpc::CallbackServerContext& ctx,
                                       const grpc::ByteBuffer& request,
                                       grpc::ByteBuffer* response);
  // The test-only fault of a push (empty without an injector).
  std::function<void(absl::StatusOr<v1::PushResponse>*)> FaultsFor(
      const v1::PushRequest& header) const;

  ParameterManager* const manager_;
  RpcMetrics* const metrics_;
  const PushFaultInjector push_faults_;
  const Authorizer authorizer_;
  const bool shared_payloads_;
  SharedRegionCache regions_;
};

}  // namespace ps

#endif  // PS_SERVER_PARAMETER_SERVICE_H_
