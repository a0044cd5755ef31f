// PrefixRegistrar: named prefixes registered and deleted on the engine thread, recorded in the
// persistence in exactly the order the prefix store changed (its event log), with each client's
// reply sent once its change is durable and undone when it cannot be.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/kv_cache_manager.h"
#include "server/prefix_event_consumer.h"
#include "server/prefix_persistence.h"

namespace kvserve::server {

// A registration's outcome: the stored prefix, or why it was not stored.
using RegisterCallback = std::function<void(absl::StatusOr<cache::PrefixInfo>)>;
// A deletion's outcome: OK (deleted), NotFound, or Internal when it could not be recorded.
using DeleteCallback = std::function<void(absl::Status)>;

// Engine thread, but for the persistence's callbacks (any thread), which come back through
// `post`. The manager and the persistence must outlive it.
class PrefixRegistrar {
 public:
  // Runs a closure on the engine thread soon; false, without running it, once the engine has
  // stopped.
  using Post = std::function<bool(std::function<void()>)>;

  // `persistence` null: nothing is recorded and replies come at once. Every drained event is
  // also handed to each of `consumers` (not owned; they must outlive the registrar), in order,
  // before it is recorded.
  PrefixRegistrar(cache::KvCacheManager* kv, PrefixPersistence* persistence, Post post,
                  std::vector<PrefixEventConsumer*> consumers = {})
      : kv_(kv),
        persistence_(persistence),
        post_(std::move(post)),
        consumers_(std::move(consumers)) {}

  // A registration was stored (KvCacheManager::CompleteRegistration's answer): replies once the
  // put is durable. A put that cannot be recorded is undone (the name deleted again, if it
  // still holds that content) and the reply is the persistence's error.
  void Stored(absl::StatusOr<cache::PrefixInfo> stored, RegisterCallback done);
  // Deletes the named prefix `name` (qualified) and replies once the deletion is durable; a
  // deletion that cannot be recorded is undone (the prefix put back as it was) before the
  // reply, which is then the persistence's error. NotFound naming the prefix when absent.
  void Delete(const std::string& name, DeleteCallback done);
  // Records every named change of the store since the last call (evictions and expiries
  // included), in order. Call once per step, and after anything that changes the store.
  void Publish();

 private:
  // A reply waiting for the record of the change it made.
  struct PendingReply {
    std::string name;
    cache::PrefixEventKind kind;
    std::function<void(absl::Status)> on_saved;
  };
  // Records the drained events, attaching `reply` (may be null) to the last event of its name
  // and kind; when no such event was drained (an idempotent registration), the current state of
  // the name is recorded again for it, so that the reply still waits for durability.
  void PublishWith(PendingReply* reply);

  cache::KvCacheManager* const kv_;
  PrefixPersistence* const persistence_;
  const Post post_;
  const std::vector<PrefixEventConsumer*> consumers_;
};

}  // namespace kvserve::server
