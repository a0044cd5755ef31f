// The owner of every KV cache and prefix snapshot of an engine (see kv_cache_manager.h).
#include "cache/kv_cache_manager.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cache/cache_factory.h"
#include "cache/dynamic_layer.h"
#include "cache/kv_buffer.h"
#include "cache/kv_cache.h"
#include "cache/mamba_state_layer.h"
#include "cache/snapshot.h"
#include "cache/torch_compat.h"

namespace kvserve::cache {

struct KvCacheManager::Sequence {
  SequenceRequest request;
  PrefixMatch chosen;  // the prefix the last CanAdmit chose; released at Allocate
  std::unique_ptr<KvCache> cache;
  bool allocated = false;
  bool offload_fallback = false;
  bool prefilled = false;  // OnPrefilled or CompleteRegistration ran
  // A session turn: what its session's cache supplies (the last CanAdmit's choice).
  SessionReuse session_reuse;
  // The demoted prefix entry whose promotion it waited for (0: none yet).
  uint64_t tier_wait = 0;
  // At the last CanAdmit no other sequence was live (allocated or admitted in the pass): it
  // waits for its promotion inside CanAdmit rather than step by step.
  bool alone = false;

  bool is_turn() const { return !request.session.empty(); }
  bool uses_cache() const { return request.cache.use_cache() || request.registration; }
  // Batch rows the cache will hold (beams or samples).
  int64_t rows() const { return std::max<int64_t>(1, request.rows); }
  int64_t max_cache_tokens() const {
    const int64_t tokens = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens - 1;
    // A static cache preallocates every slot it was built with, used or not.
    return !request.registration && request.cache.is_static()
               ? std::max(tokens, request.cache.max_cache_len.value_or(0))
               : tokens;
  }
};

namespace {

int64_t CommonPrefixLength(absl::Span<const int32_t> a, absl::Span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

// The strategy a sequence's cache follows now (see SequenceInfo::strategy_name).
std::string StrategyName(const CacheSpec& spec, bool offload_fallback) {
  CacheImplementation implementation = spec.implementation;
  if (offload_fallback) {
    // The cache continued in its offloaded form (quantized stays quantized, on the host).
    if (implementation == CacheImplementation::kDynamic) {
      implementation = CacheImplementation::kOffloaded;
    } else if (implementation == CacheImplementation::kStatic) {
      implementation = CacheImplementation::kOffloadedStatic;
    }
  }
  return std::string(CacheImplementationName(implementation));
}

}  // namespace

void KvStep::Commit() {
  for (SequenceId id : ids_) {
    if (KvCache* c = manager_->cache(id)) c->CommitStep();
  }
}

std::vector<SequenceId> KvStep::Rollback() {
  std::vector<SequenceId> broken;
  for (SequenceId id : ids_) {
    KvCache* c = manager_->cache(id);
    if (c != nullptr && !c->RollbackStep().ok()) broken.push_back(id);
  }
  return broken;
}

absl::StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(
    const KvCacheManagerOptions& options, KvModelShape shape, const base::Clock* clock) {
  if (options.prefix_cache_bytes < 1) {
    return absl::InvalidArgumentError("--prefix-cache-bytes must be >= 1");
  }
  if (options.auto_prefix_min_tokens < 1) {
    return absl::InvalidArgumentError("--auto-prefix-min-tokens must be >= 1");
  }
  if (!(options.budget.fault_inject_oom_rate >= 0 && options.budget.fault_inject_oom_rate <= 1)) {
    return absl::InvalidArgumentError("--fault-inject-oom-rate must be in [0, 1]");
  }
  if (shape.layers.empty() || shape.num_kv_heads < 1 || shape.head_dim < 1 ||
      shape.bytes_per_element < 1) {
    return absl::InvalidArgumentError(
        "the model shape needs layers, num_kv_heads >= 1, head_dim >= 1 and an element size");
  }
  for (size_t i = 0; i < shape.layers.size(); ++i) {
    if (absl::Status s = ValidateLayerSpec(shape.layers[i], static_cast<int>(i)); !s.ok()) return s;
  }
  if (clock == nullptr) return absl::InvalidArgumentError("the cache manager needs a clock");
  if (options.tenant_prefix_bytes < 0) {
    return absl::InvalidArgumentError("--tenant-max-prefix-bytes must be >= 0");
  }
  std::unique_ptr<SnapshotTiers> tiers;
  PrefixStoreOptions store_options{.budget_bytes = options.prefix_cache_bytes,
                                   .model_fingerprint = shape.fingerprint,
                                   .space_budget_bytes = options.tenant_prefix_bytes,
                                   .space_budget_name = "--tenant-max-prefix-bytes"};
  store_options.retention_half_life = options.tiers.half_life;
  if (options.tiers.host_bytes != 0 || options.tiers.disk_bytes != 0) {
    SnapshotTiersOptions tier_options = options.tiers;
    tier_options.identity.model_fingerprint = shape.fingerprint;
    tier_options.identity.strategy =
        absl::StrCat("dynamic/layers=", shape.layers.size(), "/kv_heads=", shape.num_kv_heads,
                     "/head_dim=", shape.head_dim, "/element_bytes=", shape.bytes_per_element);
    absl::StatusOr<std::unique_ptr<SnapshotTiers>> made =
        SnapshotTiers::Create(std::move(tier_options), clock);
    if (!made.ok()) return made.status();
    tiers = *std::move(made);
    store_options.on_evicted = [t = tiers.get()](AutomaticEntry e) {
      t->Demote(std::move(e.space), std::move(e.snapshot), e.hits, e.retention, std::move(e.named));
    };
  }
  absl::StatusOr<std::unique_ptr<PrefixStore>> store =
      PrefixStore::Create(std::move(store_options), clock);
  if (!store.ok()) return store.status();
  std::unique_ptr<KvCacheManager> manager(
      new KvCacheManager(options, std::move(shape), std::move(tiers), *std::move(store), clock));
  SessionTableOptions sessions = options.sessions;
  sessions.max_positions = manager->shape_.max_positions;
  sessions.retention_half_life = options.tiers.half_life;
  KvCacheManager* self = manager.get();
  absl::StatusOr<std::unique_ptr<SessionTable>> table =
      SessionTable::Create(sessions, clock, [self](uint64_t turn) {
        const KvCache* c = self->cache(turn);
        return c != nullptr ? c->Memory() : MemoryUsage{};
      });
  if (!table.ok()) return table.status();
  manager->sessions_ = *std::move(table);
  manager->pressure_ =
      std::make_unique<MemoryPressure>(manager->budget_.get(), manager->store_.get(),
                                       manager->sessions_.get(), manager->shared_prefixes_.get());
  manager->PublishCatalog();
  return manager;
}

KvCacheManager::KvCacheManager(const KvCacheManagerOptions& options, KvModelShape shape,
                               std::unique_ptr<SnapshotTiers> tiers,
                               std::unique_ptr<PrefixStore> store, const base::Clock* clock)
    : options_(options),
      shape_(std::move(shape)),
      clock_(clock),
      allow_partial_prefix_(
          std::none_of(shape_.layers.begin(), shape_.layers.end(),
                       [](const LayerSpec& l) { return l.is_sliding() || l.is_state(); })),
      // A state model's prompt is kept whole: a later prompt that extends it resumes from it.
      auto_entries_(allow_partial_prefix_ ||
                    (!shape_.layers.empty() && shape_.layers.front().is_state())),
      budget_(std::make_unique<KvMemoryBudget>(options.budget)),
      shared_prefixes_(std::make_shared<SharedPrefixTracker>()),
      tiers_(std::move(tiers)),
      store_(std::move(store)) {}

KvCacheManager::~KvCacheManager() {
  // Caches give their bytes back to the budget as they go; they go before it.
  sequences_.clear();
  sessions_.reset();
  // A graceful stop keeps the automatic prefixes on disk for the next start (the tiers'
  // destructor finishes the writes).
  if (tiers_ != nullptr) {
    for (AutomaticEntry& entry : store_->AutomaticEntries()) {
      tiers_->Persist(std::move(entry.space), std::move(entry.snapshot), entry.hits,
                      entry.retention);
    }
  }
}

KvCacheManager::Estimate KvCacheManager::EstimateBytes(int64_t tokens, int64_t rows) const {
  // Dynamic storage grows in whole granules.
  tokens =
      (tokens + KvBuffer::kGranuleTokens - 1) / KvBuffer::kGranuleTokens * KvBuffer::kGranuleTokens;
  const int64_t per_token = 2 * shape_.num_kv_heads * shape_.head_dim * shape_.bytes_per_element;
  Estimate estimate;
  int64_t largest_layer = 0;
  for (const LayerSpec& layer : shape_.layers) {
    // A state layer's size is fixed: a state model's shape gives it as one token's K/V.
    const int64_t held = rows *
                         (layer.is_state()     ? 1
                          : layer.is_sliding() ? std::min(tokens, layer.window)
                                               : tokens) *
                         per_token;
    estimate.total_bytes += held;
    largest_layer = std::max(largest_layer, held);
  }
  estimate.offloaded_resident_bytes = 2 * largest_layer;
  return estimate;
}

KvCacheManager::Sequence* KvCacheManager::Find(SequenceId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

absl::Status KvCacheManager::Add(SequenceId id, SequenceRequest request) {
  if (sequences_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " is already tracked"));
  }
  if (request.max_new_tokens < 1) {
    return absl::InvalidArgumentError("a sequence needs max_new_tokens >= 1");
  }
  if (!request.session.empty()) {
    absl::Status begun =
        sessions_->BeginTurn(request.session, id, request.session_append, request.first_turn_prompt,
                             request.max_new_tokens, &request.prompt, &request.cache);
    if (!begun.ok()) return begun;
    request.first_turn_prompt.clear();
    request.skip_prefix_reuse = false;
  }
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError("a sequence needs at least one prompt token");
  }
  auto seq = std::make_unique<Sequence>();
  seq->request = std::move(request);
  sequences_.emplace(id, std::move(seq));
  return absl::OkStatus();
}

