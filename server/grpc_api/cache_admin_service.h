// CacheAdminService: kvserve.v1.CacheAdmin, the prefix store's every entry (named and
// automatic, all namespaces) for admins: what a KV-event subscriber must hold.
#pragma once

#include <cstdint>

#include "kvserve/v1/cache.grpc.pb.h"
#include "server/grpc_api/attached.h"
#include "server/grpc_api/call_context.h"

namespace kvserve::server {
class Engine;
}  // namespace kvserve::server

namespace kvserve::server::grpc_api {

using RawCacheAdminService =
    v1::CacheAdmin::WithRawCallbackMethod_ListCacheEntries<v1::CacheAdmin::Service>;

// UNAVAILABLE until Attach; PERMISSION_DENIED for a caller without the admin role.
class CacheAdminService final : public RawCacheAdminService {
 public:
  // `replica` must outlive the service.
  explicit CacheAdminService(const ReplicaIdentity* replica) : replica_(replica) {}
  // What the service lists: the engine's store (the engine must outlive the service), its
  // event-log numbers shifted by `sequence_base` (the KV-event publisher's, so that a listing
  // names the KV-event batch it matches).
  struct Served {
    Engine* engine = nullptr;
    uint64_t sequence_base = 0;
  };
  // Starts serving. Call once; thread-safe.
  void Attach(Served served) { served_.Attach(served); }

  grpc::ServerUnaryReactor* ListCacheEntries(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;

 private:
  const ReplicaIdentity* const replica_;
  Attached<Served> served_;
};

}  // namespace kvserve::server::grpc_api
