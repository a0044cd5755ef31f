// kvserve.v1.CacheAdmin (see cache_admin_service.h).
#include "server/grpc_api/cache_admin_service.h"

#include "server/engine.h"
#include "server/grpc_api/unary_answer.h"

namespace kvserve::server::grpc_api {

grpc::ServerUnaryReactor* CacheAdminService::ListCacheEntries(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  return AnswerUnary<v1::ListCacheEntriesRequest, v1::ListCacheEntriesResponse>(
      context, *replica_, "ListCacheEntries", request, response,
      [this, context](const v1::ListCacheEntriesRequest&,
                      v1::ListCacheEntriesResponse* out) -> absl::Status {
        if (CallerOf(context).role != Role::kAdmin) {
          return absl::PermissionDeniedError("ListCacheEntries: the admin role is required");
        }
        const Served* served = served_.get();
        if (served == nullptr) return ModelLoadingError();
        const cache::StoreListing listing = served->engine->ListCacheEntries();
        out->set_sequence_number(served->sequence_base + listing.sequence);
        for (const cache::StoredEntry& entry : listing.entries) {
          v1::CacheEntry* e = out->add_entries();
          e->set_entry_id(entry.entry_id);
          e->set_space(entry.space);
          e->set_named(entry.named);
          e->set_name(entry.name);
          e->mutable_token_ids()->Add(entry.tokens.begin(), entry.tokens.end());
        }
        return absl::OkStatus();
      });
}

}  // namespace kvserve::server::grpc_api
