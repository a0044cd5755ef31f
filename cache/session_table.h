// SessionTable: the open sessions of iterative chat (their histories, their idle caches, TTLs,
// idle offload and the byte budget of idle caches), and the directory of their options that
// request validation reads from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/clock.h"
#include "cache/cache_spec.h"
#include "cache/memory_usage.h"

namespace kvserve::cache {

class KvCache;

// How a session keeps its cache (SessionTable::Open); fixed for its life.
struct SessionOptions {
  // Its cache's strategy (use_cache true; a static cache's max_cache_len resolved).
  CacheSpec cache;
  // The tenant that created it; only that tenant may see or use it (the services check).
  std::string tenant;
  // The named prefix (qualified name) its conversation starts with (empty: none), and that
  // prefix's tokens when the session was created: every turn's prompt starts with them.
  std::string prefix_name;
  std::vector<int32_t> prefix_tokens;
  // It closes this long after its last use (> 0; InfiniteDuration: never; <= 0 at Open: the
  // table's default).
  absl::Duration ttl = absl::Minutes(30);
};

enum class SessionState { kEmpty, kIdle, kRunning, kOffloaded };

// A session as Get reports it.
struct SessionInfo {
  std::string id;
  SessionOptions options;
  SessionState state = SessionState::kEmpty;
  int64_t num_tokens = 0;     // of the history: prompts and answers
  int64_t cached_tokens = 0;  // of those, what its cache holds
  MemoryUsage memory;         // of its cache
  int64_t turns = 0;
  int64_t evictions = 0;
  absl::Time created_at;
  absl::Time last_used;
  absl::Time expires_at;
};

struct SessionStats {
  int64_t live = 0;         // open sessions, offloaded ones included
  int64_t offloaded = 0;    // of those, with their cache moved to the host while idle
  int64_t running = 0;      // with a turn running
  MemoryUsage memory;       // of idle sessions' caches (running ones count as live caches)
  int64_t evictions = 0;    // caches evicted (bytes budget, memory pressure), since start
  int64_t expirations = 0;  // sessions closed by their TTL, since start
  int64_t hits = 0;         // turns that reused their session's cache
  int64_t misses = 0;       // turns that computed their prompt from the start (or a prefix)
};

struct SessionTableOptions {
  // --session-idle-offload-seconds: an idle session's cache moves to host memory after this
  // long unused (InfiniteDuration: never), >= 0.
  absl::Duration idle_offload = absl::Seconds(60);
  // --session-cache-bytes: the most bytes (device and host) idle sessions' caches may hold;
  // beyond it they are evicted in retention order, > 0.
  int64_t cache_bytes = int64_t{1} << 30;
  // Retention order of idle sessions' caches, for eviction (cache_bytes) and for offloading
  // under memory pressure (OffloadIdle): the prefix snapshots' priority (retention.h), class
  // normal, with the session's turns as its hits; the lowest goes first, least recently used
  // among equals. > 0.
  absl::Duration retention_half_life = absl::Minutes(10);
  // --session-ttl-seconds: how long a session lives unused when it does not say, > 0.
  absl::Duration default_ttl = absl::Minutes(30);
  // --session-max-ttl-seconds: the longest TTL a session may ask for (longer ones, and
  // "never", are capped to it), > 0; InfiniteDuration: no cap.
  absl::Duration max_ttl = absl::InfiniteDuration();
  // --max-sessions: sessions open at once at most, >= 1.
  int64_t max_sessions = 1024;
  // --tenant-max-sessions: sessions one tenant may hold open at once; 0: only max_sessions.
  int64_t max_sessions_per_tenant = 0;
  // The model's context: a turn's history + new tokens + max_new_tokens must fit (<= 0:
  // unchecked).
  int64_t max_positions = 0;
};

// The options of open sessions, by id: what request validation needs on gRPC threads.
// Thread-safe.
class SessionDirectory {
 public:
  // The options of the open session `id`; null when it is not open.
  std::shared_ptr<const SessionOptions> Find(const std::string& id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Sets (null: removes) the entry of `id`.
  void Set(const std::string& id, std::shared_ptr<const SessionOptions> options)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const SessionOptions>> entries_
      ABSL_GUARDED_BY(mu_);
};

// What a turn can reuse of its session's cache now.
struct SessionReuse {
  int64_t num_tokens = 0;    // prompt tokens the session's cache supplies
  std::string reason;        // why it supplies none of a history it had; empty otherwise
  int64_t device_bytes = 0;  // the session's cache's device bytes (already in the budget)
};

// Engine-thread owned, except directory(). A turn goes BeginTurn → (ChooseReuse)* →
// TakeCache or DropCache → EndTurn; EndTurn may come at any point after BeginTurn.
class SessionTable {
 public:
  // The memory of a running turn's cache (the manager's), for Get and List.
  using RunningMemory = std::function<MemoryUsage(uint64_t turn)>;