std::optional<SequenceInfo> KvCacheManager::info(SequenceId id) const {
  const Sequence* seq = Find(id);
  if (seq == nullptr) return std::nullopt;
  return SequenceInfo{
      .prompt = seq->request.prompt,
      .strategy_name = StrategyName(seq->request.cache, seq->offload_fallback),
      .offload_fallback = seq->offload_fallback,
      .prefill_whole = seq->request.cache.implementation == CacheImplementation::kQuantized};
}

PrefixMatch KvCacheManager::ChoosePrefix(const Sequence& seq) const {
  const SequenceRequest& r = seq.request;
  if (r.registration || r.skip_prefix_reuse || !r.cache.use_cache()) return {};
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  PrefixMatch best;
  // A request naming a prefix that was in a lower tier when it arrived reads it from the store
  // once promoted (when the name still holds the tokens the prompt starts with).
  std::shared_ptr<const Snapshot> named = r.named_prefix;
  if (named == nullptr && !r.named_prefix_name.empty()) {
    named = store_->PeekNamed(r.named_prefix_name);
    if (named != nullptr &&
        (named->num_tokens() > prompt ||
         !std::equal(named->token_ids().begin(), named->token_ids().end(), r.prompt.begin()))) {
      named = nullptr;
    }
  }
  if (named != nullptr) {
    // The last prompt token is always computed: its logits choose the first new token.
    best = {.snapshot = named,
            .num_tokens = std::min(named->num_tokens(), prompt - 1),
            .named = true,
            .name = r.named_prefix_name};
    // A state snapshot serves only a prompt that goes on past its end.
    if (named->holds_states() && best.num_tokens < named->num_tokens()) {
      best = {};
    }
  }
  if (options_.auto_prefix_cache) {
    PrefixMatch match = store_->Peek(r.prefix_space, r.prompt, options_.auto_prefix_min_tokens,
                                     allow_partial_prefix_);
    if (!match.empty() && match.num_tokens > best.num_tokens) best = std::move(match);
  }
  if (best.num_tokens < 1) return {};
  return best;
}

