// KvCacheManager: the one owner of KV memory beside the engine, and its facade: every live
// sequence's cache, admission by bytes, prefix choice, copy and capture, reversible steps and
// the out-of-memory fallback; the prefix store, the session table and the device budget behind
// it (see memory_pressure.h for the order in which memory is given back).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/clock.h"
#include "cache/cache_spec.h"
#include "cache/kv_memory_budget.h"
#include "cache/layer_type.h"
#include "cache/memory_pressure.h"
#include "cache/memory_usage.h"
#include "cache/prefix_catalog.h"
#include "cache/prefix_events.h"
#include "cache/prefix_store.h"
#include "cache/session_table.h"
#include "cache/shared_prefix.h"
#include "cache/snapshot_tiers.h"

namespace kvserve::cache {

class KvCache;
class Snapshot;

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
  // --prefix-kv-mode: how a cached prefix reaches a request's cache when the request does not
  // say (see PrefixKvMode): read in place where the strategy allows it, or copied.
  PrefixKvMode prefix_kv_mode = PrefixKvMode::kShared;
  // --tenant-max-prefix-bytes: the most bytes of prefix snapshots one tenant's namespace
  // holds (PrefixStoreOptions::space_budget_bytes); 0: no limit, >= 0.
  int64_t tenant_prefix_bytes = 0;
  // Sessions (iterative chat); max_positions comes from the model's shape.
  SessionTableOptions sessions;
  // Host and disk tiers of automatic prefixes the store evicts (--prefix-host-bytes,
  // --prefix-disk-bytes, --prefix-disk-dir); both budgets 0: none. The identity is filled in
  // from the model's shape.
  SnapshotTiersOptions tiers;
};

// What a sequence asks for; given once, at Add.
struct SequenceRequest {
  // The whole prompt (a named prefix's tokens included), >= 1 token.
  std::vector<int32_t> prompt;
  // Tokens it may generate, >= 1 (a registration: 1, never sampled).
  int64_t max_new_tokens = 1;
  // Batch rows its cache holds after the prompt (beams or samples of one request, made by
  // ChangeRows from the prompt's one row), >= 1.
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
  // How its cached prefix reaches its cache (CacheOptions.prefix_kv_mode); unset: the
  // manager's option.
  std::optional<PrefixKvMode> prefix_kv_mode;
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
  // The named prefix the request named (qualified), when the tokens it reuses include it,
  // whichever entry served them; empty otherwise.
  std::string prefix_name;
  // The copy ran out of device memory and the cache continues offloaded.
  bool offload_fallback = false;
  // How the reused prefix reached the cache: "shared" (every layer reads it in place), "copy"
  // (every layer copied it: the copy mode, or a strategy that keeps its own copy), "mixed"
  // (layers of both kinds); empty when no prefix was reused.
  std::string prefix_kv_mode;
  // A session turn whose session's cache could not be used for the common prefix of its
  // prompt and history: why (evicted, a layer cannot crop that far back, ...). Empty otherwise.
  std::string session_recompute_reason;
};

// A sequence as the engine needs to know it.
struct SequenceInfo {
  // The whole prompt (a session turn's history prepended).
  std::vector<int32_t> prompt;
  // The strategy its cache follows now: its own, or the offloaded one after a fallback.
  std::string strategy_name;
  // Its cache moved to offloaded form after an out-of-memory error.
  bool offload_fallback = false;
  // Its prompt runs in one step (caches whose contents depend on how updates are split:
  // quantized), else in chunks.
  bool prefill_whole = false;
};

// How a multi-row sequence's cache rows change between steps (ChangeRows): every row repeated
// `repeats` times, adjacent (the prompt's one row becoming each beam's or sample's), or row i
// becoming row parents[i] (beam search's reorder; fewer rows: finished samples leave).
struct RowChange {
  int64_t repeats = 0;           // > 0: repeat
  std::vector<int64_t> parents;  // otherwise: select
};

// A named prefix a deletion removed, kept so that the deletion can be undone (RestorePrefix)
// when it could not be recorded.
struct RemovedPrefix {
  PrefixInfo info;
  std::shared_ptr<const Snapshot> snapshot;
};

struct KvCacheManagerStats {
  int64_t num_sequences = 0;
  MemoryUsage live;           // every live cache
  int64_t prefix_bytes = 0;   // snapshots held by the store
  int64_t budget_used = 0;    // device bytes counted against the limit (live + snapshots)
  int64_t budget_limit = -1;  // < 0: unlimited
  int64_t budget_peak = 0;    // the most budget_used since the start
  int64_t num_offload_fallbacks = 0;
  int64_t injected_faults = 0;  // out-of-memory errors the fault injection raised
  PrefixStoreStats prefixes;
  SnapshotTiersStats tiers;  // all zero without tiers
  // Per strategy name ("dynamic", "offloaded", ...): device and host bytes of live caches.
  std::map<std::string, MemoryUsage> by_strategy;
  SessionStats sessions;
};

