// KvCacheManager: the one owner of KV memory beside the engine: every live sequence's cache,
// the device budget (prefix snapshots included), admission by bytes, prefix choice, copy and
// capture, reversible steps and the out-of-memory fallback.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cache/cache_spec.h"
#include "cache/clock.h"
#include "cache/kv_cache.h"
#include "cache/kv_memory_budget.h"
#include "cache/layer_type.h"
#include "cache/prefix_store.h"

namespace kvserve::cache {

class Snapshot;

// The engine's id of a sequence (a request or a prefix registration).
using SequenceId = uint64_t;

// What the manager must know of the model: the shape of one token's K/V in every layer.
struct KvModelShape {
  std::vector<LayerSpec> layers;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t bytes_per_element = 4;  // of the cache dtype
  // Snapshots are made and accepted with exactly this fingerprint. Non-empty.
  std::string fingerprint;
  // The model's context (max_position_embeddings): a session turn's history + new tokens +
  // max_new_tokens must fit. <= 0: unchecked.
  int64_t max_positions = 0;
};

struct KvCacheManagerOptions {
  // --kv-device-bytes (< 0: unlimited) and --fault-inject-oom-rate. The limit covers live
  // caches and prefix snapshots together.
  KvMemoryBudgetOptions budget;
  // --prefix-cache-bytes: the most bytes of prefix snapshots kept, > 0.
  int64_t prefix_cache_bytes = int64_t{256} << 20;
  // --auto-prefix-cache: keep each eligible prompt's K/V as an automatic prefix entry and
  // start later sequences from the longest stored prefix of their prompt.
  bool auto_prefix_cache = true;
  // --auto-prefix-min-tokens: shortest prompt kept, and shortest match used, automatically.
  int64_t auto_prefix_min_tokens = 32;
  // Sessions (iterative chat). --session-idle-offload-seconds: an idle session's cache moves
  // to host memory after this long unused (InfiniteDuration: never).
  absl::Duration session_idle_offload = absl::Seconds(60);
  // --session-cache-bytes: the most bytes (device and host) idle sessions' caches may hold;
  // the least recently used are evicted beyond it, > 0.
  int64_t session_cache_bytes = int64_t{1} << 30;
  // --session-ttl-seconds: how long a session lives unused when it does not say, > 0.
  absl::Duration session_default_ttl = absl::Minutes(30);
  // --max-sessions: sessions open at once at most, >= 1.
  int64_t max_sessions = 1024;
  // --tenant-max-prefix-bytes: the most bytes of prefix snapshots one tenant's namespace
  // holds (PrefixStoreOptions::space_budget_bytes); 0: no limit, >= 0.
  int64_t tenant_prefix_bytes = 0;
};

// How a session keeps its cache (CreateSession); fixed for its life.
struct SessionOptions {
  // Its cache's strategy (use_cache true; a static cache's max_cache_len resolved).
  CacheSpec cache;
  // The tenant that created it; only that tenant may see or use it (the services check).
  std::string tenant;
  // The named prefix (qualified name) its conversation starts with (empty: none), and that prefix's
  // tokens when the session was created: every turn's prompt starts with them.
  std::string prefix_name;
  std::vector<int32_t> prefix_tokens;
  // It closes this long after its last use (> 0; InfiniteDuration: never).
  absl::Duration ttl = absl::Minutes(30);
};

enum class SessionState { kEmpty, kIdle, kRunning, kOffloaded };

// A session as GetSession reports it.
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
  int64_t live = 0;         // open sessions
  int64_t offloaded = 0;    // of those, with their cache moved to the host while idle
  int64_t running = 0;      // with a turn running
  MemoryUsage memory;       // of idle sessions' caches (running ones count as live caches)
  int64_t evictions = 0;    // caches evicted (bytes budget, memory pressure), since start
  int64_t expirations = 0;  // sessions closed by their TTL, since start
  int64_t hits = 0;         // turns that reused their session's cache
  int64_t misses = 0;       // turns that computed their prompt from the start (or a prefix)
};