int64_t KvCacheManager::SharedWithPrefillInFlight(
    const Sequence& seq, int64_t best, absl::Span<const SequenceId> admitted_this_step) const {
  const SequenceRequest& r = seq.request;
  // A session turn starts from its session's cache (or computes, which keeps nothing shared).
  if (!options_.auto_prefix_cache || r.registration || r.skip_prefix_reuse ||
      !r.cache.use_cache() || seq.is_turn()) {
    return 0;
  }
  const int64_t usable_max = static_cast<int64_t>(r.prompt.size()) - 1;
  for (const auto& [other_id, other] : sequences_) {
    // Sequences admitted earlier in this pass will prefill in this step: as if allocated.
    const bool in_flight =
        other->allocated || std::find(admitted_this_step.begin(), admitted_this_step.end(),
                                      other_id) != admitted_this_step.end();
    if (!in_flight || other->prefilled || other.get() == &seq) continue;
    const SequenceRequest& o = other->request;
    const int64_t other_prompt = static_cast<int64_t>(o.prompt.size());
    // Only a prefill that will be kept serves anyone: a registration, or a prompt that
    // OnPrefilled keeps as an automatic entry.
    const bool kept =
        o.registration || (auto_entries_ && !o.skip_prefix_reuse && !other->is_turn() &&
                           o.cache.implementation == CacheImplementation::kDynamic &&
                           other_prompt >= options_.auto_prefix_min_tokens);
    if (!kept) continue;
    // Another tenant's prompt is never shared (nor waited for).
    const std::string_view kept_in = o.registration
                                         ? SplitQualifiedPrefixName(o.registration_name).first
                                         : std::string_view(o.prefix_space);
    if (kept_in != r.prefix_space && kept_in != kSharedSpace) continue;
    int64_t shared = std::min(CommonPrefixLength(r.prompt, o.prompt), usable_max);
    // Without partial matches a match ends where a stored prefix ends.
    if (!allow_partial_prefix_ && shared < other_prompt) shared = 0;
    if (shared >= options_.auto_prefix_min_tokens && shared > best) return shared;
  }
  return 0;
}

