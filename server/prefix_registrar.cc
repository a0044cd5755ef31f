// Named prefixes registered and deleted in the order they are recorded (see prefix_registrar.h).
#include "server/prefix_registrar.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/snapshot.h"

namespace kvserve::server {
namespace {

absl::Status NotRegistered(const std::string& qualified) {
  // Named as the caller named it (without its namespace); a huge name is quoted short.
  const std::string name(cache::SplitQualifiedPrefixName(qualified).second);
  constexpr size_t kMaxQuoted = 128;
  return absl::NotFoundError(absl::StrCat(
      "name: no prefix named '", name.substr(0, kMaxQuoted),
      name.size() > kMaxQuoted ? absl::StrCat("... (", name.size(), " bytes)") : std::string(),
      "' is registered"));
}

}  // namespace

void PrefixRegistrar::Stored(absl::StatusOr<cache::PrefixInfo> stored, RegisterCallback done) {
  if (!stored.ok()) {
    Publish();  // what the attempt evicted
    done(stored.status());
    return;
  }
  // Weak: a reply waiting for durability must not keep the prefix from being evicted.
  std::weak_ptr<const cache::Snapshot> snapshot;
  const std::shared_ptr<const cache::PrefixCatalog> catalog = kv_->catalog().Get();
  if (auto it = catalog->find(stored->name); it != catalog->end()) {
    snapshot = it->second.snapshot;
  }
  const std::string name = stored->name;
  PendingReply reply{.name = name,
                     .kind = cache::PrefixEventKind::kStored,
                     .on_saved = [this, done = std::move(done), info = *std::move(stored), name,
                                  snapshot](absl::Status saved) {
                       if (saved.ok()) {
                         done(info);
                         return;
                       }
                       // Not durable: the registration is undone, unless the name holds other
                       // content by now.
                       post_([this, name, snapshot] {
                         // Gone already (evicted, expired, replaced): nothing of this put is left
                         // to undo.
                         if (std::shared_ptr<const cache::Snapshot> held = snapshot.lock()) {
                           kv_->DeletePrefix(name, held.get());
                         }
                         kv_->Maintain();
                         Publish();
                       });
                       done(saved);
                     }};
  PublishWith(&reply);
}

void PrefixRegistrar::Delete(const std::string& name, DeleteCallback done) {
  std::optional<cache::RemovedPrefix> removed = kv_->DeletePrefix(name);
  kv_->Maintain();  // the published catalog follows at once
  if (!removed) {
    PublishWith(nullptr);  // what Maintain changed is recorded first
    if (persistence_ == nullptr) {
      done(NotRegistered(name));
      return;
    }
    // Absent now, but perhaps because another client's delete emptied the name and is not
    // durable yet: a record of the name's state (gone) puts this answer behind that delete's,
    // so that no NOT_FOUND is answered for a name that a crash would bring back.
    persistence_->RecordDelete(name, [name, done = std::move(done)](absl::Status saved) {
      done(saved.ok() ? NotRegistered(name) : saved);
    });
    return;
  }
  PendingReply reply{.name = name,
                     .kind = cache::PrefixEventKind::kRemoved,
                     .on_saved = [this, removed = *std::move(removed),
                                  done = std::move(done)](absl::Status saved) {
                       if (saved.ok()) {
                         done(absl::OkStatus());
                         return;
                       }
                       // Not durable: the prefix comes back as it was before the client's
                       // reply says so.
                       const bool posted = post_([this, removed, done, saved] {
                         kv_->RestorePrefix(removed);
                         kv_->Maintain();
                         Publish();
                         done(saved);
                       });
                       if (!posted) done(saved);
                     }};
  PublishWith(&reply);
}

void PrefixRegistrar::Publish() { PublishWith(nullptr); }

void PrefixRegistrar::PublishWith(PendingReply* reply) {
  std::vector<cache::PrefixEvent> events = kv_->prefix_store().events().Drain();
  if (!events.empty()) {
    for (PrefixEventConsumer* consumer : consumers_) consumer->Consume(events);
  }
  if (persistence_ == nullptr) {
    if (reply != nullptr) reply->on_saved(absl::OkStatus());
    return;
  }
  // A removal by replacement is not recorded: the put that follows replaces the record.
  auto recorded = [](const cache::PrefixEvent& e) {
    return e.named && (e.kind == cache::PrefixEventKind::kStored ||
                       (e.kind == cache::PrefixEventKind::kRemoved &&
                        e.cause != cache::RemovalCause::kReplaced));
  };
  int attach = -1;
  if (reply != nullptr) {
    for (size_t i = 0; i < events.size(); ++i) {
      if (recorded(events[i]) && events[i].name == reply->name && events[i].kind == reply->kind) {
        attach = static_cast<int>(i);
      }
    }
  }
  for (size_t i = 0; i < events.size(); ++i) {
    cache::PrefixEvent& e = events[i];
    if (!recorded(e)) continue;
    PrefixPersistence::Done saved;
    if (static_cast<int>(i) == attach) saved = std::move(reply->on_saved);
    if (e.kind == cache::PrefixEventKind::kStored) {
      persistence_->RecordPut(e.name, std::move(e.tokens), e.options, e.created_at,
                              std::move(saved));
    } else {
      persistence_->RecordDelete(e.name, std::move(saved));
    }
  }
  if (reply == nullptr || attach >= 0) return;
  // The change made no event (a registration of the same content again): record the name's
  // current state once more, so that the reply still waits until it is durable.
  const std::shared_ptr<const cache::PrefixCatalog> catalog = kv_->catalog().Get();
  auto it = catalog->find(reply->name);
  std::shared_ptr<const cache::Snapshot> snapshot =
      it != catalog->end() ? it->second.snapshot.lock() : nullptr;
  if (reply->kind != cache::PrefixEventKind::kStored || snapshot == nullptr) {
    reply->on_saved(absl::OkStatus());
    return;
  }
  persistence_->RecordPut(reply->name, snapshot->content_ids(), it->second.info.options,
                          it->second.info.created_at, std::move(reply->on_saved));
}

}  // namespace kvserve::server