// What a sequence asks for; given once, at Add.
struct SequenceRequest {
  // The whole prompt (a named prefix's tokens included), >= 1 token.
  std::vector<int32_t> prompt;
  // Tokens it may generate, >= 1 (a registration: 1, never sampled).
  int64_t max_new_tokens = 1;
  // Batch rows its cache holds after the prompt (beams or samples of one request, made by
  // ExpandRows from the prompt's one row), >= 1.
  int64_t rows = 1;
  // Its cache (kNone: it keeps none). For a registration, the strategy it is registered for.
  CacheSpec cache;
  // The named prefix the sequence starts with (held so that a deletion while it waits
  // cannot take it away); null without one.
  std::shared_ptr<const Snapshot> named_prefix;
  std::string named_prefix_name;
  // The prefix-store namespace of its tenant (see PrefixStore): automatic reuse looks up this
  // namespace and the shared one, and keeps its prompt in this one.
  std::string prefix_space;
  // Compute the whole prompt even when a prefix matches.
  bool skip_prefix_reuse = false;
  // A turn of this session (empty: none). Its cache is the session's; when it ends (Release)
  // the cache and the sequence's tokens go back to the session.
  std::string session;
  // With `session`: `prompt` holds only tokens to append to the session's history (Add
  // prepends the history), and `first_turn_prompt` what to append instead when the history is
  // empty (text with the tokens that start a sequence).
  bool session_append = false;
  std::vector<int32_t> first_turn_prompt;
  // A prefix registration: a prefill of every prompt token into a capture cache, stored
  // under `registration_name` (qualified) by CompleteRegistration.
  bool registration = false;
  std::string registration_name;
  NamedPrefixOptions registration_options;
};

// The answer to CanAdmit.
struct Admission {
  enum class Decision {
    kAdmit,  // fits beside the live caches and those admitted earlier in the step
    kWait,   // does not fit yet (memory held by live sequences, or a shared prefix is being
             // computed by a live sequence): ask again next step
    kNever,  // cannot fit even alone and offloaded; `reason` says why, with the bytes
  };
  Decision decision = Decision::kAdmit;
  // Prompt tokens a prefix (or the session's cache) will supply if admitted now (< the
  // prompt's length).
  int64_t num_cached_tokens = 0;
  std::string reason;  // kNever, and kWait for the log
};

// What Allocate did.
struct Allocation {
  KvCache* cache = nullptr;  // owned by the manager; null for a sequence without a cache
  int64_t num_cached_tokens = 0;
  std::string prefix_name;  // the named prefix copied; empty for none or an automatic one
  // The copy ran out of device memory and the cache continues offloaded.
  bool offload_fallback = false;
  // A session turn whose session's cache could not be used for the common prefix of its
  // prompt and history: why (evicted, a layer cannot crop that far back, ...). Empty otherwise.
  std::string session_recompute_reason;
};

// The outcome of an out-of-memory error in a step (see OnOutOfMemory).
struct OutOfMemoryAction {
  // Prefix snapshots nobody used were dropped: run the step again.
  bool reclaimed_snapshots = false;
  // A cache moved to its offloaded form (it held `offloaded_bytes` on the device, or will):
  // run the step again.
  std::optional<SequenceId> offloaded;
  int64_t offloaded_bytes = 0;
  // Idle sessions' caches moved to the host: run the step again.
  bool offloaded_idle_sessions = false;
  // Nothing could be moved: this sequence of the step must fail (RESOURCE_EXHAUSTED, with
  // `reason`); run the step again without it.
  std::optional<SequenceId> victim;
  std::string reason;
};

struct KvCacheManagerStats {
  int64_t num_sequences = 0;
  MemoryUsage live;           // every live cache
  int64_t prefix_bytes = 0;   // snapshots held by the store
  int64_t budget_used = 0;    // device bytes counted against the limit (live + snapshots)
  int64_t budget_limit = -1;  // < 0: unlimited
  int64_t budget_peak = 0;    // the most budget_used since the start
  int64_t num_offload_fallbacks = 0;
  PrefixStoreStats prefixes;
  // Per strategy name ("dynamic", "offloaded", ...): device and host bytes of live caches.
  std::map<std::string, MemoryUsage> by_strategy;
  SessionStats sessions;
};

// A named prefix as the catalog publishes it; immutable.
struct CatalogEntry {
  PrefixInfo info;
  // Weak: the catalog must not keep a snapshot the store would evict or replace.
  std::weak_ptr<const Snapshot> snapshot;
};