class KvCacheManager;

// One step's caches between BeginStep and the step's end: Commit after the forward succeeded,
// Rollback after it failed (every cache back to its length at BeginStep). Engine thread.
class KvStep {
 public:
  void Commit();
  // The ids whose cache could not be rolled back (they must fail).
  std::vector<SequenceId> Rollback();
  const std::vector<SequenceId>& ids() const { return ids_; }

 private:
  friend class KvCacheManager;
  KvStep(KvCacheManager* manager, std::vector<SequenceId> ids)
      : manager_(manager), ids_(std::move(ids)) {}
  KvCacheManager* manager_;
  std::vector<SequenceId> ids_;
};

// Engine-thread owned: every method but catalog() must be called from the one thread that runs
// the model. Sequences go Add → (CanAdmit)* → Allocate → steps → Release; Release may come at
// any point after Add.
class KvCacheManager {
 public:
  // InvalidArgument naming the option for a bad option or shape. `clock` (TTLs, LRU) must
  // outlive the manager.
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(
      const KvCacheManagerOptions& options, KvModelShape shape,
      const base::Clock* clock = base::RealClock::Get());
  ~KvCacheManager();
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  // Starts tracking a sequence; nothing is allocated. InvalidArgument for an empty prompt,
  // AlreadyExists for an id in use; a session turn's refusals are SessionTable::BeginTurn's.
  absl::Status Add(SequenceId id, SequenceRequest request);

  // Whether `id` (added, not allocated) can be admitted now, with `admitted_this_step`
  // (sequences already admitted in this scheduling pass, not allocated yet) counted as if
  // allocated: their memory, and their prompts as prefills in flight. Chooses the prefix it would
  // start from. No observable side effects: the answer may be asked for again; Allocate uses the
  // prefix chosen by the last answer.
  Admission CanAdmit(SequenceId id, absl::Span<const SequenceId> admitted_this_step);

  // Builds the sequence's cache and gives it its chosen prefix: in the shared mode (the
  // request's, else the manager's option) layers that allow it read the snapshot in place
  // (held, so that the store does not evict it, and counted once), the others copy. A copy is
  // a deep copy (a quantized
  // cache keeps the copied prefix at full precision until its first update, so that it
  // quantizes prefix and suffix together as a cold prefill would). Counts the prefix use: a hit
  // on the entry that served it and, when the request named a prefix, a hit on that prefix when
  // the reused tokens include it (a named miss otherwise). When the copy runs out of device
  // memory the cache continues offloaded. Errors: NotFound for an unknown id,
  // ResourceExhausted when the prefix cannot be copied even offloaded (the sequence must then be
  // released).
  absl::StatusOr<Allocation> Allocate(SequenceId id);

  // Frees everything the sequence holds. Unknown ids are ignored. A session turn gives its
  // cache back to its session, with `tokens` (its prompt and every generated token) as the
  // session's history, when `keep_session_cache` (the turn ended between steps: finished,
  // cancelled, expired); otherwise the session keeps its history from before the turn and
  // loses its cache.
  void Release(SequenceId id, absl::Span<const int32_t> tokens = {},
               bool keep_session_cache = false);

  // The sequence's cache (null before Allocate or without a cache).
  KvCache* cache(SequenceId id) const;
  // What the engine needs to know of a sequence; nullopt for an unknown id.
  std::optional<SequenceInfo> info(SequenceId id) const;

  // Starts a step over `ids` (allocated sequences with caches).
  KvStep BeginStep(absl::Span<const SequenceId> ids);
  // After an out-of-memory error in a step over `ids` (rolled back): see
  // MemoryPressure::OnOutOfMemory. A cache it offloads is reported as an offload fallback.
  OutOfMemoryAction OnOutOfMemory(absl::Span<const SequenceId> ids);

  // The sequence's prompt has just been prefilled whole: keeps it as an automatic prefix
  // entry when it qualifies (automatic reuse on, a dynamic cache on a full-attention model,
  // at least auto_prefix_min_tokens tokens). Sequences waiting on it may then be admitted.
  void OnPrefilled(SequenceId id);

  // Changes the rows of a sequence's cache between steps (see RowChange). When repeated rows
  // do not fit the device budget, memory is made as MemoryPressure::MakeRoom does; then the
  // cache moves to its offloaded form and is repeated on the host (reported as an offload
  // fallback), as a step that runs out of memory would. InvalidArgument for repeats < 1 with
  // no parents, an index out of range, or a sequence without a cache.
  absl::Status ChangeRows(SequenceId id, const RowChange& change);