  // InvalidArgument naming the flag for a bad option. `clock` must outlive the table.
  static absl::StatusOr<std::unique_ptr<SessionTable>> Create(const SessionTableOptions& options,
                                                              const base::Clock* clock,
                                                              RunningMemory running_memory);
  ~SessionTable();

  // Opens a session. ResourceExhausted at --max-sessions or at the tenant's
  // --tenant-max-sessions (counting only the caller's own sessions in the message);
  // InvalidArgument for a cache that cannot be kept (no cache). Its id is 32 hex digits from
  // the operating system's random source, so that no id tells anything of another.
  absl::StatusOr<SessionInfo> Open(SessionOptions options);
  // `tenant` (Get, List, Close, Rollback): only that tenant's sessions exist for the call
  // (another's is NOT_FOUND exactly as one never created); empty: every tenant's.
  //
  // NotFound "id: ..." when not open.
  absl::StatusOr<SessionInfo> Get(const std::string& id, std::string_view tenant = {}) const;
  // Oldest first.
  std::vector<SessionInfo> List(std::string_view tenant = {}) const;
  // Frees its cache and forgets it; a running turn finishes first (its cache is dropped then).
  absl::Status Close(const std::string& id, std::string_view tenant = {});
  // Drops the last n tokens of the history (1 <= n <= history minus the prefix's tokens):
  // InvalidArgument "n: ..."; FailedPrecondition while a turn runs. The cache is cropped now
  // when it can be; else the next turn recomputes and says why.
  absl::StatusOr<SessionInfo> Rollback(const std::string& id, int64_t n,
                                       std::string_view tenant = {});
  // TTLs, idle offload and the --session-cache-bytes budget at the clock's time (call every
  // step; it does the work at most every 100 ms of clock time unless something changed).
  void Maintain();
  // Any thread.
  const SessionDirectory& directory() const { return directory_; }
  SessionStats Stats() const;

  // Starts turn `turn` of session `id`. With `append`, `*prompt` (or `first_turn_prompt` on an
  // empty history) is appended to the history and becomes the whole prompt. Sets `*cache` to
  // the session's strategy. NotFound "session: ..." for a session that is not open,
  // FailedPrecondition "session: ..." while another turn runs on it, InvalidArgument when the
  // history with the turn exceeds the model's context (or a static session cache); nothing
  // changes then.
  absl::Status BeginTurn(const std::string& id, uint64_t turn, bool append,
                         absl::Span<const int32_t> first_turn_prompt, int64_t max_new_tokens,
                         std::vector<int32_t>* prompt, CacheSpec* cache);
  // How much of `prompt` (the turn's whole prompt) the session's cache can supply now: the
  // common prefix with the history, when the cache can be cropped back to it (the last prompt
  // token is always computed).
  SessionReuse ChooseReuse(const std::string& id, absl::Span<const int32_t> prompt) const;
  // The session's cache, for its turn to continue (counted as a hit); null when it has none.
  std::unique_ptr<KvCache> TakeCache(const std::string& id);
  // The turn computes its prompt: the session's old cache goes (a miss after the first turn).
  void DropCache(const std::string& id);
  // Turn `turn` ended. With `keep` (it ended between steps) and a cache holding at most
  // `tokens`, the cache and `tokens` (its prompt and every generated token) become the
  // session's; otherwise, when the turn had started (`allocated`), the session keeps its
  // history from before the turn and loses its cache. A session closed during the turn goes.
  void EndTurn(const std::string& id, std::unique_ptr<KvCache> cache,
               absl::Span<const int32_t> tokens, bool keep, bool allocated);

  // Memory pressure. Device bytes idle sessions' caches hold.
  int64_t IdleDeviceBytes() const;
  // Moves idle sessions' caches to the host, in retention order (lowest priority first), until
  // `bytes` device bytes are freed; returns the bytes freed.
  int64_t OffloadIdle(int64_t bytes);
  // The retention priority of the idle session OffloadIdle would move first; nullopt when no
  // idle session holds device bytes.
  std::optional<double> LowestIdlePriority() const;

 private:
  struct Session;

  SessionTable(const SessionTableOptions& options, const base::Clock* clock,
               RunningMemory running_memory);
  // Lowest retention priority first (see SessionTableOptions::retention_half_life).
  void SortByRetention(std::vector<Session*>& sessions) const;
  // The open session `id` of `tenant` (empty: any tenant); null otherwise.
  Session* Find(const std::string& id, std::string_view tenant = {}) const;
  SessionInfo InfoOf(const Session& session) const;
  // Drops a session's cache (counted as an eviction).
  void EvictCache(Session& session);
  void Erase(const std::string& id);
  // 32 hex digits from getrandom(2), unused by any open session.
  std::string NewId() const;

  const SessionTableOptions options_;
  const base::Clock* const clock_;
  const RunningMemory running_memory_;
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
  uint64_t next_serial_ = 0;  // creation order
  SessionStats counts_;       // evictions, expirations, hits, misses
  absl::Time next_maintenance_ = absl::InfinitePast();
  SessionDirectory directory_;
};

}  // namespace kvserve::cache