// The named prefixes at one point, for other threads (gRPC handlers, the request parser):
// sorted by name; an immutable value.
using PrefixCatalog = std::map<std::string, CatalogEntry>;

// The entry the name `name` resolves to for `tenant`: the tenant's own prefix of that name,
// else the shared one (see QualifiedPrefixName); null when neither exists. `*qualified` (may
// be null) gets the entry's catalog key.
const CatalogEntry* FindVisiblePrefix(const PrefixCatalog& catalog, std::string_view tenant,
                                      std::string_view name, std::string* qualified = nullptr);

// A named prefix that appeared (put or replaced: `info` and `snapshot` set) or went (deleted,
// evicted or expired: both empty).
struct CatalogChange {
  std::string name;
  std::optional<PrefixInfo> info;
  std::shared_ptr<const Snapshot> snapshot;
};
// Told of every CatalogChange, in order, on the engine thread, so that persistence follows
// the catalog exactly.
using CatalogListener = std::function<void(const CatalogChange& change)>;

// Engine-thread owned: every method but catalog() and Stats() must be called from the one
// thread that runs the model. Sequences go Add → (CanAdmit)* → Allocate → steps → Release;
// Release may come at any point after Add.
class KvCacheManager {
 public:
  // InvalidArgument naming the option for a bad option or shape. `clock` (TTLs, LRU) must
  // outlive the manager.
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(
      const KvCacheManagerOptions& options, KvModelShape shape,
      const Clock* clock = RealClock::Get());
  ~KvCacheManager();
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  // Starts tracking a sequence; nothing is allocated. InvalidArgument for an empty prompt,
  // AlreadyExists for an id in use. A session turn: NotFound "session: ..." for a session that
  // is not open, FailedPrecondition "session: ..." while another turn runs on it,
  // InvalidArgument when the history with the turn exceeds the model's context (or a static
  // session cache).
  absl::Status Add(SequenceId id, SequenceRequest request);
  // The sequence's whole prompt (a session turn's history prepended); empty when unknown.
  const std::vector<int32_t>& prompt(SequenceId id) const;

  // Whether `id` (added, not allocated) can be admitted now, with `admitted_this_step`
  // (sequences already admitted in this scheduling pass, not allocated yet) counted as if
  // allocated: their memory, and their prompts as prefills in flight. Chooses the prefix it would
  // start from. No observable side effects: the answer may be asked for again; Allocate uses the
  // prefix chosen by the last answer.
  Admission CanAdmit(SequenceId id, absl::Span<const SequenceId> admitted_this_step);

  // Builds the sequence's cache and copies its chosen prefix into it (deep copy; a quantized
  // cache keeps the copied prefix at full precision until its first update, so that it
  // quantizes prefix and suffix together as a cold prefill would). When the copy runs out of
  // device memory the cache continues offloaded. Errors: NotFound for an unknown id,
  // ResourceExhausted when the prefix cannot be copied even offloaded (the sequence must
  // then be released).
  absl::StatusOr<Allocation> Allocate(SequenceId id);

  // The sequence's cache (null before Allocate or without a cache).
  KvCache* cache(SequenceId id) const;
  // Whether its cache was moved to offloaded form after an out-of-memory error.
  bool offload_fallback(SequenceId id) const;
  // The strategy its cache follows now: its own, or the offloaded one after a fallback.
  std::string strategy_name(SequenceId id) const;
  // How its prompt may be split into steps: in one step for caches whose contents depend on
  // how updates are split (quantized), else in chunks.
  bool prefill_whole(SequenceId id) const;

  // A step over `ids` (allocated sequences with caches): BeginStep before the forward,
  // CommitStep after it succeeded, RollbackStep after it failed (every cache back to its
  // length at BeginStep). RollbackStep returns the ids whose cache could not be rolled back
  // (they must fail).
  void BeginStep(absl::Span<const SequenceId> ids);
  void CommitStep(absl::Span<const SequenceId> ids);
  std::vector<SequenceId> RollbackStep(absl::Span<const SequenceId> ids);

  // After an out-of-memory error in a step over `ids` (rolled back): drops prefix snapshots
  // nobody uses, else moves the live cache with the most device bytes to its offloaded form,
  // else (every cache offloaded already) names the sequence of `ids` holding the most bytes
  // as the one to fail.
  OutOfMemoryAction OnOutOfMemory(absl::Span<const SequenceId> ids);

