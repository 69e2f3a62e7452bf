// The gRPC side of a server move: FetchUnits calls to the other servers of
// a job (UnitMover::RemoteFetch).
#ifndef PS_SERVER_PEER_FETCH_H_
#define PS_SERVER_PEER_FETCH_H_

#include "common/security.h"
#include "server/unit_mover.h"

namespace ps {

// A fetch that calls ParameterService.FetchUnits on the server at the given
// address, over one channel per address (kept), with `security` (the
// cluster's member credentials), each call with a 30 s deadline. Thread-safe;
// blocks for the call.
UnitMover::RemoteFetch MakePeerFetch(ChannelSecurity security);

}  // namespace ps

#endif  // PS_SERVER_PEER_FETCH_H_