Admission KvCacheManager::CanAdmit(SequenceId id, absl::Span<const SequenceId> admitted_this_step) {
  Sequence* seq = Find(id);
  if (seq == nullptr) {
    Admission unknown;
    unknown.decision = Admission::Decision::kNever;
    unknown.reason = absl::StrCat("sequence ", id, " is not tracked");
    return unknown;
  }
  CollectPromoted();
  seq->chosen = ChoosePrefix(*seq);
  // The lookup drops what expired: the budget forgets it at once.
  pressure_->SyncSnapshotBytes();
  seq->alone = tiers_ != nullptr && admitted_this_step.empty() &&
               std::none_of(sequences_.begin(), sequences_.end(),
                            [](const auto& other) { return other.second->allocated; });
  if (WaitsForTier(*seq)) {
    Admission waiting;
    waiting.decision = Admission::Decision::kWait;
    waiting.num_cached_tokens = seq->chosen.num_tokens;
    waiting.reason = "waits for its prefix to come back from the host or disk tier";
    return waiting;
  }
  int64_t own_session_bytes = 0;  // already counted in the budget
  if (seq->is_turn()) {
    seq->session_reuse = sessions_->ChooseReuse(seq->request.session, seq->request.prompt);
    SessionReuse& reuse = seq->session_reuse;
    if (reuse.num_tokens > 0 && reuse.num_tokens >= seq->chosen.num_tokens) {
      seq->chosen = {};
    } else if (reuse.num_tokens > 0) {
      reuse.num_tokens = 0;
      reuse.reason = "a cached prefix covers more of the prompt than the session's cache";
    }
    own_session_bytes = reuse.device_bytes;
  }
  Admission admission;
  admission.num_cached_tokens = std::max(seq->chosen.num_tokens, seq->session_reuse.num_tokens);
  if (!seq->uses_cache()) return admission;
  if (const int64_t shared =
          SharedWithPrefillInFlight(*seq, seq->chosen.num_tokens, admitted_this_step);
      shared > 0) {
    admission.decision = Admission::Decision::kWait;
    admission.reason =
        absl::StrCat("waits for ", shared, " shared prompt tokens another sequence is computing");
    return admission;
  }
  const int64_t limit = budget_->limit();
  if (limit < 0) return admission;
  const Estimate estimate = EstimateBytes(OwnCacheTokens(*seq), seq->rows());
  if (estimate.offloaded_resident_bytes > limit) {
    admission.decision = Admission::Decision::kNever;
    admission.reason = absl::StrCat(
        "the request's KV cache needs ", estimate.offloaded_resident_bytes,
        " device bytes even offloaded (", estimate.total_bytes,
        " on the device), above the KV device budget of ", limit, " bytes (--kv-device-bytes)");
    return admission;
  }
  // Sequences admitted earlier in this pass have no cache yet: count what they will need.
  int64_t planned = 0;
  for (SequenceId other : admitted_this_step) {
    const Sequence* s = Find(other);
    if (s != nullptr && s->uses_cache() && !s->allocated) {
      planned += EstimateBytes(OwnCacheTokens(*s), s->rows()).total_bytes;
    }
  }
  // What memory pressure can free (Allocate frees it) counts as available.
  const int64_t available =
      limit - budget_->used() - planned + pressure_->FreeableBytes() + own_session_bytes;
  if (available >= estimate.offloaded_resident_bytes) return admission;
  admission.decision = Admission::Decision::kWait;
  admission.reason =
      absl::StrCat("needs ", estimate.offloaded_resident_bytes, " device bytes at least; ",
                   std::max<int64_t>(available, 0), " are free beside the live caches");
  return admission;
}

void KvCacheManager::NoteOffloadFallback(Sequence& seq) {
  seq.offload_fallback = true;
  ++num_offload_fallbacks_;
}

