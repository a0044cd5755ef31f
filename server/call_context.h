// CallContext: what every kvserve RPC shares: its request id, the routing key it was sent
// with, the trailing metadata that says which replica served it, and the one place where an
// exception escaping a handler becomes INTERNAL.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <exception>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace kvserve::server {

// Metadata keys (gRPC metadata keys are lower case).
inline constexpr char kRouteKeyMetadata[] = "x-kvserve-route";   // client → server
inline constexpr char kReplicaMetadata[] = "x-kvserve-replica";  // server → client (trailer)
inline constexpr char kRequestIdMetadata[] = "x-request-id";     // both ways

// The identity of this replica, shared by the services. Thread-safe.
class ReplicaIdentity {
 public:
  // --replica-id, or the address the server listens on once it is bound.
  void Set(std::string replica_id) {
    absl::MutexLock lock(&mu_);
    replica_id_ = std::move(replica_id);
  }
  // Empty until Set.
  std::string Get() const {
    absl::MutexLock lock(&mu_);
    return replica_id_;
  }

 private:
  mutable absl::Mutex mu_;
  std::string replica_id_ ABSL_GUARDED_BY(mu_);
};

// Starts a call: picks its request id (the client's x-request-id when it is 1 to 64
// characters of [A-Za-z0-9._:-], else a fresh one), adds the trailing metadata
// x-kvserve-replica and x-request-id, and logs the method and routing key at debug level.
// Returns the request id. Call once per call, on the handler's thread, before Finish.
std::string BeginCall(grpc::CallbackServerContext* context, const ReplicaIdentity& replica,
                      std::string_view method);

// A fresh request id: 16 hex digits, unique within the process and unlikely to repeat
// across processes.
std::string NewRequestId();

// The status a client gets for an exception that escaped a handler: INTERNAL naming the
// request id (and nothing of the server's internals); the exception is logged with the id.
absl::Status InternalErrorFor(std::string_view request_id, std::string_view method,
                              const std::exception* exception);

}  // namespace kvserve::server