  // The sequence's prompt has just been prefilled whole: keeps it as an automatic prefix
  // entry when it qualifies (automatic reuse on, a dynamic cache on a full-attention model,
  // at least auto_prefix_min_tokens tokens). Sequences waiting on it may then be admitted.
  void OnPrefilled(SequenceId id);

  // Batch rows (beams, samples) of one sequence, on the engine thread between steps.
  //
  // Repeats every row of the sequence's cache `repeats` times, adjacent (its prompt, computed
  // once, becomes each beam's). When the copies do not fit the device budget, unused
  // snapshots are dropped and idle sessions offloaded first; then the cache moves to its
  // offloaded form and is repeated on the host (reported as an offload fallback), as a step
  // that runs out of memory would. InvalidArgument for repeats < 1 or a sequence without a
  // cache.
  absl::Status ExpandRows(SequenceId id, int64_t repeats);
  // Row i of the sequence's cache becomes its row parents[i] (beam search's reorder; the
  // number of rows may shrink, as SelectIndices). InvalidArgument for an index out of range.
  absl::Status SelectRows(SequenceId id, absl::Span<const int64_t> parents);

  // A registration's prompt is prefilled: stores its snapshot under its name. Returns the
  // store's answer (see PrefixStore::PutNamed). The sequence must still be released.
  absl::StatusOr<PrefixInfo> CompleteRegistration(SequenceId id);

  // Frees everything the sequence holds. Unknown ids are ignored. A session turn gives its
  // cache back to its session, with `tokens` (its prompt and every generated token) as the
  // session's history, when `keep_session_cache` (the turn ended between steps: finished,
  // cancelled, expired); otherwise the session keeps its history from before the turn and
  // loses its cache.
  void Release(SequenceId id, absl::Span<const int32_t> tokens = {},
               bool keep_session_cache = false);

  // Sessions (engine thread). CreateSession: ResourceExhausted at --max-sessions,
  // InvalidArgument for a cache that cannot be kept (no cache).
  absl::StatusOr<SessionInfo> CreateSession(SessionOptions options);
  // `tenant` (GetSession, ListSessions, CloseSession, RollbackSession): only that tenant's
  // sessions exist for the call (another's is NOT_FOUND exactly as one never created); empty:
  // every tenant's.
  //
  // NotFound "id: ..." when not open.
  absl::StatusOr<SessionInfo> GetSession(const std::string& id, std::string_view tenant = {}) const;
  // Oldest first.
  std::vector<SessionInfo> ListSessions(std::string_view tenant = {}) const;
  // Frees its cache and forgets it; a running turn finishes first (its cache is dropped then).
  absl::Status CloseSession(const std::string& id, std::string_view tenant = {});
  // Drops the last n tokens of the history (1 <= n <= history minus the prefix's tokens):
  // InvalidArgument "n: ..."; FailedPrecondition while a turn runs. The cache is cropped now
  // when it can be; else the next turn recomputes and says why.
  absl::StatusOr<SessionInfo> RollbackSession(const std::string& id, int64_t n,
                                              std::string_view tenant = {});
  // TTLs, idle offload and the --session-cache-bytes budget at the clock's time (call every
  // step; it does the work at most every 100 ms of clock time unless something changed).
  void MaintainSessions();
  // The options of an open session, for the request parser; null when not open. Any thread.
  std::shared_ptr<const SessionOptions> session_options(const std::string& id) const;

  // Named prefixes. DeletePrefix: false when absent; reports to the listener.
  bool DeletePrefix(const std::string& name);
  bool HasPrefix(const std::string& name) const;
  // The named prefix's snapshot (no hit counted); null when absent.
  std::shared_ptr<const Snapshot> prefix_snapshot(const std::string& name) const;
  // The name a registration stores its prefix under (empty for other sequences).
  std::string registration_name(SequenceId id) const;
  // Every change of the named prefixes goes to `listener` (may be null). Call before use.
  void SetCatalogListener(CatalogListener listener) { listener_ = std::move(listener); }