absl::StatusOr<Allocation> KvCacheManager::ResumeSession(Sequence& seq) {
  // The turn continues the session's cache, cropped to the common prefix.
  Allocation allocation;
  seq.cache = sessions_->TakeCache(seq.request.session);
  KVSERVE_CHECK(seq.cache != nullptr) << "a session reuse was chosen without a cache";
  if (seq.cache->converted_to_offloaded()) {
    // Moved to the host while idle: back to the device when it fits, else the turn runs
    // offloaded (as after an out-of-memory fallback).
    if (pressure_->MakeRoom(seq.cache->Memory().host_bytes)) {
      seq.cache->ConvertToResident();
    } else {
      NoteOffloadFallback(seq);
      allocation.offload_fallback = true;
    }
  }
  const int64_t held = seq.cache->SeqLength();
  const int64_t reused = seq.session_reuse.num_tokens;
  if (held > reused) {
    if (absl::Status cropped = seq.cache->Crop(-(held - reused)); !cropped.ok()) {
      // CanAdmit checked the crop and the scheduler starts the prefill after the reused
      // tokens: a crop that fails now is a broken invariant, and the turn fails (its session
      // keeps its history, not this cache).
      return absl::InternalError(
          absl::StrCat("the session's cache could not be cropped: ", cropped.message()));
    }
  }
  allocation.cache = seq.cache.get();
  allocation.num_cached_tokens = reused;
  return allocation;
}

void KvCacheManager::RecordPrefixUse(const Sequence& seq, const PrefixMatch& chosen,
                                     Allocation* allocation) {
  const SequenceRequest& r = seq.request;
  if (r.registration || r.skip_prefix_reuse || (!options_.auto_prefix_cache && chosen.empty())) {
    return;
  }
  store_->RecordUse(chosen);
  if (r.named_prefix == nullptr) {
    // A registered prefix may serve a prompt that starts with it without naming it.
    if (chosen.named) allocation->prefix_name = chosen.name;
    return;
  }
  // A request that names a prefix uses it whenever what it reuses covers it, whichever entry
  // (the named one, or an automatic one extending it) served the match.
  const int64_t named_tokens =
      std::min(r.named_prefix->num_tokens(), static_cast<int64_t>(r.prompt.size()) - 1);
  const bool covered = !chosen.empty() && chosen.num_tokens >= named_tokens;
  if (!covered) {
    store_->RecordNamedMiss();
    return;
  }
  allocation->prefix_name = r.named_prefix_name;
  if (!chosen.named || chosen.name != r.named_prefix_name) {
    store_->RecordUse(PrefixMatch{.snapshot = r.named_prefix,
                                  .num_tokens = named_tokens,
                                  .named = true,
                                  .name = r.named_prefix_name});
  }
}

absl::StatusOr<Allocation> KvCacheManager::Allocate(SequenceId id) {
  Sequence* seq = Find(id);
  if (seq == nullptr) return absl::NotFoundError(absl::StrCat("sequence ", id, " is not tracked"));
  if (seq->allocated) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " is allocated already"));
  }
  seq->allocated = true;
  if (!seq->uses_cache()) return Allocation{};
  const SequenceRequest& r = seq->request;
  if (seq->is_turn()) {
    if (seq->session_reuse.num_tokens > 0) return ResumeSession(*seq);
    // The prompt is computed (from a prefix, if one matches): the old cache goes.
    sessions_->DropCache(r.session);
  }
  if (r.registration) {
    // Every token of every layer, so that the snapshot loads into a cache of any strategy
    // (sliding layers' masks come from the model's layer specs, not from the cache).
    std::vector<std::unique_ptr<CacheLayer>> layers;
    for (const LayerSpec& layer : shape_.layers) {
      if (layer.is_state()) {
        layers.push_back(std::make_unique<MambaStateLayer>());
      } else {
        layers.push_back(std::make_unique<DynamicLayer>());
      }
    }
    seq->cache = std::make_unique<KvCache>(std::move(layers));
  } else {
    absl::StatusOr<std::unique_ptr<KvCache>> cache = MakeCache(r.cache, shape_.layers);
    if (!cache.ok()) {
      return absl::Status(cache.status().code(), absl::StrCat("cache: ", cache.status().message()));
    }
    seq->cache = *std::move(cache);
    // A session's cache keeps sliding layers' past so that later turns can crop back.
    if (seq->is_turn()) seq->cache->RetainPast();
  }
  seq->cache->AttachBudget(budget_.get());
  pressure_->MakeRoom(EstimateBytes(OwnCacheTokens(*seq), seq->rows()).offloaded_resident_bytes);
  PrefixMatch chosen = std::move(seq->chosen);
  seq->chosen = {};
  Allocation allocation;
  allocation.cache = seq->cache.get();
  if (seq->is_turn()) allocation.session_recompute_reason = seq->session_reuse.reason;
  RecordPrefixUse(*seq, chosen, &allocation);
  seq->request.named_prefix = nullptr;  // the choice holds what is copied
  if (chosen.empty()) return allocation;
  if (absl::Status loaded = LoadPrefix(*seq, chosen, &allocation); !loaded.ok()) return loaded;
  return allocation;
}

