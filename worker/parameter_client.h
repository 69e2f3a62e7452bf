// The worker's client of ParameterService: pulls whole tensors and pushes
// gradients, cut into blocks and sent to every server of the shard map in
// parallel, with deadlines and safe retries. Each server's calls travel
// through a PayloadTransport (worker/payload_transport.h): the socket, or
// shared memory for a server on this host.
#ifndef PS_WORKER_PARAMETER_CLIENT_H_
#define PS_WORKER_PARAMETER_CLIENT_H_

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/model_layout.h"
#include "common/security.h"
#include "ps/v1/cluster.pb.h"
#include "worker/payload_transport.h"
#include "worker/server_fanout.h"
#include "worker/shared_memory_transport.h"
#include "worker/shared_region_pool.h"
#include "worker/sparse_router.h"

namespace ps {

class PartsInFlight;  // worker/parameter_client_pipeline.cc
struct PullInFlight;  // worker/parameter_client_pull.cc
class PushInFlight;   // worker/parameter_client_push.cc

struct ParameterClientOptions {
  // Deadline of one Pull attempt; a pull may wait this long for slower workers.
  absl::Duration pull_timeout = absl::Seconds(30);
  // Deadline of one Push attempt.
  absl::Duration push_timeout = absl::Seconds(30);
  // Retrying stops once this much time has passed since the first attempt.
  absl::Duration retry_window = absl::Seconds(120);
  // SSP client cache (docs/consistency.md, "Worker cache"), used when the job
  // asks for it (consistency.worker_cache): parameters whose slowest worker was
  // at clock m serve reads at any clock c <= m + s without a new pull. Never
  // used under BSP (it could never hit) or ASP (it would never pull again).
  // Setting this false turns it off whatever the job says.
  bool cache = true;
  // How calls to the servers authenticate (TLS, the cluster secret). Default:
  // plaintext.
  ChannelSecurity channel;
  // Keepalive and reconnection of the channels to the servers. Default:
  // MemberConnectionOptions().
  ConnectionOptions connection = MemberConnectionOptions();
  // Pass push and pull payloads to servers at loopback addresses through
  // shared memory (PushShared, PullShared; docs/architecture.md, "Same-host
  // payloads"); a server that does not take them is then called with Push
  // and Pull. Default true.
  bool shared_payloads = true;
};

// Every call is made with gRPC's callback API: PushAsync and PullAsync report
// through a callback, on a gRPC thread, and start no thread of their own;
// Push, Pull, PullFinal and ResumeClock wait for them on the caller's thread.
// Threads: one pull (PullAsync, Pull, PullFinal or ResumeClock) at a time,
// and one push at a time, which may overlap the pull (a push reads only state
// fixed at Create and writes only its own encoding buffer). The counters may
// be read from any thread. Retries are safe: a pull is a read and a push is
// applied exactly once per (worker, clock) by the server.
class ParameterClient {
 public:
  // `stop`, if not null, aborts retries (with CANCELLED) once it becomes true.
  // Errors: INVALID_ARGUMENT if the shard map does not match the model.
  static absl::StatusOr<std::unique_ptr<ParameterClient>> Create(
      const v1::Assignment& assignment, const std::vector<TensorSpec>& tensors,
      ParameterClientOptions options, const std::atomic<bool>* stop);

  // Reports a call's outcome, exactly once, on a gRPC thread (or inline, on
  // the caller's, when the call ends before it is sent: an invalid request,
  // a cancelled client, a read from the cache). It must not block.
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // Fills params (one vector per tensor) with parameters that hold every update
  // of clocks below clock - s (from the cache when that allows it). `params`
  // must not be touched until `done` runs.
  void PullAsync(int64_t clock, std::vector<std::vector<float>>* params,
                 Done done);
  // PullAsync, waited for.
  absl::Status Pull(int64_t clock, std::vector<std::vector<float>>* params);
  // Fills params with parameters that hold every update of every worker for
  // clocks below `clock`, whatever the consistency model (PullRequest.final):
  // waits for the slowest worker; never from the cache. For the job's final
  // model.
  absl::Status PullFinal(int64_t clock,
                         std::vector<std::vector<float>>* params);

