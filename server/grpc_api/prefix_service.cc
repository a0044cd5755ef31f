// PrefixService: RegisterPrefix through the engine; Get/List/Delete on the store.
#include "server/grpc_api/prefix_service.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/prefix_catalog.h"
#include "cache/retention.h"
#include "server/engine.h"
#include "server/grpc_api/call_context.h"
#include "server/grpc_api/proto_inputs.h"
#include "server/grpc_api/status_mapping.h"
#include "server/grpc_api/unary_answer.h"
#include "server/grpc_api/wire_codec.h"
#include "server/request_builder.h"

namespace kvserve::server::grpc_api {
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

v1::Prefix ToProto(const cache::PrefixInfo& info) {
  v1::Prefix out;
  const auto [space, name] = cache::SplitQualifiedPrefixName(info.name);
  out.set_name(std::string(name));
  out.set_shared(space == cache::kSharedSpace);
  out.set_num_tokens(static_cast<int32_t>(info.num_tokens));
  out.set_bytes(info.bytes);
  out.set_fingerprint(info.fingerprint);
  *out.mutable_created_at() =
      google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(info.created_at));
  out.set_hits(info.hits);
  v1::PrefixOptions* options = out.mutable_options();
  options->set_pinned(info.options.pinned);
  options->set_retention(info.options.pinned
                             ? "pinned"
                             : std::string(cache::RetentionClassName(info.options.retention)));
  options->set_ttl_seconds(
      info.options.ttl == absl::InfiniteDuration() ? 0 : absl::ToInt64Seconds(info.options.ttl));
  options->set_cache_implementation(info.options.cache_implementation);
  out.set_tier(info.tier);
  return out;
}

grpc::ServerUnaryReactor* PrefixService::RegisterPrefix(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* raw_request,
                                                        grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const std::string request_id = BeginCall(context, *replica_, "RegisterPrefix");
  if (absl::Status denied = CallerDenied(context); !denied.ok()) {
    reactor->Finish(ToGrpcStatus(denied));
    return reactor;
  }
  absl::StatusOr<PrefixRegistration> parsed;
  const ServedPrefixes* served = served_.get();
  try {
    v1::RegisterPrefixRequest request;
    absl::Status wire = ParseCallRequest(*context, *raw_request, &request);
    if (!wire.ok()) {
      parsed = wire;
    } else if (served == nullptr) {
      parsed = ModelLoadingError();
    } else {
      parsed = served->builder->Registration(ToInput(request), {.caller = CallerOf(context)});
    }
  } catch (const std::exception& e) {
    parsed = InternalErrorFor(request_id, "RegisterPrefix", &e);
  }
  if (!parsed.ok()) {
    reactor->Finish(ToGrpcStatus(parsed.status()));
    return reactor;
  }
  // The engine calls back once the prefix is stored (and durable); the response buffer
  // lives until Finish.
  served->engine->RegisterPrefix(
      parsed->name, parsed->token_ids, parsed->strategy, parsed->options,
      [reactor, raw_response](absl::StatusOr<cache::PrefixInfo> info) {
        if (!info.ok()) {
          reactor->Finish(ToGrpcStatus(info.status()));
          return;
        }
        reactor->Finish(ToGrpcStatus(SerializeWireMessage(ToProto(*info), raw_response)));
      },
      parsed->encoder_ids);
  return reactor;
}

grpc::ServerUnaryReactor* PrefixService::GetPrefix(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return AnswerUnary<v1::GetPrefixRequest, v1::Prefix>(
      context, *replica_, "GetPrefix", request, response,
      [this, tenant = CallerOf(context).tenant](const v1::GetPrefixRequest& in,
                                                v1::Prefix* out) -> absl::Status {
        const ServedPrefixes* served = served_.get();
        if (served == nullptr) return ModelLoadingError();
        const std::shared_ptr<const cache::PrefixCatalog> catalog = served->engine->catalog();
        const cache::CatalogEntry* entry = cache::FindVisiblePrefix(*catalog, tenant, in.name());
        if (entry == nullptr) return NotFound(in.name());
        *out = ToProto(entry->info);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* PrefixService::ListPrefixes(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return AnswerUnary<v1::ListPrefixesRequest, v1::ListPrefixesResponse>(
      context, *replica_, "ListPrefixes", request, response,
      [this, tenant = CallerOf(context).tenant](const v1::ListPrefixesRequest&,
                                                v1::ListPrefixesResponse* out) -> absl::Status {
        const ServedPrefixes* served = served_.get();
        if (served == nullptr) return ModelLoadingError();
        // The caller's own and the shared ones, by name, own first for a name in both.
        std::vector<const cache::PrefixInfo*> visible;
        for (const auto& [qualified, entry] : *served->engine->catalog()) {
          const std::string_view space = cache::SplitQualifiedPrefixName(qualified).first;
          if (space == tenant || space == cache::kSharedSpace) visible.push_back(&entry.info);
        }
        auto key = [](const cache::PrefixInfo* info) {
          const auto [space, name] = cache::SplitQualifiedPrefixName(info->name);
          return std::make_pair(name, space == cache::kSharedSpace);
        };
        std::stable_sort(visible.begin(), visible.end(),
                         [&key](const cache::PrefixInfo* a, const cache::PrefixInfo* b) {
                           return key(a) < key(b);
                         });
        for (const cache::PrefixInfo* info : visible) *out->add_prefixes() = ToProto(*info);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* PrefixService::DeletePrefix(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw_request,
                                                      grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const std::string request_id = BeginCall(context, *replica_, "DeletePrefix");
  if (absl::Status denied = CallerDenied(context); !denied.ok()) {
    reactor->Finish(ToGrpcStatus(denied));
    return reactor;
  }
  v1::DeletePrefixRequest request;
  const ServedPrefixes* served = served_.get();
  absl::Status parsed = ParseCallRequest(*context, *raw_request, &request);
  if (parsed.ok() && served == nullptr) parsed = ModelLoadingError();
  if (!parsed.ok()) {
    reactor->Finish(ToGrpcStatus(parsed));
    return reactor;
  }
  // The caller's own prefix of that name, else the shared one (admins only); another
  // tenant's is as absent as a name never registered.
  absl::StatusOr<std::string> qualified = served->builder->DeletionTarget(
      request.name(), request.shared(), {.caller = CallerOf(context)});
  if (!qualified.ok()) {
    reactor->Finish(ToGrpcStatus(qualified.status()));
    return reactor;
  }
  // The engine deletes once the deletion is recorded; the reply comes from its callback.
  served->engine->DeletePrefix(*qualified, [reactor, raw_response](absl::Status deleted) {
    if (deleted.ok()) deleted = SerializeWireMessage(v1::DeletePrefixResponse(), raw_response);
    reactor->Finish(ToGrpcStatus(deleted));
  });
  return reactor;
}

}  // namespace kvserve::server::grpc_api
