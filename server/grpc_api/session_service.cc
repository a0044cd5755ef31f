// SessionService: parse on the gRPC thread, act on the engine thread, finish there.
#include "server/grpc_api/session_service.h"

#include <google/protobuf/util/time_util.h>

#include <exception>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/session_table.h"
#include "server/engine.h"
#include "server/grpc_api/proto_inputs.h"
#include "server/grpc_api/status_mapping.h"
#include "server/grpc_api/wire_codec.h"
#include "server/request_builder.h"

namespace kvserve::server::grpc_api {
namespace {

google::protobuf::Timestamp Timestamp(absl::Time t) {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

v1::SessionState StateOf(cache::SessionState state) {
  switch (state) {
    case cache::SessionState::kEmpty:
      return v1::SESSION_STATE_EMPTY;
    case cache::SessionState::kIdle:
      return v1::SESSION_STATE_IDLE;
    case cache::SessionState::kRunning:
      return v1::SESSION_STATE_RUNNING;
    case cache::SessionState::kOffloaded:
      return v1::SESSION_STATE_OFFLOADED;
  }
  return v1::SESSION_STATE_UNSPECIFIED;
}

// An id is required; an unknown one is the manager's NOT_FOUND.
absl::Status CheckId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("id: is required");
  return absl::OkStatus();
}

// What a call does on the engine thread: fills the response or says why not.
template <typename Response>
using EngineWork = std::function<absl::Status(cache::SessionTable&, Response*)>;

// Parses `raw_request` as a `Request`, lets `prepare` check it and make the engine-thread
// work, runs that work on the engine thread and finishes the call from there.
template <typename Request, typename Response, typename Prepare>
grpc::ServerUnaryReactor* AnswerOnEngine(grpc::CallbackServerContext* context,
                                         const ReplicaIdentity& replica, const char* method,
                                         const ServedSessions* served,
                                         const grpc::ByteBuffer* raw_request,
                                         grpc::ByteBuffer* raw_response, Prepare&& prepare) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const std::string request_id = BeginCall(context, replica, method);
  if (absl::Status denied = CallerDenied(context); !denied.ok()) {
    reactor->Finish(ToGrpcStatus(denied));
    return reactor;
  }
  absl::StatusOr<EngineWork<Response>> work = absl::UnavailableError("");
  try {
    Request request;
    absl::Status parsed = ParseCallRequest(*context, *raw_request, &request);
    if (parsed.ok() && served == nullptr) parsed = ModelLoadingError();
    work = parsed.ok() ? prepare(request) : absl::StatusOr<EngineWork<Response>>(parsed);
  } catch (const std::exception& e) {
    work = InternalErrorFor(request_id, method, &e);
  }
  if (!work.ok()) {
    reactor->Finish(ToGrpcStatus(work.status()));
    return reactor;
  }
  const bool queued =
      served->engine->RunSessionCall([reactor, raw_response, request_id, method,
                                      work = *std::move(work)](cache::SessionTable& sessions) {
        absl::Status status;
        try {
          Response response;
          status = work(sessions, &response);
          if (status.ok()) status = SerializeWireMessage(response, raw_response);
        } catch (const std::exception& e) {
          status = InternalErrorFor(request_id, method, &e);
        }
        reactor->Finish(ToGrpcStatus(status));
      });
  if (!queued) reactor->Finish(ToGrpcStatus(absl::UnavailableError("the server is shutting down")));
  return reactor;
}

}  // namespace

v1::Session ToProto(const cache::SessionInfo& info) {
  v1::Session out;
  out.set_id(info.id);
  v1::SessionOptions* options = out.mutable_options();
  v1::CacheOptions* c = options->mutable_cache();
  const cache::CacheSpec& spec = info.options.cache;
  c->set_cache_implementation(std::string(cache::CacheImplementationName(spec.implementation)));
  if (spec.is_static() && spec.max_cache_len) c->set_max_cache_len(*spec.max_cache_len);
  if (spec.implementation == cache::CacheImplementation::kQuantized) {
    const cache::QuantizedSpec& q = spec.quantized;
    v1::QuantizationConfig* out_q = c->mutable_quantization();
    out_q->set_backend(std::string(cache::QuantizationBackendName(q.backend)));
    out_q->set_nbits(q.nbits);
    if (q.backend != cache::QuantizationBackend::kFp8) {
      out_q->set_axis_key(q.axis_key);
      out_q->set_axis_value(q.axis_value);
      out_q->set_q_group_size(q.q_group_size);
      out_q->set_residual_length(q.residual_length);
    }
  }
  if (spec.is_offloaded()) c->set_offload_only_non_sliding(spec.offload_only_non_sliding);
  options->set_prefix(
      std::string(cache::SplitQualifiedPrefixName(info.options.prefix_name).second));
  options->set_ttl_seconds(
      info.options.ttl == absl::InfiniteDuration() ? 0 : absl::ToInt64Seconds(info.options.ttl));
  out.set_state(StateOf(info.state));
  out.set_num_tokens(static_cast<int32_t>(info.num_tokens));
  out.set_cached_tokens(static_cast<int32_t>(info.cached_tokens));
  out.set_device_bytes(info.memory.device_bytes);
  out.set_host_bytes(info.memory.host_bytes);
  out.set_turns(info.turns);
  out.set_evictions(info.evictions);
  *out.mutable_created_at() = Timestamp(info.created_at);
  *out.mutable_last_used_at() = Timestamp(info.last_used);
  if (info.expires_at != absl::InfiniteFuture()) {
    *out.mutable_expires_at() = Timestamp(info.expires_at);
  }
  return out;
}