  // Pulls sent to the servers and pulls served from the cache so far.
  int64_t pulls_made() const { return pulls_made_.load(); }
  int64_t pulls_saved() const { return pulls_saved_.load(); }
  // Bytes of the pull replies received and of the push requests sent
  // (retries included), as they are on the wire: the serialized messages,
  // before gRPC's framing.
  int64_t pulled_bytes() const { return pulled_bytes_.load(); }
  int64_t pushed_bytes() const {
    return pushed_bytes_.load(std::memory_order_relaxed);
  }
  // The clock this worker resumes at: the number of its pushes every server has
  // recorded (0 for a new job). A worker that takes over a lost worker's place
  // continues from there; a push some servers recorded and others did not is
  // sent again (servers that have it acknowledge it as a duplicate), and
  // logged as a warning (unless `warn` is false: the caller sends the
  // original push again), since its gradient for the servers that lack it
  // is computed from values the others may have updated with it.
  absl::StatusOr<int64_t> ResumeClock(bool warn = true);

  // Ends the calls in flight (they fail with CANCELLED) and every later one:
  // the client is done. Any thread. Used when training ends on an error
  // while a pull or push made ahead is still waiting on a server.
  void Cancel();

  // Pull with the rows of `step`'s ids (step->ids; fills step->rows), in the
  // same round trip to each server as the dense blocks; never from the
  // cache. `final` as for PullFinal. Errors: as Pull's; INVALID_ARGUMENT for
  // ids of more tables than the job has.
  absl::Status PullStep(int64_t clock, bool final,
                        std::vector<std::vector<float>>* params,
                        SparseStep* step);
  // PullStep, asynchronous: `done` as PullAsync's; `params` and `step` must
  // not be touched until it runs. One pull at a time, as PullAsync.
  void PullStepAsync(int64_t clock, std::vector<std::vector<float>>* params,
                     SparseStep* step, Done done);
  // PushStep, asynchronous: `step`'s ids and row gradients are read (and
  // copied into the requests) before it returns; `grads`, as for PushAsync,
  // must stay unchanged until `done` runs.
  void PushStepAsync(int64_t clock,
                     const std::vector<std::vector<float>>* grads,
                     const SparseStep* step, Done done);
  // Push with the row gradients of `step` (step->row_grads, each server the
  // rows it holds), in the job's wire_gradients format as the blocks.
  // Errors: as Push's; INVALID_ARGUMENT for row gradients of a wrong size.
  absl::Status PushStep(int64_t clock,
                        const std::vector<std::vector<float>>& grads,
                        const SparseStep& step);

  // Pushes the gradients of iteration `clock` (one vector per tensor, of the
  // tensor's size) in the job's mixed_precision.wire_gradients format. FP32:
  // the gradient memory is sent in place, not copied. FP16 and BF16: the
  // gradients are first encoded (rounded to nearest even, finite values
  // saturated at the format's largest; common/half_codec.h) into a buffer
  // this client keeps for its pushes, which is sent in place. Either way the
  // gradients must not change or go away until `done` runs, and `done` runs
  // only once gRPC has let go of the memory it sent. Errors: INVALID_ARGUMENT
  // for gradients of the wrong shape, and the servers' errors once retries
  // are exhausted.
  void PushAsync(int64_t clock, const std::vector<std::vector<float>>* grads,
                 Done done);
  // PushAsync, waited for.
  absl::Status Push(int64_t clock,
                    const std::vector<std::vector<float>>& grads);

 private:
  struct BlockRef {
    uint64_t key;
    uint32_t tensor;
    int64_t offset;
    int64_t num_elems;
  };
  // Blocks [begin, end) of one server's, in key order.
  struct BlockSpan {
    size_t begin = 0;
    size_t end = 0;
  };
  // One part of the pipelined step (ConsistencySpec.pipeline_parts): a span
  // of each server's blocks (empty for a server with fewer blocks).
  using Part = std::vector<BlockSpan>;
  // One server: how its calls travel (payload_transport.h) and its blocks.
  struct Server {
    // Push and Pull, with the payloads in the messages, read and written in
    // place (common/parameter_wire.h).
    std::unique_ptr<SocketTransport> socket;
    // PushShared and PullShared; null unless the server's address is a
    // loopback address and options.shared_payloads is on.
    std::unique_ptr<SharedMemoryTransport> shared;
    std::vector<BlockRef> blocks;
    // The largest pull reply this server can send this worker without
    // sparse rows (its blocks and the clocks).
    size_t max_reply_bytes = 0;
  };
  // Starts one call on the transport it is given, with the call's `done`.
  using Start = absl::FunctionRef<absl::Status(PayloadTransport&,
                                               PayloadTransport::Done)>;
  ParameterClient(const v1::Assignment& assignment,
                  const std::vector<TensorSpec>& tensors,
                  ParameterClientOptions options,
                  const std::atomic<bool>* stop);