int64_t KvCacheManager::OwnCacheTokens(const Sequence& seq) const {
  const SequenceRequest& r = seq.request;
  const bool shares = r.prefix_kv_mode.value_or(options_.prefix_kv_mode) == PrefixKvMode::kShared &&
                      r.cache.implementation == CacheImplementation::kDynamic &&
                      allow_partial_prefix_;
  return seq.max_cache_tokens() - (shares ? seq.chosen.num_tokens : 0);
}

absl::Status KvCacheManager::LoadPrefix(Sequence& seq, const PrefixMatch& chosen,
                                        Allocation* allocation) {
  const bool share =
      seq.request.prefix_kv_mode.value_or(options_.prefix_kv_mode) == PrefixKvMode::kShared;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      int shared_layers = 0;
      absl::Status loaded = chosen.snapshot->LoadInto(seq.cache.get(), chosen.num_tokens,
                                                      share ? &shared_layers : nullptr);
      if (!loaded.ok()) {
        return absl::InternalError(absl::StrCat("loading the cached prefix: ", loaded.message()));
      }
      if (shared_layers > 0) {
        seq.cache->HoldSharedOwner(shared_prefixes_->Acquire(chosen.snapshot));
      }
      allocation->prefix_kv_mode = shared_layers == 0                         ? "copy"
                                   : shared_layers == seq.cache->num_layers() ? "shared"
                                                                              : "mixed";
      allocation->num_cached_tokens = chosen.num_tokens;
      return absl::OkStatus();
    } catch (const compat::OutOfMemoryError&) {
      seq.cache->Reset();
      compat::EmptyDeviceCache();
      if (attempt == 0) {
        seq.cache->ConvertToOffloaded();
        NoteOffloadFallback(seq);
        allocation->offload_fallback = true;
      }
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("the cached prefix (", chosen.num_tokens,
                   " tokens) does not fit in the KV device budget even offloaded; budget ",
                   budget_->limit(), " bytes (--kv-device-bytes)"));
}

KvCache* KvCacheManager::cache(SequenceId id) const {
  const Sequence* seq = Find(id);
  return seq == nullptr ? nullptr : seq->cache.get();
}

KvStep KvCacheManager::BeginStep(absl::Span<const SequenceId> ids) {
  for (SequenceId id : ids) {
    if (KvCache* c = cache(id)) c->BeginStep();
  }
  return KvStep(this, std::vector<SequenceId>(ids.begin(), ids.end()));
}

OutOfMemoryAction KvCacheManager::OnOutOfMemory(absl::Span<const SequenceId> ids) {
  // The step's sequences first, in the step's order (the victim's tie-break), then the others.
  std::vector<LiveCache> live;
  live.reserve(sequences_.size());
  auto add = [&](SequenceId id, const Sequence& seq, bool in_step) {
    const int64_t bytes =
        seq.cache == nullptr
            ? 0
            : std::max(seq.cache->Memory().device_bytes,
                       EstimateBytes(seq.max_cache_tokens(), seq.rows()).total_bytes);
    live.push_back({.id = id, .cache = seq.cache.get(), .device_bytes = bytes, .in_step = in_step});
  };
  for (SequenceId id : ids) {
    if (const Sequence* seq = Find(id)) add(id, *seq, /*in_step=*/true);
  }
  for (const auto& [id, seq] : sequences_) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) add(id, *seq, /*in_step=*/false);
  }
  OutOfMemoryAction action = pressure_->OnOutOfMemory(live);
  if (action.offloaded) {
    if (Sequence* seq = Find(*action.offloaded)) NoteOffloadFallback(*seq);
  }
  return action;
}

