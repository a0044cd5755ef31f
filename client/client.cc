// The synchronous kvserve client (see client.h).
#include "client/client.h"

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

namespace kvserve::client {
namespace {

// A context with the call's deadline, routing key and API key, if any.
void ApplyOptions(const CallOptions& options, const std::string& api_key,
                  grpc::ClientContext& context) {
  if (options.timeout.has_value()) {
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMicroseconds(*options.timeout));
  }
  if (!options.route.empty()) context.AddMetadata(kRouteMetadataKey, options.route);
  if (!api_key.empty()) context.AddMetadata(kAuthorizationMetadataKey, BearerToken(api_key));
}

// Fills `info` (when not null) from the finished call's trailing metadata.
void TakeCallInfo(const grpc::ClientContext& context, CallInfo* info) {
  if (info == nullptr) return;
  const std::multimap<grpc::string_ref, grpc::string_ref>& trailers =
      context.GetServerTrailingMetadata();
  const auto it = trailers.find(kReplicaMetadataKey);
  info->replica_id = it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

}  // namespace

std::string BearerToken(const std::string& api_key) { return "Bearer " + api_key; }

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

Client::Client(std::shared_ptr<grpc::Channel> channel, std::string api_key, ChannelMode mode)
    : channel_(std::move(channel)),
      api_key_(std::move(api_key)),
      mode_(mode),
      generation_(v1::Generation::NewStub(channel_)),
      prefix_cache_(v1::PrefixCache::NewStub(channel_)),
      sessions_(v1::Sessions::NewStub(channel_)),
      health_(grpc::health::v1::Health::NewStub(channel_)) {}

std::shared_ptr<grpc::ChannelCredentials> Client::Credentials(const ChannelSecurity& security) {
  if (!security.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = security.ca_pem;
  ssl.pem_cert_chain = security.cert_pem;
  ssl.pem_private_key = security.key_pem;
  return grpc::SslCredentials(ssl);
}

ChannelMode Client::ModeOf(const ChannelSecurity& security) {
  if (!security.tls()) return ChannelMode::kPlaintext;
  return security.cert_pem.empty() ? ChannelMode::kTls : ChannelMode::kMutualTls;
}

absl::Status Client::Failed(const grpc::Status& status) const {
  return WithConnectionFailureHint(FromGrpcStatus(status), mode_);
}

std::unique_ptr<Client> Client::Connect(const std::string& target,
                                        const ChannelSecurity& security) {
  grpc::ChannelArguments arguments;
  if (security.tls() && !security.server_name.empty()) {
    arguments.SetSslTargetNameOverride(security.server_name);
  }
  return std::make_unique<Client>(
      grpc::CreateCustomChannel(target, Credentials(security), arguments), security.api_key,
      ModeOf(security));
}

absl::StatusOr<v1::GenerateResponse> Client::Generate(const v1::GenerateRequest& request,
                                                      const CallOptions& options,
                                                      CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::GenerateResponse response;
  grpc::Status status = generation_->Generate(&context, request, &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::Status Client::GenerateStream(
    const v1::GenerateRequest& request,
    absl::FunctionRef<bool(const v1::GenerateStreamResponse&)> on_message,
    const CallOptions& options, CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader =
      generation_->GenerateStream(&context, request);
  v1::GenerateStreamResponse message;
  while (reader->Read(&message)) {
    if (!on_message(message)) {
      context.TryCancel();
      // Finish() needs every message read first; after the cancel these are few or none.
      while (reader->Read(&message)) {
      }
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  TakeCallInfo(context, info);
  return Failed(status);
}

absl::StatusOr<v1::TokenizeResponse> Client::Tokenize(const v1::TokenizeRequest& request,
                                                      const CallOptions& options,
                                                      CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::TokenizeResponse response;
  grpc::Status status = generation_->Tokenize(&context, request, &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::StatusOr<v1::ModelInfo> Client::GetModelInfo(const CallOptions& options,
                                                   CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::ModelInfo response;
  grpc::Status status = generation_->GetModelInfo(&context, v1::GetModelInfoRequest(), &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::StatusOr<v1::Prefix> Client::RegisterPrefix(const v1::RegisterPrefixRequest& request,
                                                  const CallOptions& options,
                                                  CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::Prefix response;
  grpc::Status status = prefix_cache_->RegisterPrefix(&context, request, &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::StatusOr<v1::Prefix> Client::GetPrefix(const std::string& name, const CallOptions& options,
                                             CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::GetPrefixRequest request;
  request.set_name(name);
  v1::Prefix response;
  grpc::Status status = prefix_cache_->GetPrefix(&context, request, &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::StatusOr<v1::ListPrefixesResponse> Client::ListPrefixes(const CallOptions& options,
                                                              CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::ListPrefixesResponse response;
  grpc::Status status = prefix_cache_->ListPrefixes(&context, v1::ListPrefixesRequest(), &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::Status Client::DeletePrefix(const std::string& name, const CallOptions& options,
                                  CallInfo* info, bool shared) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::DeletePrefixRequest request;
  request.set_name(name);
  request.set_shared(shared);
  v1::DeletePrefixResponse response;
  const grpc::Status status = prefix_cache_->DeletePrefix(&context, request, &response);
  TakeCallInfo(context, info);
  return Failed(status);
}

absl::StatusOr<v1::Session> Client::CreateSession(const v1::CreateSessionRequest& request,
                                                  const CallOptions& options,
                                                  CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::Session response;
  grpc::Status status = sessions_->CreateSession(&context, request, &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::StatusOr<v1::Session> Client::GetSession(const std::string& id, const CallOptions& options,
                                               CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::GetSessionRequest request;
  request.set_id(id);
  v1::Session response;
  grpc::Status status = sessions_->GetSession(&context, request, &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::StatusOr<v1::ListSessionsResponse> Client::ListSessions(const CallOptions& options,
                                                              CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::ListSessionsResponse response;
  grpc::Status status = sessions_->ListSessions(&context, v1::ListSessionsRequest(), &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::Status Client::CloseSession(const std::string& id, const CallOptions& options,
                                  CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::CloseSessionRequest request;
  request.set_id(id);
  v1::CloseSessionResponse response;
  const grpc::Status status = sessions_->CloseSession(&context, request, &response);
  TakeCallInfo(context, info);
  return Failed(status);
}

absl::StatusOr<v1::Session> Client::RollbackSession(const std::string& id, int32_t n,
                                                    const CallOptions& options,
                                                    CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  v1::RollbackSessionRequest request;
  request.set_id(id);
  request.set_n(n);
  v1::Session response;
  grpc::Status status = sessions_->RollbackSession(&context, request, &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response;
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Client::CheckHealth(
    const CallOptions& options, CallInfo* info) const {
  grpc::ClientContext context;
  ApplyOptions(options, api_key_, context);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = health_->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  TakeCallInfo(context, info);
  if (!status.ok()) return Failed(status);
  return response.status();
}

}  // namespace kvserve::client
