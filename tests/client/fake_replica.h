// FakeReplica: what the client tests' fake services share as one kvserve replica of a fleet:
// the id they send back as x-kvserve-replica trailing metadata, and the routing keys
// (x-kvserve-route) and authorization metadata their calls carried.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"

namespace kvserve::client::testing {

class FakeReplica {
 public:
  explicit FakeReplica(std::string id) : id_(std::move(id)) {}

  // Records the call's routing key and authorization metadata and adds the replica's id to its
  // trailing metadata; the fakes call it first in every handler, before Finish. Thread-safe.
  void Serve(grpc::CallbackServerContext* context);

  // The routing key of each call served so far, in arrival order; "" for a call without one.
  std::vector<std::string> routes() const;

  // The authorization metadata ("Bearer KEY") of each call served so far, in arrival order;
  // "" for a call without any.
  std::vector<std::string> authorizations() const;

  const std::string& id() const { return id_; }

 private:
  const std::string id_;
  mutable absl::Mutex mu_;
  std::vector<std::string> routes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::client::testing
