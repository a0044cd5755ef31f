// The fake services' replica identity and routing-key and authorization logs (see
// fake_replica.h).
#include "fake_replica.h"

#include "client/client.h"

namespace kvserve::client::testing {

namespace {

// The value of the client's metadata `key`; "" when it sent none.
std::string ClientMetadata(const grpc::CallbackServerContext& context, const char* key) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(key);
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

}  // namespace

void FakeReplica::Serve(grpc::CallbackServerContext* context) {
  std::string route = ClientMetadata(*context, kRouteMetadataKey);
  std::string authorization = ClientMetadata(*context, kAuthorizationMetadataKey);
  context->AddTrailingMetadata(kReplicaMetadataKey, id_);
  absl::MutexLock lock(&mu_);
  routes_.push_back(std::move(route));
  authorizations_.push_back(std::move(authorization));
}

std::vector<std::string> FakeReplica::routes() const {
  absl::MutexLock lock(&mu_);
  return routes_;
}

std::vector<std::string> FakeReplica::authorizations() const {
  absl::MutexLock lock(&mu_);
  return authorizations_;
}

}  // namespace kvserve::client::testing