  // Asks every server, in parallel and with retries (worker/server_fanout.h),
  // what `call` asks one; `done` gets the outcome. Cancel() ends it.
  void AskAllServers(std::string what, absl::Duration timeout,
                     absl::Duration retry_window, ServerFanout::Call call,
                     Done done);
  // `step`, if not null, adds its sparse rows to the pull. `part`, if not
  // null, pulls only its blocks (`params` already sized) and leaves the
  // client's clocks as they are.
  void PullFromServers(int64_t clock, std::vector<std::vector<float>>* params,
                       bool final, Done done, SparseStep* step = nullptr,
                       const Part* part = nullptr);
  // PullFromServers' call to server s, for the blocks of `span` (and the
  // sparse rows `pull` asks of it); the reply is read into `params` and
  // `step`. `call_done` gets the call's outcome.
  void PullFrom(int s, grpc::ClientContext* context,
                ServerFanout::CallDone call_done,
                std::shared_ptr<PullInFlight> pull,
                std::vector<std::vector<float>>* params, SparseStep* step,
                BlockSpan span);
  // Keeps the clocks a whole pull's replies carry: the cache's min clock,
  // this worker's clock and its largest on any server (ResumeClock).
  void KeepPullClocks(const PullInFlight& pull);
  // PushAsync with `step`'s sparse rows, if not null. `part`, if not null,
  // pushes only its blocks, from gradients CheckAndEncode took already.
  void PushWithRows(int64_t clock, const std::vector<std::vector<float>>* grads,
                    const SparseStep* step, Done done,
                    const Part* part = nullptr);
  // Sends PushWithRows' requests (`push`, which deletes itself once they
  // end) to every server that has one.
  void SendPush(int64_t clock, PushInFlight* push);
  // The ids of `step` each server holds (one entry per server; all empty
  // without a step). Errors: INVALID_ARGUMENT, as SparseRouter::Route's.
  absl::StatusOr<std::vector<std::vector<SparsePart>>> RouteStep(
      const SparseStep* step) const;
  // At most the bytes of server s's reply to a pull of its blocks and of
  // the sparse rows of `parts` (the size of the shared region it is lent).
  size_t PullReplyBytes(size_t s, const std::vector<SparsePart>& parts) const;
  // Server s's blocks that `part` holds (all its blocks when null).
  BlockSpan SpanOf(size_t s, const Part* part) const;
  // Checks the gradients' shape and, for 16-bit wire gradients, encodes them
  // into push_encoded_. Errors: INVALID_ARGUMENT.
  absl::Status CheckAndEncode(const std::vector<std::vector<float>>& grads);
  // The pipelined step (worker/parameter_client_pipeline.cc): the push as
  // parts_, the last part (the last layer's blocks) first, at most two in
  // flight; the pull as parts_, all asked at once, the first part first.
  void PushPartsAsync(int64_t clock,
                      const std::vector<std::vector<float>>* grads, Done done);
  void PullPartsAsync(int64_t clock, std::vector<std::vector<float>>* params,
                      Done done);
  // Pushes part `taken` (in push order) of PushPartsAsync's, and the next
  // one when it ends.
  void PushPart(std::shared_ptr<PartsInFlight> state, int64_t clock,
                const std::vector<std::vector<float>>* grads, int taken);
  // Cuts every server's blocks into `parts` spans of about equal bytes.
  void CutIntoParts(int parts);
  // Logs when calls to `server` start failing (once per outage) and when it
  // answers again. Thread-safe.
  void NoteReachability(int server, const std::string& what,
                        const absl::Status& status);
  // Copies server s's reply (the bytes of a PullResponse) into `params` and
  // returns the clocks it carries and its size. Thread-safe (each server's
  // blocks are its own).
  // `parts`: the sparse rows asked of server s, written into step->rows.
  // `span`: the server's blocks the reply holds.
  absl::Status ReadPullReply(int s, std::span<const std::string_view> reply,
                             std::vector<std::vector<float>>* params,
                             int64_t* min_clock, int64_t* own_clock,
                             int64_t* reply_bytes,
                             const std::vector<SparsePart>& parts,
                             SparseStep* step, BlockSpan span) const;
  // Once the servers' blocks are known: a channel to each server and the
  // transports over it.
  void OpenTransports();
  // The client's choice of carrier for one call to server s: shared memory
  // while the server takes it, else the socket, which also carries a call
  // that shared memory cannot (no region to be had; logged with `what`,
  // "push to"). `done` gets the call's outcome, through SharedCallFailed
  // when it went through shared memory.
  void CallServer(int s, const char* what, Start start,
                  PayloadTransport::Done done);
  // Whether server s takes shared-memory payloads (until it says it does
  // not).
  bool UsesSharedMemory(int s) const { return shared_[s].load(); }
  // The status a failed PushShared or PullShared call reports: UNIMPLEMENTED
  // turns shared memory off for server s and becomes ABORTED, so that the
  // fanout calls the server again, through the socket.
  absl::Status SharedCallFailed(int s, absl::Status status);