  // A registration's prompt is prefilled: stores its snapshot under its name (the catalog shows
  // it from the next Maintain). Returns the store's answer (see PrefixStore::PutNamed). The
  // sequence must still be released.
  absl::StatusOr<PrefixInfo> CompleteRegistration(SequenceId id);
  // Deletes the named prefix `name` (qualified); with `only_if`, only while the name holds that
  // snapshot. nullopt when there was nothing to delete.
  std::optional<RemovedPrefix> DeletePrefix(const std::string& name,
                                            const Snapshot* only_if = nullptr);
  // Puts back what DeletePrefix removed, when the name is still free (see
  // PrefixStore::RestoreNamed).
  bool RestorePrefix(const RemovedPrefix& removed);
  // The prefix store (thread-safe): its event log, drained once per step by the engine
  // (events().Drain(): what it stored and removed since the previous drain, in order), and
  // its listing of every entry for admins.
  PrefixStore& prefix_store();

  // The open sessions (client calls: open, get, list, close, roll back).
  SessionTable& sessions() { return *sessions_; }
  const SessionTable& sessions() const { return *sessions_; }
  // The named prefixes as last published. Any thread.
  const PublishedCatalog& catalog() const { return catalog_; }

  // Once per step: sessions' TTLs, idle offload and byte budget; the budget's count of
  // snapshot bytes (TTLs run out without any call); the catalog, when it changed (hits and last
  // use included).
  void Maintain();

  // A consistent view for metrics and tests.
  KvCacheManagerStats Stats() const;

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
  friend class KvStep;
  struct Sequence;

  KvCacheManager(const KvCacheManagerOptions& options, KvModelShape shape,
                 std::unique_ptr<SnapshotTiers> tiers, std::unique_ptr<PrefixStore> store,
                 const base::Clock* clock);

  Sequence* Find(SequenceId id) const;
  // The prefix `seq` would start from now (no hit counted).
  PrefixMatch ChoosePrefix(const Sequence& seq) const;
  // Tokens `seq` would share with a prompt a live sequence (allocated, or admitted earlier in
  // this pass) is prefilling and will keep, when that is more than `best` and at least the
  // minimum: then it should wait for it.
  int64_t SharedWithPrefillInFlight(const Sequence& seq, int64_t best,
                                    absl::Span<const SequenceId> admitted_this_step) const;
  // A session turn's Allocate when its session's cache supplies its prompt's start.
  absl::StatusOr<Allocation> ResumeSession(Sequence& seq);
  // Tokens of `seq`'s cache that its own storage must hold: the chosen prefix's are read in
  // place, and counted once with the snapshot, when it will share them.
  int64_t OwnCacheTokens(const Sequence& seq) const;
  // Loads the chosen prefix into `seq`'s empty cache, shared or copied (see Allocate).
  absl::Status LoadPrefix(Sequence& seq, const PrefixMatch& chosen, Allocation* allocation);
  // Counts the use of the chosen prefix (and of the named prefix the request named).
  void RecordPrefixUse(const Sequence& seq, const PrefixMatch& chosen, Allocation* allocation);
  // Marks a sequence's cache as moved to its offloaded form by memory pressure.
  void NoteOffloadFallback(Sequence& seq);
  // Rebuilds the published catalog when the store's named entries changed.
  void PublishCatalog();
  // Puts snapshots the tiers brought back into the store (device memory permitting; otherwise
  // they go back to the tiers).
  void CollectPromoted();
  // Whether `seq` must wait for a demoted prefix covering more of its prompt than its chosen
  // one: starts that promotion (once per sequence; a host entry comes back at once and
  // `seq.chosen` is chosen again).
  bool WaitsForTier(Sequence& seq);

  const KvCacheManagerOptions options_;
  const KvModelShape shape_;
  const base::Clock* const clock_;
  // Whether an automatic match may end inside a stored prefix (no sliding/chunked layers).
  const bool allow_partial_prefix_;
  // Whether prefilled prompts become automatic entries: partial matches allowed, or a state
  // model (Mamba), whose entries are reused at their exact end.
  const bool auto_entries_;
  std::unique_ptr<KvMemoryBudget> budget_;
  // The snapshots live caches read in place (a shared_ptr: their references hold a weak one).
  std::shared_ptr<SharedPrefixTracker> shared_prefixes_;
  // Before the store, whose evictions it takes: it goes after it.
  std::unique_ptr<SnapshotTiers> tiers_;
  std::unique_ptr<PrefixStore> store_;
  std::unique_ptr<SessionTable> sessions_;
  std::unique_ptr<MemoryPressure> pressure_;
  absl::flat_hash_map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  int64_t num_offload_fallbacks_ = 0;
  // The store's and the tiers' named_generation() published.
  std::optional<std::pair<uint64_t, uint64_t>> published_generation_;
  PublishedCatalog catalog_;
};

}  // namespace kvserve::cache
