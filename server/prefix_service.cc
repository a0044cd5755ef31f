// PrefixService: RegisterPrefix through the engine; Get/List/Delete on the store.
#include "server/prefix_service.h"

#include <google/protobuf/util/time_util.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/prefix_store.h"
#include "server/engine.h"
#include "server/prefix_registry.h"
#include "server/request_parser.h"
#include "server/status_mapping.h"

namespace kvserve::server {
namespace {

grpc::Status NotFound(const std::string& name) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("name: no prefix named '", name, "' is registered"));
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
                                                        const v1::RegisterPrefixRequest* request,
                                                        v1::Prefix* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const ServedPrefixes* served = served_.GetOrFinish(reactor);
  if (served == nullptr) return reactor;
  absl::StatusOr<PrefixRegistration> parsed = served->parser->ParseRegisterPrefix(*request);
  if (!parsed.ok()) {
    reactor->Finish(ToGrpcStatus(parsed.status()));
    return reactor;
  }
  // The engine calls back on its thread once the prefill is stored; the request message and
  // response live until Finish.
  served->engine->RegisterPrefix(
      parsed->name, parsed->token_ids, parsed->options,
      [reactor, request, response, served,
       options = parsed->proto_options](absl::StatusOr<cache::PrefixInfo> info) {
        if (!info.ok()) {
          reactor->Finish(ToGrpcStatus(info.status()));
          return;
        }
        absl::Status saved = served->registry->Put(*request, options);
        *response = ToProto(*info, options);
        reactor->Finish(ToGrpcStatus(saved));
      });
  return reactor;
}

grpc::ServerUnaryReactor* PrefixService::GetPrefix(grpc::CallbackServerContext* context,
                                                   const v1::GetPrefixRequest* request,
                                                   v1::Prefix* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const ServedPrefixes* served = served_.GetOrFinish(reactor);
  if (served == nullptr) return reactor;
  std::optional<cache::PrefixInfo> info = served->store->Info(request->name());
  if (!info) {
    reactor->Finish(NotFound(request->name()));
    return reactor;
  }
  *response =
      ToProto(*info, served->registry->Options(request->name()).value_or(v1::PrefixOptions()));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PrefixService::ListPrefixes(grpc::CallbackServerContext* context,
                                                      const v1::ListPrefixesRequest* request,
                                                      v1::ListPrefixesResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const ServedPrefixes* served = served_.GetOrFinish(reactor);
  if (served == nullptr) return reactor;
  for (const cache::PrefixInfo& info : served->store->List()) {
    *response->add_prefixes() =
        ToProto(info, served->registry->Options(info.name).value_or(v1::PrefixOptions()));
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PrefixService::DeletePrefix(grpc::CallbackServerContext* context,
                                                      const v1::DeletePrefixRequest* request,
                                                      v1::DeletePrefixResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const ServedPrefixes* served = served_.GetOrFinish(reactor);
  if (served == nullptr) return reactor;
  if (!served->store->DeleteNamed(request->name())) {
    reactor->Finish(NotFound(request->name()));
    return reactor;
  }
  reactor->Finish(ToGrpcStatus(served->registry->Remove(request->name())));
  return reactor;
}

}  // namespace kvserve::server
