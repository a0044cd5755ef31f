// PrefixService: the kvserve.v1.PrefixCache gRPC service (callback API): registers prefixes
// through the engine and answers Get/List/Delete from the prefix store.
#pragma once

#include <memory>

#include "kvserve/v1/prefix.grpc.pb.h"
#include "server/grpc_api/attached.h"
#include "server/grpc_api/call_context.h"

namespace kvserve::cache {
struct PrefixInfo;
}  // namespace kvserve::cache

namespace kvserve::server {
class Engine;
class RequestBuilder;
}  // namespace kvserve::server

namespace kvserve::server::grpc_api {

// What the service serves once the model is loaded; every pointer must outlive the service.
struct ServedPrefixes {
  Engine* engine = nullptr;  // registers and deletes; its published catalog answers Get/List
  const RequestBuilder* builder = nullptr;
};

// Every method takes the request's raw bytes (see wire_codec.h).
using RawPrefixCacheService = v1::PrefixCache::WithRawCallbackMethod_RegisterPrefix<
    v1::PrefixCache::WithRawCallbackMethod_GetPrefix<
        v1::PrefixCache::WithRawCallbackMethod_ListPrefixes<
            v1::PrefixCache::WithRawCallbackMethod_DeletePrefix<v1::PrefixCache::Service>>>>;

// Until Attach every call is UNAVAILABLE. Handlers never block: a registration's prefill
// runs on the engine thread, which finishes the call. Every response carries the trailing
// metadata of BeginCall.
class PrefixService final : public RawPrefixCacheService {
 public:
  // `replica` must outlive the service.
  explicit PrefixService(const ReplicaIdentity* replica) : replica_(replica) {}
  // Starts serving. Call once; thread-safe.
  void Attach(ServedPrefixes served) { served_.Attach(served); }

  grpc::ServerUnaryReactor* RegisterPrefix(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetPrefix(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListPrefixes(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeletePrefix(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  const ReplicaIdentity* const replica_;
  Attached<ServedPrefixes> served_;
};

// The wire form of a stored prefix, its options as it was registered (defaults applied).
v1::Prefix ToProto(const cache::PrefixInfo& info);

}  // namespace kvserve::server::grpc_api