void KvCacheManager::OnPrefilled(SequenceId id) {
  Sequence* seq = Find(id);
  if (seq == nullptr || seq->prefilled) return;
  seq->prefilled = true;
  const SequenceRequest& r = seq->request;
  // A session turn's prompt stays in its session's cache instead.
  if (!options_.auto_prefix_cache || r.registration || r.skip_prefix_reuse || seq->is_turn() ||
      seq->cache == nullptr || !auto_entries_ ||
      r.cache.implementation != CacheImplementation::kDynamic || seq->offload_fallback ||
      static_cast<int64_t>(r.prompt.size()) < options_.auto_prefix_min_tokens) {
    return;
  }
  // A prompt that starts on a shared segment is not kept again: its entry would be one more
  // copy of the segment, which later prompts read in place anyway.
  if (seq->cache->SharedPrefixLength() > 0) return;
  // The copy is device memory too: it is kept only when it fits beside the live caches. It
  // holds exactly the prompt's tokens in every layer (no spare capacity).
  if (budget_->limit() >= 0) {
    const int64_t bytes = allow_partial_prefix_
                              ? static_cast<int64_t>(r.prompt.size()) * 2 * shape_.num_kv_heads *
                                    shape_.head_dim * shape_.bytes_per_element *
                                    static_cast<int64_t>(shape_.layers.size())
                              : seq->cache->Memory().device_bytes;
    if (budget_->available() < bytes) return;
  }
  absl::StatusOr<std::shared_ptr<const Snapshot>> snapshot =
      Snapshot::Capture(*seq->cache, r.prompt, shape_.fingerprint);
  if (snapshot.ok()) store_->PutAutomatic(r.prefix_space, *std::move(snapshot));
  pressure_->SyncSnapshotBytes();
}

absl::Status KvCacheManager::ChangeRows(SequenceId id, const RowChange& change) {
  Sequence* seq = Find(id);
  if (seq == nullptr || seq->cache == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", id, " has no cache rows"));
  }
  KvCache& cache = *seq->cache;
  if (change.parents.empty()) {
    if (change.repeats < 1) {
      return absl::InvalidArgumentError(absl::StrCat("repeats must be >= 1, got ", change.repeats));
    }
    if (budget_->limit() >= 0 && !cache.fully_offloaded()) {
      const int64_t growth = cache.Memory().device_bytes * (change.repeats - 1);
      if (!pressure_->MakeRoom(growth)) {
        // As a step that runs out of memory: the request continues on the host.
        cache.ConvertToOffloaded();
        NoteOffloadFallback(*seq);
      }
    }
    return cache.RepeatInterleave(change.repeats);
  }
  const std::vector<int64_t>& parents = change.parents;
  bool identity = static_cast<int64_t>(parents.size()) == cache.BatchSize();
  for (size_t i = 0; identity && i < parents.size(); ++i) {
    identity = parents[i] == static_cast<int64_t>(i);
  }
  if (identity) return absl::OkStatus();  // every row stays where it is
  std::vector<int64_t> indices = parents;
  const at::Tensor index =
      at::from_blob(indices.data(), {static_cast<int64_t>(indices.size())}, at::kLong).clone();
  // The same rows in another order (beams) keep the batch size; fewer rows (finished samples)
  // select.
  const bool same_size = static_cast<int64_t>(indices.size()) == cache.BatchSize();
  KVSERVE_DCHECK(cache.BatchSize() > 0) << "sequence " << id << " has no rows to select";
  return same_size ? cache.Reorder(index) : cache.SelectIndices(index);
}

absl::StatusOr<PrefixInfo> KvCacheManager::CompleteRegistration(SequenceId id) {
  Sequence* seq = Find(id);
  if (seq == nullptr || !seq->request.registration || seq->cache == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " is not an allocated registration"));
  }
  seq->prefilled = true;
  absl::StatusOr<std::shared_ptr<const Snapshot>> snapshot =
      Snapshot::Capture(*seq->cache, seq->request.prompt, shape_.fingerprint);
  if (!snapshot.ok()) return snapshot.status();
  // The capture cache's copy is the snapshot's now.
  seq->cache.reset();
  // A lower tier's entry of the same name holds the old content.
  if (tiers_ != nullptr) tiers_->ForgetNamed(seq->request.registration_name);
  absl::StatusOr<PrefixInfo> info = store_->PutNamed(
      seq->request.registration_name, *std::move(snapshot), seq->request.registration_options);
  pressure_->SyncSnapshotBytes();
  return info;
}

