// PrefixService: the kvserve.v1.PrefixCache gRPC service (callback API): registers prefixes
// through the engine and answers Get/List/Delete from the prefix store.
#pragma once

#include <memory>

#include "kvserve/v1/prefix.grpc.pb.h"
#include "server/attached.h"

namespace kvserve::cache {
class PrefixStore;
struct PrefixInfo;
}  // namespace kvserve::cache

namespace kvserve::server {

class Engine;
class PrefixRegistry;
class RequestParser;

// What the service serves once the model is loaded; every pointer must outlive the service.
struct ServedPrefixes {
  Engine* engine = nullptr;
  const RequestParser* parser = nullptr;
  cache::PrefixStore* store = nullptr;
  PrefixRegistry* registry = nullptr;
};

// Until Attach every call is UNAVAILABLE. Handlers never block: a registration's prefill
// runs on the engine thread, which finishes the call.
class PrefixService final : public v1::PrefixCache::CallbackService {
 public:
  PrefixService() = default;
  // Starts serving. Call once; thread-safe.
  void Attach(ServedPrefixes served) { served_.Attach(served); }

  grpc::ServerUnaryReactor* RegisterPrefix(grpc::CallbackServerContext* context,
                                           const v1::RegisterPrefixRequest* request,
                                           v1::Prefix* response) override;
  grpc::ServerUnaryReactor* GetPrefix(grpc::CallbackServerContext* context,
                                      const v1::GetPrefixRequest* request,
                                      v1::Prefix* response) override;
  grpc::ServerUnaryReactor* ListPrefixes(grpc::CallbackServerContext* context,
                                         const v1::ListPrefixesRequest* request,
                                         v1::ListPrefixesResponse* response) override;
  grpc::ServerUnaryReactor* DeletePrefix(grpc::CallbackServerContext* context,
                                         const v1::DeletePrefixRequest* request,
                                         v1::DeletePrefixResponse* response) override;

 private:
  Attached<ServedPrefixes> served_;
};

// The wire form of a stored prefix; `options` as it was registered.
v1::Prefix ToProto(const cache::PrefixInfo& info, const v1::PrefixOptions& options);

}  // namespace kvserve::server