  const std::string job_id_;
  const int worker_index_;
  const int64_t map_version_;
  // The membership version requests carry (elastic jobs; 0 otherwise).
  const int64_t membership_version_;
  const ParameterClientOptions options_;
  const std::atomic<bool>* const stop_;
  std::vector<TensorSpec> tensors_;
  // The sparse tables' buckets on the servers (no tables: nothing to route).
  SparseRouter router_;
  // Lends the shared-memory transports their regions; declared before
  // servers_, so that it outlives them.
  SharedRegionPool regions_;
  std::vector<Server> servers_;
  // The servers' addresses, in servers_' order (also the fanouts' list).
  std::vector<std::string> addresses_;
  // Per server: whether the map names its address for another place too (a
  // lost server's place hosted by a surviving server): its requests then
  // name their place (PullRequest and PushRequest `place`).
  std::vector<bool> names_place_;
  // Per server: whether calls pass their payloads in shared memory.
  std::unique_ptr<std::atomic<bool>[]> shared_;

  const int64_t staleness_;
  const bool use_cache_;
  // The pipelined step's parts, in key order (empty: whole-step pushes).
  std::vector<Part> parts_;
  // Push's state (touched by Push only; see the class comment).
  const v1::Precision wire_gradients_;
  std::vector<std::vector<uint16_t>> push_encoded_;  // Per tensor; 16-bit only.
  // Pull's state (written by a pull's completion, read when the next starts).
  std::vector<std::vector<float>> cache_;
  int64_t cached_min_clock_ = -1;  // -1: nothing cached.
  int64_t own_clock_ = 0;          // This worker's clock in the last pull.
  int64_t own_clock_max_ = 0;      // Its largest on any server there.
  // The requests in flight, by a number of their own, and whether Cancel()
  // was called.
  absl::Mutex live_mu_;
  absl::flat_hash_map<int64_t, std::weak_ptr<ServerFanout>> live_
      ABSL_GUARDED_BY(live_mu_);
  int64_t next_request_ ABSL_GUARDED_BY(live_mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(live_mu_) = false;
  // Per server: since when its calls fail (InfiniteFuture while it answers).
  absl::Mutex reach_mu_;
  std::vector<absl::Time> failing_since_ ABSL_GUARDED_BY(reach_mu_);
  // Counters, read from any thread.
  std::atomic<int64_t> pulls_made_{0};
  std::atomic<int64_t> pulls_saved_{0};
  std::atomic<int64_t> pulled_bytes_{0};
  std::atomic<int64_t> pushed_bytes_{0};  // Push's, read from any thread.
};

}  // namespace ps

#endif  // PS_WORKER_PARAMETER_CLIENT_H_
