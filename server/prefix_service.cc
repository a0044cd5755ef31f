// PrefixService: RegisterPrefix through the engine; Get/List/Delete on the store.
#include "server/prefix_service.h"

#include <google/protobuf/util/time_util.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/prefix_store.h"
#include "server/engine.h"
#include "server/prefix_registry.h"
#include "server/request_parser.h"
#include "server/status_mapping.h"
#include "server/unary_answer.h"
#include "server/wire_codec.h"

namespace kvserve::server {
namespace {

absl::Status NotFound(const std::string& name) {
  // Names are not validated on lookup, so a huge one is quoted short.
  constexpr size_t kMaxQuoted = 128;
  const std::string quoted =
      name.size() <= kMaxQuoted
          ? name
          : absl::StrCat(name.substr(0, kMaxQuoted), "... (", name.size(), " bytes)");
  return absl::NotFoundError(absl::StrCat("name: no prefix named '", quoted, "' is registered"));
}

}  // namespace

v1::Prefix ToProto(const cache::PrefixInfo& info, const v1::PrefixOptions& options) {
  v1::Prefix out;
  out.set_name(info.name);
  out.set_num_tokens(static_cast<int32_t>(info.num_tokens));
  out.set_bytes(info.bytes);
  out.set_fingerprint(info.fingerprint);
  *out.mutable_created_at() =
      google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(info.created_at));
  out.set_hits(info.hits);
  *out.mutable_options() = options;
  return out;
}

grpc::ServerUnaryReactor* PrefixService::RegisterPrefix(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* raw_request,
                                                        grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const std::string request_id = BeginCall(context, *replica_, "RegisterPrefix");
  auto request = std::make_shared<v1::RegisterPrefixRequest>();
  absl::StatusOr<PrefixRegistration> parsed;
  const ServedPrefixes* served = served_.get();
  try {
    absl::Status wire = ParseWireMessage(*raw_request, request.get());
    if (!wire.ok()) {
      parsed = wire;
    } else if (served == nullptr) {
      parsed = ModelLoadingError();
    } else {
      parsed = served->parser->ParseRegisterPrefix(*request);
    }
  } catch (const std::exception& e) {
    parsed = InternalErrorFor(request_id, "RegisterPrefix", &e);
  }
  if (!parsed.ok()) {
    reactor->Finish(ToGrpcStatus(parsed.status()));
    return reactor;
  }
  // The engine calls back on its thread once the prefill is stored; the response buffer
  // lives until Finish.
  served->engine->RegisterPrefix(
      parsed->name, parsed->token_ids, parsed->options,
      [reactor, request, raw_response, served,
       options = parsed->proto_options](absl::StatusOr<cache::PrefixInfo> info) {
        if (!info.ok()) {
          reactor->Finish(ToGrpcStatus(info.status()));
          return;
        }
        // A registration that cannot be saved is undone, so that a restart does not lose
        // a prefix the client saw registered. (One it replaced is gone from the store but
        // stays in the state file.)
        absl::Status saved = served->registry->Put(*request, options);
        if (!saved.ok()) {
          served->store->DeleteNamed(info->name);
          reactor->Finish(ToGrpcStatus(saved));
          return;
        }
        reactor->Finish(ToGrpcStatus(SerializeWireMessage(ToProto(*info, options), raw_response)));
      });
  return reactor;
}

grpc::ServerUnaryReactor* PrefixService::GetPrefix(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return AnswerUnary<v1::GetPrefixRequest, v1::Prefix>(
      context, *replica_, "GetPrefix", request, response,
      [this](const v1::GetPrefixRequest& in, v1::Prefix* out) -> absl::Status {
        const ServedPrefixes* served = served_.get();
        if (served == nullptr) return ModelLoadingError();
        std::optional<cache::PrefixInfo> info = served->store->Info(in.name());
        if (!info) return NotFound(in.name());
        *out = ToProto(*info, served->registry->Options(in.name()).value_or(v1::PrefixOptions()));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* PrefixService::ListPrefixes(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return AnswerUnary<v1::ListPrefixesRequest, v1::ListPrefixesResponse>(
      context, *replica_, "ListPrefixes", request, response,
      [this](const v1::ListPrefixesRequest&, v1::ListPrefixesResponse* out) -> absl::Status {
        const ServedPrefixes* served = served_.get();
        if (served == nullptr) return ModelLoadingError();
        for (const cache::PrefixInfo& info : served->store->List()) {
          *out->add_prefixes() =
              ToProto(info, served->registry->Options(info.name).value_or(v1::PrefixOptions()));
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* PrefixService::DeletePrefix(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return AnswerUnary<v1::DeletePrefixRequest, v1::DeletePrefixResponse>(
      context, *replica_, "DeletePrefix", request, response,
      [this](const v1::DeletePrefixRequest& in, v1::DeletePrefixResponse*) -> absl::Status {
        const ServedPrefixes* served = served_.get();
        if (served == nullptr) return ModelLoadingError();
        if (!served->store->Info(in.name()).has_value()) return NotFound(in.name());
        // The state file first: when it cannot be saved, the prefix stays registered.
        if (absl::Status saved = served->registry->Remove(in.name()); !saved.ok()) return saved;
        // Deleted meanwhile by another call.
        if (!served->store->DeleteNamed(in.name())) return NotFound(in.name());
        return absl::OkStatus();
      });
}

}  // namespace kvserve::server
