// The client tests' in-memory PrefixCache (see fake_prefix_cache_service.h).
#include "fake_prefix_cache_service.h"

#include "absl/strings/str_cat.h"

namespace kvserve::client::testing {
namespace {

int32_t NumTokens(const v1::RegisterPrefixRequest& request) {
  switch (request.content_case()) {
    case v1::RegisterPrefixRequest::kTokenIds:
      return request.token_ids().ids_size();
    case v1::RegisterPrefixRequest::kText:
      return static_cast<int32_t>(request.text().size()) + 1;
    case v1::RegisterPrefixRequest::kMessages: {
      int32_t bytes = 0;
      for (const v1::ChatMessage& message : request.messages().messages()) {
        bytes += static_cast<int32_t>(message.content().size());
      }
      return bytes + 1;
    }
    default:
      return 0;
  }
}

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::Status NotFound(const std::string& name) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("prefix '", name, "' is not registered"));
}

}  // namespace

grpc::ServerUnaryReactor* FakePrefixCacheService::RegisterPrefix(
    grpc::CallbackServerContext* context, const v1::RegisterPrefixRequest* request,
    v1::Prefix* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  last_register_request_ = *request;
  if (request->name().empty()) {
    return FinishWith(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                            "name: must be 1 to 128 characters of [A-Za-z0-9._-]"));
  }
  if (request->content_case() == v1::RegisterPrefixRequest::CONTENT_NOT_SET) {
    return FinishWith(context,
                      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "content: one of text, token_ids, messages is required"));
  }
  v1::Prefix prefix;
  prefix.set_name(request->name());
  prefix.set_num_tokens(NumTokens(*request));
  prefix.set_bytes(prefix.num_tokens() * kFakeBytesPerToken);
  prefix.set_fingerprint(kFakeFingerprint);
  prefix.mutable_created_at()->set_seconds(kFakeCreatedAtSeconds + registrations_++);
  v1::PrefixOptions* options = prefix.mutable_options();
  options->set_pinned(request->options().has_pinned() ? request->options().pinned() : true);
  options->set_ttl_seconds(request->options().ttl_seconds());
  options->set_cache_implementation(request->options().cache_implementation().empty()
                                        ? "dynamic"
                                        : request->options().cache_implementation());
  prefixes_[prefix.name()] = prefix;
  *response = prefix;
  return FinishWith(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakePrefixCacheService::GetPrefix(grpc::CallbackServerContext* context,
                                                            const v1::GetPrefixRequest* request,
                                                            v1::Prefix* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  auto it = prefixes_.find(request->name());
  if (it == prefixes_.end()) return FinishWith(context, NotFound(request->name()));
  *response = it->second;
  return FinishWith(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakePrefixCacheService::ListPrefixes(
    grpc::CallbackServerContext* context, const v1::ListPrefixesRequest* request,
    v1::ListPrefixesResponse* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  for (const auto& [name, prefix] : prefixes_) *response->add_prefixes() = prefix;
  return FinishWith(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakePrefixCacheService::DeletePrefix(
    grpc::CallbackServerContext* context, const v1::DeletePrefixRequest* request,
    v1::DeletePrefixResponse* response) {
  replica_->Serve(context);
  absl::MutexLock lock(&mu_);
  if (prefixes_.erase(request->name()) == 0) return FinishWith(context, NotFound(request->name()));
  return FinishWith(context, grpc::Status::OK);
}

v1::RegisterPrefixRequest FakePrefixCacheService::last_register_request() const {
  absl::MutexLock lock(&mu_);
  return last_register_request_;
}

}  // namespace kvserve::client::testing