grpc::ServerUnaryReactor* SessionService::CreateSession(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  const ServedSessions* served = served_.get();
  return AnswerOnEngine<v1::CreateSessionRequest, v1::Session>(
      context, *replica_, "CreateSession", served, request, response,
      [served, caller = CallerOf(context)](
          const v1::CreateSessionRequest& in) -> absl::StatusOr<EngineWork<v1::Session>> {
        absl::StatusOr<cache::SessionOptions> options =
            served->builder->Session(ToInput(in.options()), {.caller = caller});
        if (!options.ok()) return options.status();
        return EngineWork<v1::Session>(
            [options = *std::move(options)](cache::SessionTable& sessions, v1::Session* out) {
              absl::StatusOr<cache::SessionInfo> info = sessions.Open(options);
              if (!info.ok()) return info.status();
              *out = ToProto(*info);
              return absl::OkStatus();
            });
      });
}

grpc::ServerUnaryReactor* SessionService::GetSession(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return AnswerOnEngine<v1::GetSessionRequest, v1::Session>(
      context, *replica_, "GetSession", served_.get(), request, response,
      [tenant = CallerOf(context).tenant](
          const v1::GetSessionRequest& in) -> absl::StatusOr<EngineWork<v1::Session>> {
        if (absl::Status s = CheckId(in.id()); !s.ok()) return s;
        return EngineWork<v1::Session>(
            [id = in.id(), tenant](cache::SessionTable& sessions, v1::Session* out) {
              absl::StatusOr<cache::SessionInfo> info = sessions.Get(id, tenant);
              if (!info.ok()) return info.status();
              *out = ToProto(*info);
              return absl::OkStatus();
            });
      });
}

grpc::ServerUnaryReactor* SessionService::ListSessions(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return AnswerOnEngine<v1::ListSessionsRequest, v1::ListSessionsResponse>(
      context, *replica_, "ListSessions", served_.get(), request, response,
      [tenant = CallerOf(context).tenant](
          const v1::ListSessionsRequest&) -> absl::StatusOr<EngineWork<v1::ListSessionsResponse>> {
        return EngineWork<v1::ListSessionsResponse>(
            [tenant](cache::SessionTable& sessions, v1::ListSessionsResponse* out) {
              for (const cache::SessionInfo& info : sessions.List(tenant)) {
                *out->add_sessions() = ToProto(info);
              }
              return absl::OkStatus();
            });
      });
}

grpc::ServerUnaryReactor* SessionService::CloseSession(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return AnswerOnEngine<v1::CloseSessionRequest, v1::CloseSessionResponse>(
      context, *replica_, "CloseSession", served_.get(), request, response,
      [tenant = CallerOf(context).tenant](const v1::CloseSessionRequest& in)
          -> absl::StatusOr<EngineWork<v1::CloseSessionResponse>> {
        if (absl::Status s = CheckId(in.id()); !s.ok()) return s;
        return EngineWork<v1::CloseSessionResponse>(
            [id = in.id(), tenant](cache::SessionTable& sessions, v1::CloseSessionResponse*) {
              return sessions.Close(id, tenant);
            });
      });
}

grpc::ServerUnaryReactor* SessionService::RollbackSession(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return AnswerOnEngine<v1::RollbackSessionRequest, v1::Session>(
      context, *replica_, "RollbackSession", served_.get(), request, response,
      [tenant = CallerOf(context).tenant](
          const v1::RollbackSessionRequest& in) -> absl::StatusOr<EngineWork<v1::Session>> {
        if (absl::Status s = CheckId(in.id()); !s.ok()) return s;
        if (in.n() < 1) {
          return absl::InvalidArgumentError(absl::StrCat("n: must be >= 1 (got ", in.n(), ")"));
        }
        return EngineWork<v1::Session>(
            [id = in.id(), n = in.n(), tenant](cache::SessionTable& sessions, v1::Session* out) {
              absl::StatusOr<cache::SessionInfo> info = sessions.Rollback(id, n, tenant);
              if (!info.ok()) return info.status();
              *out = ToProto(*info);
              return absl::OkStatus();
            });
      });
}

}  // namespace kvserve::server::grpc_api