  // The last published catalog. Any thread; cheap (a shared pointer copy).
  std::shared_ptr<const PrefixCatalog> catalog() const;
  // Publishes the catalog if it changed since the last call (hits and last use included).
  // Engine thread; call once per step.
  void PublishCatalog();

  // A consistent view for metrics and tests. Engine thread.
  KvCacheManagerStats Stats() const;
  const KvMemoryBudget& budget() const { return *budget_; }

  // Estimates of the device bytes a cache for `tokens` tokens needs, from the model's shape:
  // every layer on the device, and offloaded (about two layers resident at a time). A dynamic
  // layer growing token by token may hold up to a quarter more for a while; the out-of-memory
  // fallback covers that. A pure function of the shape: any thread.
  struct Estimate {
    int64_t total_bytes = 0;
    int64_t offloaded_resident_bytes = 0;
  };
  Estimate EstimateBytes(int64_t tokens, int64_t rows = 1) const;

 private:
  struct Sequence;
  struct Session;

  KvCacheManager(const KvCacheManagerOptions& options, KvModelShape shape,
                 std::unique_ptr<PrefixStore> store, const Clock* clock);

  Sequence* Find(SequenceId id) const;
  // The prefix `seq` would start from now (no hit counted).
  PrefixMatch ChoosePrefix(const Sequence& seq) const;
  // Tokens `seq` would share with a prompt a live sequence (allocated, or admitted earlier in
  // this pass) is prefilling and will keep, when that is more than `best` and at least the
  // minimum: then it should wait for it.
  int64_t SharedWithPrefillInFlight(const Sequence& seq, int64_t best,
                                    absl::Span<const SequenceId> admitted_this_step) const;
  // Frees unpinned, unreferenced prefix snapshots (least recently used first) until `bytes`
  // are freed or none is left; returns the bytes freed.
  int64_t ReclaimSnapshots(int64_t bytes);
  // Brings the budget's count of snapshot bytes up to date.
  void SyncSnapshotBytes();
  // Session helpers.
  // The open session `id` of `tenant` (empty: any tenant); null otherwise.
  Session* FindSession(const std::string& id, std::string_view tenant = {}) const;
  SessionInfo InfoOf(const Session& session) const;
  // How many tokens of `seq`'s prompt its session's cache can supply now, and why none can
  // when the common prefix is not used (sets seq's session fields).
  void ChooseSessionReuse(Sequence& seq) const;
  // Drops a session's cache (counted as an eviction).
  void EvictSessionCache(Session& session);
  void EraseSession(const std::string& id);
  // Moves idle sessions' device bytes to the host, least recently used first, until `bytes`
  // are freed; returns the bytes freed.
  int64_t OffloadIdleSessions(int64_t bytes);
  // Device bytes idle sessions' caches hold.
  int64_t IdleSessionDeviceBytes() const;
  // Publishes the session directory for session_options().
  void PublishSessionOptions(const std::string& id, std::shared_ptr<const SessionOptions> options);

  // Reports named prefixes that changed to the listener and marks the catalog dirty.
  void NoteNamedChange(const std::string& name);
  void OnNamedDropped(const std::string& name);

  const KvCacheManagerOptions options_;
  const KvModelShape shape_;
  const Clock* const clock_;
  // Whether an automatic match may end inside a stored prefix (no sliding/chunked layers).
  const bool allow_partial_prefix_;
  std::unique_ptr<KvMemoryBudget> budget_;
  std::unique_ptr<PrefixStore> store_;
  absl::flat_hash_map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  int64_t snapshot_bytes_accounted_ = 0;  // what the budget counts for the store
  int64_t num_offload_fallbacks_ = 0;
  CatalogListener listener_;
  bool catalog_dirty_ = true;
  // Open sessions by id, and their creation order.
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
  uint64_t next_session_serial_ = 0;
  uint64_t session_id_state_;    // the id generator's state (seeded at random)
  SessionStats session_counts_;  // evictions, expirations, hits, misses
  absl::Time next_session_maintenance_ = absl::InfinitePast();

  mutable absl::Mutex sessions_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const SessionOptions>> session_directory_
      ABSL_GUARDED_BY(sessions_mu_);

  mutable absl::Mutex catalog_mu_;
  std::shared_ptr<const PrefixCatalog> catalog_ ABSL_GUARDED_BY(catalog_mu_);
};

}  // namespace kvserve::cache
