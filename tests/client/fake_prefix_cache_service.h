// FakePrefixCacheService: an in-memory kvserve.v1.PrefixCache with predictable answers, served
// by the client tests' FakeServer.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "fake_replica.h"
#include "kvserve/v1/prefix.grpc.pb.h"

namespace kvserve::client::testing {

// PrefixCache over a map of name to Prefix:
// - RegisterPrefix: an empty name is INVALID_ARGUMENT "name: ..."; no content is
//   INVALID_ARGUMENT "content: ..."; otherwise stores (or replaces) the prefix with num_tokens =
//   the token ids, or the text's (or the messages' contents') bytes plus one for BOS; bytes =
//   kFakeBytesPerToken per token; fingerprint kFakeFingerprint; created_at kFakeCreatedAtSeconds
//   plus the number of earlier registrations; hits 0; options with defaults applied (pinned
//   true, cache_implementation "dynamic", as the server's).
// - GetPrefix, DeletePrefix: NOT_FOUND "prefix 'NAME' is not registered" for an unknown name.
// - ListPrefixes: every prefix, sorted by name.
// Every call is served as `replica` (its routing key logged, the replica's id sent back).
class FakePrefixCacheService final : public v1::PrefixCache::CallbackService {
 public:
  explicit FakePrefixCacheService(FakeReplica* replica) : replica_(replica) {}

  static constexpr int64_t kFakeBytesPerToken = 256;
  static constexpr int64_t kFakeCreatedAtSeconds = 1700000000;  // 2023-11-14T22:13:20Z
  static constexpr char kFakeFingerprint[] = "0123456789abcdef0123456789abcdef";

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

  // The last RegisterPrefixRequest received, as it arrived; empty before the first.
  v1::RegisterPrefixRequest last_register_request() const;

 private:
  FakeReplica* const replica_;  // not owned
  mutable absl::Mutex mu_;
  std::map<std::string, v1::Prefix> prefixes_ ABSL_GUARDED_BY(mu_);
  int64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  v1::RegisterPrefixRequest last_register_request_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::client::testing
