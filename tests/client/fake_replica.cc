// The fake services' replica identity and routing-key log (see fake_replica.h).
#include "fake_replica.h"

#include "client/client.h"

namespace kvserve::client::testing {

void FakeReplica::Serve(grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find(kRouteMetadataKey);
  std::string route = it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  context->AddTrailingMetadata(kReplicaMetadataKey, id_);
  absl::MutexLock lock(&mu_);
  routes_.push_back(std::move(route));
}

std::vector<std::string> FakeReplica::routes() const {
  absl::MutexLock lock(&mu_);
  return routes_;
}

}  // namespace kvserve::client::testing