std::optional<RemovedPrefix> KvCacheManager::DeletePrefix(const std::string& name,
                                                          const Snapshot* only_if) {
  std::shared_ptr<const Snapshot> snapshot = store_->PeekNamed(name);
  std::optional<PrefixInfo> info = store_->Info(name);
  if (snapshot == nullptr && only_if == nullptr && tiers_ != nullptr) {
    // Held by a lower tier only: removed there (a failed journal write cannot bring it back).
    std::optional<PrefixInfo> demoted = tiers_->ForgetNamed(name);
    if (demoted) return RemovedPrefix{.info = *std::move(demoted), .snapshot = nullptr};
  }
  if (snapshot == nullptr || !info || (only_if != nullptr && snapshot.get() != only_if)) {
    return std::nullopt;
  }
  if (tiers_ != nullptr && only_if == nullptr) tiers_->ForgetNamed(name);
  if (!store_->DeleteNamed(name)) return std::nullopt;
  pressure_->SyncSnapshotBytes();
  return RemovedPrefix{.info = *std::move(info), .snapshot = std::move(snapshot)};
}

bool KvCacheManager::RestorePrefix(const RemovedPrefix& removed) {
  const bool restored = store_->RestoreNamed(removed.info, removed.snapshot);
  pressure_->SyncSnapshotBytes();
  return restored;
}

PrefixStore& KvCacheManager::prefix_store() { return *store_; }

void KvCacheManager::Release(SequenceId id, absl::Span<const int32_t> tokens,
                             bool keep_session_cache) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  Sequence& seq = *it->second;
  if (seq.is_turn()) {
    sessions_->EndTurn(seq.request.session, std::move(seq.cache), tokens, keep_session_cache,
                       seq.allocated);
  }
  sequences_.erase(it);
}

void KvCacheManager::PublishCatalog() {
  const std::pair<uint64_t, uint64_t> generation{
      store_->named_generation(), tiers_ != nullptr ? tiers_->named_generation() : 0};
  if (published_generation_ == generation) return;
  published_generation_ = generation;
  catalog_.Set(BuildCatalog(*store_, tiers_.get()));
}

void KvCacheManager::CollectPromoted() {
  if (tiers_ == nullptr) return;
  // Device memory like any snapshot: unused ones are demoted to make room for it.
  tiers_->StorePromoted(*store_, *pressure_);
  pressure_->SyncSnapshotBytes();
}

bool KvCacheManager::WaitsForTier(Sequence& seq) {
  const SequenceRequest& r = seq.request;
  // A request naming a prefix a lower tier holds waits for it even without automatic reuse.
  const bool demoted_name = r.named_prefix == nullptr && !r.named_prefix_name.empty();
  if (tiers_ == nullptr || (!options_.auto_prefix_cache && !demoted_name) || r.registration ||
      r.skip_prefix_reuse || !r.cache.use_cache() || seq.is_turn()) {
    return false;
  }
  if (seq.tier_wait == 0) {
    std::optional<TierMatch> match =
        tiers_->Find(r.prefix_space, r.prompt, demoted_name ? 1 : options_.auto_prefix_min_tokens,
                     seq.chosen.num_tokens, allow_partial_prefix_);
    if (!match) return false;
    seq.tier_wait = match->id;
    tiers_->Promote(match->id);
    CollectPromoted();
    seq.chosen = ChoosePrefix(seq);
  }
  if (seq.alone && tiers_->Pending(seq.tier_wait)) {
    // Nothing else runs: waiting here delays nobody (and a scheduler with nothing running
    // refuses a request that waits). The read runs on the tiers' thread.
    while (tiers_->Pending(seq.tier_wait)) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      CollectPromoted();
    }
    seq.chosen = ChoosePrefix(seq);
  }
  return tiers_->Pending(seq.tier_wait);
}

void KvCacheManager::Maintain() {
  CollectPromoted();
  sessions_->Maintain();
  // TTLs run out without any call: the budget forgets what expired.
  pressure_->SyncSnapshotBytes();
  PublishCatalog();
}

KvCacheManagerStats KvCacheManager::Stats() const {
  KvCacheManagerStats stats;
  stats.num_sequences = static_cast<int64_t>(sequences_.size());
  for (const auto& [id, seq] : sequences_) {
    if (seq->cache == nullptr) continue;
    const MemoryUsage usage = seq->cache->Memory();
    stats.live += usage;
    stats.by_strategy[StrategyName(seq->request.cache, seq->offload_fallback)] += usage;
  }
  stats.prefixes = store_->stats();
  if (tiers_ != nullptr) stats.tiers = tiers_->stats();
  stats.prefix_bytes = stats.prefixes.bytes_used;
  stats.budget_used = budget_->used();
  stats.budget_limit = budget_->limit();
  stats.budget_peak = budget_->peak_used();
  stats.num_offload_fallbacks = num_offload_fallbacks_;
  stats.injected_faults = budget_->injected_faults();
  stats.sessions = sessions_->Stats();
  return stats;
}

}  // namespace kvserve::cache
