// The owner of every KV cache and prefix snapshot of an engine (see kv_cache_manager.h).
#include "cache/kv_cache_manager.h"

#include <algorithm>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/cache_factory.h"
#include "cache/dynamic_layer.h"
#include "cache/kv_buffer.h"
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
  // A session turn: its session (owned by sessions_; kept until this turn is released), the
  // tokens its cache supplies (the last CanAdmit's choice), why it supplies none, and the
  // session's history before the turn (restored when the turn fails).
  Session* session = nullptr;
  int64_t session_reuse = 0;
  std::string session_reason;
  std::vector<int32_t> history_before;

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

struct KvCacheManager::Session {
  std::string id;
  std::shared_ptr<const SessionOptions> options;
  uint64_t serial = 0;  // creation order
  // Prompts and answers so far (the prefix's tokens first).
  std::vector<int32_t> history;
  // K/V of the first cache->SeqLength() tokens of the history (more after a rollback that
  // could not crop it); null: none (no turn yet, evicted, or a turn failed).
  std::unique_ptr<KvCache> cache;
  bool offloaded = false;          // moved to the host while idle
  std::optional<SequenceId> turn;  // the running turn
  bool closed = false;             // CloseSession while a turn ran: erased at its release
  int64_t turns = 0;
  int64_t evictions = 0;
  absl::Time created_at;
  absl::Time last_used;
};

namespace {

int64_t CommonPrefixLength(absl::Span<const int32_t> a, absl::Span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

}  // namespace

const CatalogEntry* FindVisiblePrefix(const PrefixCatalog& catalog, std::string_view tenant,
                                      std::string_view name, std::string* qualified) {
  for (std::string_view space : {tenant, kSharedSpace}) {
    std::string key = QualifiedPrefixName(space, name);
    auto it = catalog.find(key);
    if (it == catalog.end()) continue;
    if (qualified != nullptr) *qualified = std::move(key);
    return &it->second;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(
    const KvCacheManagerOptions& options, KvModelShape shape, const Clock* clock) {
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
  if (options.session_cache_bytes < 1) {
    return absl::InvalidArgumentError("--session-cache-bytes must be >= 1");
  }
  if (options.session_idle_offload < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session-idle-offload-seconds must be >= 0");
  }
  if (options.session_default_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session-ttl-seconds must be > 0");
  }
  if (options.max_sessions < 1) return absl::InvalidArgumentError("--max-sessions must be >= 1");
  if (options.tenant_prefix_bytes < 0) {
    return absl::InvalidArgumentError("--tenant-max-prefix-bytes must be >= 0");
  }
  // The store's callback reaches the manager once it exists; the store is made first.
  auto manager_slot = std::make_shared<KvCacheManager*>(nullptr);
  absl::StatusOr<std::unique_ptr<PrefixStore>> store =
      PrefixStore::Create({.budget_bytes = options.prefix_cache_bytes,
                           .model_fingerprint = shape.fingerprint,
                           .on_named_dropped =
                               [manager_slot](const std::string& name) {
                                 if (*manager_slot != nullptr)
                                   (*manager_slot)->OnNamedDropped(name);
                               },
                           .space_budget_bytes = options.tenant_prefix_bytes,
                           .space_budget_name = "--tenant-max-prefix-bytes"},
                          clock);
  if (!store.ok()) return store.status();
  std::unique_ptr<KvCacheManager> manager(
      new KvCacheManager(options, std::move(shape), *std::move(store), clock));
  *manager_slot = manager.get();
  return manager;
}

KvCacheManager::KvCacheManager(const KvCacheManagerOptions& options, KvModelShape shape,
                               std::unique_ptr<PrefixStore> store, const Clock* clock)
    : options_(options),
      shape_(std::move(shape)),
      clock_(clock),
      allow_partial_prefix_(std::none_of(shape_.layers.begin(), shape_.layers.end(),
                                         [](const LayerSpec& l) { return l.is_sliding(); })),
      budget_(std::make_unique<KvMemoryBudget>(options.budget)),
      store_(std::move(store)),
      session_id_state_((static_cast<uint64_t>(std::random_device()()) << 32) ^
                        std::random_device()()),
      catalog_(std::make_shared<const PrefixCatalog>()) {}

KvCacheManager::~KvCacheManager() {
  // Caches give their bytes back to the budget as they go; they go before it.
  sequences_.clear();
  sessions_.clear();
}

KvCacheManager::Estimate KvCacheManager::EstimateBytes(int64_t tokens, int64_t rows) const {
  // Dynamic storage grows in whole granules.
  tokens =
      (tokens + KvBuffer::kGranuleTokens - 1) / KvBuffer::kGranuleTokens * KvBuffer::kGranuleTokens;
  const int64_t per_token = 2 * shape_.num_kv_heads * shape_.head_dim * shape_.bytes_per_element;
  Estimate estimate;
  int64_t largest_layer = 0;
  for (const LayerSpec& layer : shape_.layers) {
    const int64_t held =
        rows * (layer.is_sliding() ? std::min(tokens, layer.window) : tokens) * per_token;
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
  Session* session = nullptr;
  if (!request.session.empty()) {
    session = FindSession(request.session);
    if (session == nullptr) {
      return absl::NotFoundError(absl::StrCat("session: no open session '", request.session,
                                              "' (closed, expired or never created)"));
    }
    if (session->turn) {
      return absl::FailedPreconditionError(
          absl::StrCat("session: session '", request.session,
                       "' has a turn running; send the next turn once it has finished"));
    }
    const int64_t history = static_cast<int64_t>(session->history.size());
    if (request.session_append) {
      const std::vector<int32_t>& added =
          session->history.empty() ? request.first_turn_prompt : request.prompt;
      std::vector<int32_t> prompt = session->history;
      prompt.insert(prompt.end(), added.begin(), added.end());
      request.prompt = std::move(prompt);
      request.first_turn_prompt.clear();
    }
    const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
    if (shape_.max_positions > 0 && total > shape_.max_positions) {
      return absl::InvalidArgumentError(
          absl::StrCat("input: the session's conversation (", history, " tokens before this turn, ",
                       request.prompt.size(), " with it) and max_new_tokens ",
                       request.max_new_tokens, " exceed the model's context of ",
                       shape_.max_positions, " tokens; roll the session back or start a new one"));
    }
    const CacheSpec& spec = session->options->cache;
    if (spec.is_static() && spec.max_cache_len && total - 1 > *spec.max_cache_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input: the session's conversation with this turn (", request.prompt.size(),
          " tokens) and max_new_tokens ", request.max_new_tokens,
          " exceed its static cache's max_cache_len of ", *spec.max_cache_len, " tokens"));
    }
    request.cache = spec;
    request.skip_prefix_reuse = false;
  }
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError("a sequence needs at least one prompt token");
  }
  if (request.max_new_tokens < 1) {
    return absl::InvalidArgumentError("a sequence needs max_new_tokens >= 1");
  }
  if (sequences_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " is already tracked"));
  }
  auto seq = std::make_unique<Sequence>();
  seq->request = std::move(request);
  if (session != nullptr) {
    session->turn = id;
    seq->session = session;
    seq->history_before = session->history;
  }
  sequences_.emplace(id, std::move(seq));
  return absl::OkStatus();
}

const std::vector<int32_t>& KvCacheManager::prompt(SequenceId id) const {
  static const std::vector<int32_t>* const kEmpty = new std::vector<int32_t>();
  const Sequence* seq = Find(id);
  return seq == nullptr ? *kEmpty : seq->request.prompt;
}

PrefixMatch KvCacheManager::ChoosePrefix(const Sequence& seq) const {
  const SequenceRequest& r = seq.request;
  if (r.registration || r.skip_prefix_reuse || !r.cache.use_cache()) return {};
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  PrefixMatch best;
  if (r.named_prefix != nullptr) {
    // The last prompt token is always computed: its logits choose the first new token.
    best = {.snapshot = r.named_prefix,
            .num_tokens = std::min(r.named_prefix->num_tokens(), prompt - 1),
            .named = true,
            .name = r.named_prefix_name};
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
      !r.cache.use_cache() || seq.session != nullptr) {
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
    const bool kept = o.registration ||
                      (allow_partial_prefix_ && !o.skip_prefix_reuse && other->session == nullptr &&
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
  seq->chosen = ChoosePrefix(*seq);
  int64_t own_session_bytes = 0;  // already counted in the budget
  if (seq->session != nullptr) {
    ChooseSessionReuse(*seq);
    if (seq->session_reuse > 0 && seq->session_reuse >= seq->chosen.num_tokens) {
      seq->chosen = {};
    } else if (seq->session_reuse > 0) {
      seq->session_reuse = 0;
      seq->session_reason = "a cached prefix covers more of the prompt than the session's cache";
    }
    if (seq->session->cache != nullptr) {
      own_session_bytes = seq->session->cache->Memory().device_bytes;
    }
  }
  Admission admission;
  admission.num_cached_tokens = std::max(seq->chosen.num_tokens, seq->session_reuse);
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
  const Estimate estimate = EstimateBytes(seq->max_cache_tokens(), seq->rows());
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
      planned += EstimateBytes(s->max_cache_tokens(), s->rows()).total_bytes;
    }
  }
  // Snapshots nobody uses can be dropped, and idle sessions' caches moved to the host, to make
  // room (Allocate does it).
  const int64_t available = limit - budget_->used() - planned + store_->ReclaimableBytes() +
                            IdleSessionDeviceBytes() + own_session_bytes;
  if (available >= estimate.offloaded_resident_bytes) return admission;
  admission.decision = Admission::Decision::kWait;
  admission.reason =
      absl::StrCat("needs ", estimate.offloaded_resident_bytes, " device bytes at least; ",
                   std::max<int64_t>(available, 0), " are free beside the live caches");
  return admission;
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
  Session* session = seq->session;
  if (session != nullptr && seq->session_reuse > 0 && session->cache != nullptr) {
    // The turn continues the session's cache, cropped to the common prefix.
    ++session_counts_.hits;
    Allocation allocation;
    seq->cache = std::move(session->cache);
    session->offloaded = false;
    if (seq->cache->converted_to_offloaded()) {
      // Moved to the host while idle: back to the device when it fits, else the turn runs
      // offloaded (as after an out-of-memory fallback).
      const int64_t bytes = seq->cache->Memory().host_bytes;
      if (budget_->limit() >= 0 && budget_->available() < bytes) {
        ReclaimSnapshots(bytes - budget_->available());
        if (budget_->available() < bytes) OffloadIdleSessions(bytes - budget_->available());
      }
      if (budget_->limit() < 0 || budget_->available() >= bytes) {
        seq->cache->ConvertToResident();
      } else {
        seq->offload_fallback = true;
        allocation.offload_fallback = true;
        ++num_offload_fallbacks_;
      }
    }
    const int64_t held = seq->cache->SeqLength();
    if (held > seq->session_reuse) {
      if (absl::Status cropped = seq->cache->Crop(-(held - seq->session_reuse)); !cropped.ok()) {
        // CanAdmit checked the crop and the scheduler starts the prefill after the reused
        // tokens: a crop that fails now is a broken invariant, and the turn fails (its
        // session keeps its history, not this cache).
        return absl::InternalError(
            absl::StrCat("the session's cache could not be cropped: ", cropped.message()));
      }
    }
    allocation.cache = seq->cache.get();
    allocation.num_cached_tokens = seq->session_reuse;
    return allocation;
  }
  if (session != nullptr) {
    // The prompt is computed (from a prefix, if one matches): the old cache goes.
    if (session->turns > 0) ++session_counts_.misses;
    session->cache.reset();
    session->offloaded = false;
  }
  if (r.registration) {
    // Every token of every layer, so that the snapshot loads into a cache of any strategy
    // (sliding layers' masks come from the model's layer specs, not from the cache).
    std::vector<std::unique_ptr<CacheLayer>> layers;
    for (size_t i = 0; i < shape_.layers.size(); ++i) {
      layers.push_back(std::make_unique<DynamicLayer>());
    }
    seq->cache = std::make_unique<KvCache>(std::move(layers));
  } else {
    absl::StatusOr<std::unique_ptr<KvCache>> cache = MakeCache(r.cache, shape_.layers);
    if (!cache.ok()) {
      return absl::Status(cache.status().code(), absl::StrCat("cache: ", cache.status().message()));
    }
    seq->cache = *std::move(cache);
    // A session's cache keeps sliding layers' past so that later turns can crop back.
    if (session != nullptr) seq->cache->RetainPast();
  }
  seq->cache->AttachBudget(budget_.get());
  // Room for the cache: snapshots nobody uses, then idle sessions' device bytes, give way to
  // live caches.
  if (budget_->limit() >= 0) {
    const int64_t needed =
        EstimateBytes(seq->max_cache_tokens(), seq->rows()).offloaded_resident_bytes;
    if (budget_->available() < needed) ReclaimSnapshots(needed - budget_->available());
    if (budget_->available() < needed) OffloadIdleSessions(needed - budget_->available());
  }
  PrefixMatch chosen = std::move(seq->chosen);
  seq->chosen = {};
  seq->request.named_prefix = nullptr;  // the choice holds what is copied
  const bool tried_reuse =
      !r.registration && !r.skip_prefix_reuse && (options_.auto_prefix_cache || !chosen.empty());
  if (tried_reuse) {
    store_->RecordUse(chosen);
    if (chosen.named) catalog_dirty_ = true;  // its hits changed
  }
  Allocation allocation;
  allocation.cache = seq->cache.get();
  if (session != nullptr) allocation.session_recompute_reason = seq->session_reason;
  if (chosen.empty()) return allocation;
  // A deep copy: the cache shares nothing with the snapshot.
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      absl::Status loaded = chosen.snapshot->LoadInto(seq->cache.get(), chosen.num_tokens);
      if (!loaded.ok()) {
        return absl::InternalError(absl::StrCat("copying the cached prefix: ", loaded.message()));
      }
      allocation.num_cached_tokens = chosen.num_tokens;
      allocation.prefix_name = chosen.named ? chosen.name : "";
      return allocation;
    } catch (const compat::OutOfMemoryError&) {
      seq->cache->Reset();
      compat::EmptyDeviceCache();
      if (attempt == 0) {
        seq->cache->ConvertToOffloaded();
        seq->offload_fallback = true;
        allocation.offload_fallback = true;
        ++num_offload_fallbacks_;
      }
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("the cached prefix (", chosen.num_tokens,
                   " tokens) does not fit in the KV device budget even offloaded; budget ",
                   budget_->limit(), " bytes, in use ", budget_->used()));
}

KvCache* KvCacheManager::cache(SequenceId id) const {
  const Sequence* seq = Find(id);
  return seq == nullptr ? nullptr : seq->cache.get();
}

bool KvCacheManager::offload_fallback(SequenceId id) const {
  const Sequence* seq = Find(id);
  return seq != nullptr && seq->offload_fallback;
}

namespace {

// The strategy a sequence's cache follows now (see KvCacheManager::strategy_name).
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

std::string KvCacheManager::strategy_name(SequenceId id) const {
  const Sequence* seq = Find(id);
  return seq == nullptr ? "" : StrategyName(seq->request.cache, seq->offload_fallback);
}

bool KvCacheManager::prefill_whole(SequenceId id) const {
  const Sequence* seq = Find(id);
  return seq != nullptr && seq->request.cache.implementation == CacheImplementation::kQuantized;
}

void KvCacheManager::BeginStep(absl::Span<const SequenceId> ids) {
  for (SequenceId id : ids) {
    if (KvCache* c = cache(id)) c->BeginStep();
  }
}

void KvCacheManager::CommitStep(absl::Span<const SequenceId> ids) {
  for (SequenceId id : ids) {
    if (KvCache* c = cache(id)) c->CommitStep();
  }
}

std::vector<SequenceId> KvCacheManager::RollbackStep(absl::Span<const SequenceId> ids) {
  std::vector<SequenceId> broken;
  for (SequenceId id : ids) {
    KvCache* c = cache(id);
    if (c != nullptr && !c->RollbackStep().ok()) broken.push_back(id);
  }
  return broken;
}

OutOfMemoryAction KvCacheManager::OnOutOfMemory(absl::Span<const SequenceId> ids) {
  compat::EmptyDeviceCache();
  OutOfMemoryAction action;
  // Snapshots nobody uses go first: they are a cache of work, live caches are requests. All
  // of them: the step was rolled back, so how much more it needed is unknown (the budget is
  // back under its limit by now).
  if (ReclaimSnapshots(std::numeric_limits<int64_t>::max()) > 0) {
    action.reclaimed_snapshots = true;
    return action;
  }
  // Then idle sessions' caches, which wait for a later turn, move to the host.
  if (OffloadIdleSessions(std::numeric_limits<int64_t>::max()) > 0) {
    action.offloaded_idle_sessions = true;
    return action;
  }
  // The largest by what its cache holds on the device now or, for caches still empty (a
  // failed first step was rolled back), by what it will hold.
  Sequence* largest = nullptr;
  SequenceId largest_id = 0;
  int64_t largest_bytes = -1;
  for (auto& [id, seq] : sequences_) {
    if (seq->cache == nullptr || seq->cache->fully_offloaded()) continue;
    const int64_t bytes = std::max(seq->cache->Memory().device_bytes,
                                   EstimateBytes(seq->max_cache_tokens(), seq->rows()).total_bytes);
    // Ties go to the oldest sequence (lowest id), whatever the map's order.
    if (bytes > largest_bytes || (bytes == largest_bytes && id < largest_id)) {
      largest = seq.get();
      largest_id = id;
      largest_bytes = bytes;
    }
  }
  if (largest != nullptr) {
    largest->cache->ConvertToOffloaded();
    largest->offload_fallback = true;
    ++num_offload_fallbacks_;
    action.offloaded = largest_id;
    action.offloaded_bytes = largest_bytes;
    return action;
  }
  // Nothing left to move: the sequence of the step holding the most bytes fails alone.
  int64_t victim_bytes = -1;
  for (SequenceId id : ids) {
    const KvCache* c = cache(id);
    const int64_t bytes = c != nullptr ? c->Memory().total() : 0;
    if (bytes > victim_bytes) {
      action.victim = id;
      victim_bytes = bytes;
    }
  }
  if (action.victim) {
    action.reason =
        absl::StrCat("out of KV memory even with every cache offloaded: this request holds ",
                     victim_bytes, " bytes of KV and its step needed more (budget ",
                     budget_->limit(), " bytes, in use ", budget_->used(), ")");
  }
  return action;
}

void KvCacheManager::OnPrefilled(SequenceId id) {
  Sequence* seq = Find(id);
  if (seq == nullptr || seq->prefilled) return;
  seq->prefilled = true;
  const SequenceRequest& r = seq->request;
  // A session turn's prompt stays in its session's cache instead.
  if (!options_.auto_prefix_cache || r.registration || r.skip_prefix_reuse ||
      seq->session != nullptr || seq->cache == nullptr || !allow_partial_prefix_ ||
      r.cache.implementation != CacheImplementation::kDynamic || seq->offload_fallback ||
      static_cast<int64_t>(r.prompt.size()) < options_.auto_prefix_min_tokens) {
    return;
  }
  // The copy is device memory too: it is kept only when it fits beside the live caches. It
  // holds exactly the prompt's tokens in every layer (no spare capacity).
  if (budget_->limit() >= 0) {
    const int64_t bytes = static_cast<int64_t>(r.prompt.size()) * 2 * shape_.num_kv_heads *
                          shape_.head_dim * shape_.bytes_per_element *
                          static_cast<int64_t>(shape_.layers.size());
    if (budget_->available() < bytes) return;
  }
  absl::StatusOr<std::shared_ptr<const Snapshot>> snapshot =
      Snapshot::Capture(*seq->cache, r.prompt, shape_.fingerprint);
  if (snapshot.ok()) store_->PutAutomatic(r.prefix_space, *std::move(snapshot));
  SyncSnapshotBytes();
}

absl::Status KvCacheManager::ExpandRows(SequenceId id, int64_t repeats) {
  Sequence* seq = Find(id);
  if (seq == nullptr || seq->cache == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", id, " has no cache to expand"));
  }
  if (repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat("repeats must be >= 1, got ", repeats));
  }
  KvCache& cache = *seq->cache;
  if (budget_->limit() >= 0 && !cache.fully_offloaded()) {
    const int64_t growth = cache.Memory().device_bytes * (repeats - 1);
    if (budget_->available() < growth) ReclaimSnapshots(growth - budget_->available());
    if (budget_->available() < growth) OffloadIdleSessions(growth - budget_->available());
    if (budget_->available() < growth) {
      // As a step that runs out of memory: the request continues on the host.
      cache.ConvertToOffloaded();
      seq->offload_fallback = true;
      ++num_offload_fallbacks_;
    }
  }
  return cache.RepeatInterleave(repeats);
}

absl::Status KvCacheManager::SelectRows(SequenceId id, absl::Span<const int64_t> parents) {
  Sequence* seq = Find(id);
  if (seq == nullptr || seq->cache == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", id, " has no cache rows"));
  }
  std::vector<int64_t> indices(parents.begin(), parents.end());
  const at::Tensor index =
      at::from_blob(indices.data(), {static_cast<int64_t>(indices.size())}, at::kLong).clone();
  KvCache& cache = *seq->cache;
  bool identity = static_cast<int64_t>(indices.size()) == cache.BatchSize();
  for (size_t i = 0; identity && i < indices.size(); ++i)
    identity = indices[i] == static_cast<int64_t>(i);
  if (identity) return absl::OkStatus();  // every row stays where it is
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
  absl::StatusOr<PrefixInfo> info = store_->PutNamed(
      seq->request.registration_name, *std::move(snapshot), seq->request.registration_options);
  SyncSnapshotBytes();
  if (info.ok()) NoteNamedChange(seq->request.registration_name);
  return info;
}

void KvCacheManager::Release(SequenceId id, absl::Span<const int32_t> tokens,
                             bool keep_session_cache) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  Sequence& seq = *it->second;
  if (Session* session = seq.session; session != nullptr) {
    session->turn.reset();
    session->last_used = clock_->Now();
    ++session->turns;
    next_session_maintenance_ = absl::InfinitePast();
    if (session->closed) {
      const std::string session_id = session->id;
      sequences_.erase(it);
      EraseSession(session_id);
      return;
    }
    if (seq.allocated) {
      const bool keep = keep_session_cache && seq.cache != nullptr && !tokens.empty() &&
                        seq.cache->SeqLength() <= static_cast<int64_t>(tokens.size());
      if (keep) {
        session->cache = std::move(seq.cache);
        session->history.assign(tokens.begin(), tokens.end());
      } else {
        session->cache.reset();
        session->history = std::move(seq.history_before);
      }
    }
  }
  sequences_.erase(it);
}

KvCacheManager::Session* KvCacheManager::FindSession(const std::string& id,
                                                     std::string_view tenant) const {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->closed) return nullptr;
  if (!tenant.empty() && it->second->options->tenant != tenant) return nullptr;
  return it->second.get();
}

void KvCacheManager::ChooseSessionReuse(Sequence& seq) const {
  seq.session_reuse = 0;
  seq.session_reason.clear();
  const Session& session = *seq.session;
  const std::vector<int32_t>& prompt = seq.request.prompt;
  if (session.cache == nullptr) {
    if (session.evictions > 0 && !session.history.empty()) {
      seq.session_reason = "the session's cache was evicted";
    }
    return;
  }
  const int64_t held = session.cache->SeqLength();
  // The last prompt token is always computed: its logits choose the first new token.
  const int64_t common = std::min(
      {CommonPrefixLength(prompt, session.history), held, static_cast<int64_t>(prompt.size()) - 1});
  if (common < held) {
    if (absl::Status s = session.cache->CheckCrop(-(held - common)); !s.ok()) {
      seq.session_reason =
          absl::StrCat("the session's cache cannot be cropped back ", held - common,
                       " tokens to the common prefix of ", common, " tokens: ", s.message());
      return;
    }
  }
  seq.session_reuse = common;
}

SessionInfo KvCacheManager::InfoOf(const Session& session) const {
  SessionInfo info;
  info.id = session.id;
  info.options = *session.options;
  info.num_tokens = static_cast<int64_t>(session.history.size());
  info.turns = session.turns;
  info.evictions = session.evictions;
  info.created_at = session.created_at;
  info.last_used = session.last_used;
  info.expires_at = session.options->ttl == absl::InfiniteDuration()
                        ? absl::InfiniteFuture()
                        : session.last_used + session.options->ttl;
  if (session.turn) {
    info.state = SessionState::kRunning;
    if (const KvCache* c = cache(*session.turn)) info.memory = c->Memory();
    return info;
  }
  if (session.cache == nullptr) {
    info.state = SessionState::kEmpty;
    return info;
  }
  info.state = session.offloaded ? SessionState::kOffloaded : SessionState::kIdle;
  info.cached_tokens = std::min(session.cache->SeqLength(), info.num_tokens);
  info.memory = session.cache->Memory();
  return info;
}

absl::StatusOr<SessionInfo> KvCacheManager::CreateSession(SessionOptions options) {
  if (!options.cache.use_cache()) {
    return absl::InvalidArgumentError(
        "options.cache.use_cache: a session keeps a cache; it cannot be false");
  }
  if (options.ttl <= absl::ZeroDuration()) options.ttl = options_.session_default_ttl;
  int64_t open = 0;
  for (const auto& [id, s] : sessions_) open += s->closed ? 0 : 1;
  if (open >= options_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat(options_.max_sessions,
                     " sessions are open (--max-sessions); close one or wait for one "
                     "to expire"));
  }
  auto session = std::make_unique<Session>();
  do {
    // Two splitmix64 draws: ids are unguessable enough not to collide across clients.
    auto next = [this] {
      uint64_t z = (session_id_state_ += 0x9E3779B97F4A7C15ULL);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      return z ^ (z >> 31);
    };
    session->id =
        absl::StrCat(absl::Hex(next(), absl::kZeroPad16), absl::Hex(next(), absl::kZeroPad16));
  } while (sessions_.contains(session->id));
  session->history = options.prefix_tokens;
  session->options = std::make_shared<const SessionOptions>(std::move(options));
  session->serial = next_session_serial_++;
  session->created_at = clock_->Now();
  session->last_used = session->created_at;
  PublishSessionOptions(session->id, session->options);
  Session& stored = *session;
  sessions_.emplace(session->id, std::move(session));
  next_session_maintenance_ = absl::InfinitePast();
  return InfoOf(stored);
}

absl::StatusOr<SessionInfo> KvCacheManager::GetSession(const std::string& id,
                                                       std::string_view tenant) const {
  const Session* session = FindSession(id, tenant);
  if (session == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("id: no open session '", id, "' (closed, expired or never created)"));
  }
  return InfoOf(*session);
}

std::vector<SessionInfo> KvCacheManager::ListSessions(std::string_view tenant) const {
  std::vector<const Session*> open;
  for (const auto& [id, s] : sessions_) {
    if (!s->closed && (tenant.empty() || s->options->tenant == tenant)) open.push_back(s.get());
  }
  std::sort(open.begin(), open.end(),
            [](const Session* a, const Session* b) { return a->serial < b->serial; });
  std::vector<SessionInfo> infos;
  infos.reserve(open.size());
  for (const Session* s : open) infos.push_back(InfoOf(*s));
  return infos;
}

absl::Status KvCacheManager::CloseSession(const std::string& id, std::string_view tenant) {
  Session* session = FindSession(id, tenant);
  if (session == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("id: no open session '", id, "' (closed, expired or never created)"));
  }
  if (session->turn) {
    // The running turn keeps its cache until it ends; Release erases the session then.
    session->closed = true;
    PublishSessionOptions(id, nullptr);
    return absl::OkStatus();
  }
  EraseSession(id);
  return absl::OkStatus();
}

absl::StatusOr<SessionInfo> KvCacheManager::RollbackSession(const std::string& id, int64_t n,
                                                            std::string_view tenant) {
  Session* session = FindSession(id, tenant);
  if (session == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("id: no open session '", id, "' (closed, expired or never created)"));
  }
  if (session->turn) {
    return absl::FailedPreconditionError(
        absl::StrCat("id: session '", id, "' has a turn running; roll back once it has finished"));
  }
  const int64_t history = static_cast<int64_t>(session->history.size());
  const int64_t fixed = static_cast<int64_t>(session->options->prefix_tokens.size());
  if (n < 1 || n > history - fixed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n: must be in [1, ", history - fixed, "] (the session's ", history, " tokens",
        fixed > 0 ? absl::StrCat(" after its prefix's ", fixed) : std::string(), "); got ", n));
  }
  session->history.resize(history - n);
  session->last_used = clock_->Now();
  // Crop now when the layers can; otherwise the next turn finds out and recomputes.
  if (session->cache != nullptr) {
    const int64_t excess = session->cache->SeqLength() - (history - n);
    if (excess > 0 && session->cache->CheckCrop(-excess).ok()) {
      (void)session->cache->Crop(-excess);
    }
  }
  next_session_maintenance_ = absl::InfinitePast();
  return InfoOf(*session);
}

void KvCacheManager::EvictSessionCache(Session& session) {
  if (session.cache == nullptr) return;
  session.cache.reset();
  session.offloaded = false;
  ++session.evictions;
  ++session_counts_.evictions;
}

void KvCacheManager::EraseSession(const std::string& id) {
  sessions_.erase(id);
  PublishSessionOptions(id, nullptr);
}

int64_t KvCacheManager::IdleSessionDeviceBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : sessions_) {
    if (s->cache != nullptr && !s->turn) bytes += s->cache->Memory().device_bytes;
  }
  return bytes;
}

int64_t KvCacheManager::OffloadIdleSessions(int64_t bytes) {
  std::vector<Session*> idle;
  for (auto& [id, s] : sessions_) {
    if (s->cache != nullptr && !s->turn && s->cache->Memory().device_bytes > 0) {
      idle.push_back(s.get());
    }
  }
  std::sort(idle.begin(), idle.end(), [](const Session* a, const Session* b) {
    return a->last_used != b->last_used ? a->last_used < b->last_used : a->serial < b->serial;
  });
  int64_t freed = 0;
  for (Session* s : idle) {
    if (freed >= bytes) break;
    freed += s->cache->ConvertToOffloaded();
    s->offloaded = true;
  }
  return freed;
}

void KvCacheManager::MaintainSessions() {
  const absl::Time now = clock_->Now();
  if (now < next_session_maintenance_) return;
  next_session_maintenance_ = now + absl::Milliseconds(100);
  std::vector<std::string> expired;
  std::vector<Session*> idle;
  for (auto& [id, s] : sessions_) {
    if (s->turn || s->closed) continue;
    if (s->options->ttl != absl::InfiniteDuration() && now - s->last_used >= s->options->ttl) {
      expired.push_back(id);
      continue;
    }
    if (s->cache == nullptr) continue;
    if (!s->offloaded && now - s->last_used >= options_.session_idle_offload &&
        s->cache->Memory().device_bytes > 0) {
      s->cache->ConvertToOffloaded();
      s->offloaded = true;
    }
    idle.push_back(s.get());
  }
  for (const std::string& id : expired) {
    ++session_counts_.expirations;
    EraseSession(id);
  }
  int64_t total = 0;
  for (const Session* s : idle) total += s->cache->Memory().total();
  if (total <= options_.session_cache_bytes) return;
  // Least recently used first.
  std::sort(idle.begin(), idle.end(), [](const Session* a, const Session* b) {
    return a->last_used != b->last_used ? a->last_used < b->last_used : a->serial < b->serial;
  });
  for (Session* s : idle) {
    if (total <= options_.session_cache_bytes) break;
    total -= s->cache->Memory().total();
    EvictSessionCache(*s);
  }
}

std::shared_ptr<const SessionOptions> KvCacheManager::session_options(const std::string& id) const {
  absl::MutexLock lock(&sessions_mu_);
  auto it = session_directory_.find(id);
  return it == session_directory_.end() ? nullptr : it->second;
}

void KvCacheManager::PublishSessionOptions(const std::string& id,
                                           std::shared_ptr<const SessionOptions> options) {
  absl::MutexLock lock(&sessions_mu_);
  if (options == nullptr) {
    session_directory_.erase(id);
  } else {
    session_directory_[id] = std::move(options);
  }
}

bool KvCacheManager::DeletePrefix(const std::string& name) {
  if (!store_->DeleteNamed(name)) return false;
  SyncSnapshotBytes();
  NoteNamedChange(name);
  return true;
}

bool KvCacheManager::HasPrefix(const std::string& name) const {
  return store_->Info(name).has_value();
}

std::shared_ptr<const Snapshot> KvCacheManager::prefix_snapshot(const std::string& name) const {
  return store_->PeekNamed(name);
}

std::string KvCacheManager::registration_name(SequenceId id) const {
  const Sequence* seq = Find(id);
  return seq != nullptr && seq->request.registration ? seq->request.registration_name : "";
}

int64_t KvCacheManager::ReclaimSnapshots(int64_t bytes) {
  if (bytes <= 0) return 0;
  const int64_t freed = store_->Reclaim(bytes);
  SyncSnapshotBytes();
  return freed;
}

void KvCacheManager::SyncSnapshotBytes() {
  const int64_t bytes = store_->stats().bytes_used;
  budget_->Add(bytes - snapshot_bytes_accounted_);
  snapshot_bytes_accounted_ = bytes;
}

void KvCacheManager::NoteNamedChange(const std::string& name) {
  catalog_dirty_ = true;
  if (!listener_) return;
  CatalogChange change;
  change.name = name;
  change.info = store_->Info(name);
  if (change.info) change.snapshot = store_->PeekNamed(name);
  listener_(change);
}

void KvCacheManager::OnNamedDropped(const std::string& name) {
  // A TTL may run out inside any call to the store: its bytes leave the budget at once.
  SyncSnapshotBytes();
  catalog_dirty_ = true;
  if (!listener_) return;
  CatalogChange change;
  change.name = name;
  listener_(change);
}

std::shared_ptr<const PrefixCatalog> KvCacheManager::catalog() const {
  absl::MutexLock lock(&catalog_mu_);
  return catalog_;
}

void KvCacheManager::PublishCatalog() {
  // TTLs run out without any call: let the store drop what expired (the listener hears of
  // it) and keep the budget's count of snapshot bytes current.
  SyncSnapshotBytes();
  if (!catalog_dirty_) return;
  catalog_dirty_ = false;
  auto catalog = std::make_shared<PrefixCatalog>();
  for (PrefixInfo& info : store_->List()) {
    std::string name = info.name;
    catalog->emplace(std::move(name),
                     CatalogEntry{.info = std::move(info), .snapshot = store_->PeekNamed(name)});
  }
  absl::MutexLock lock(&catalog_mu_);
  catalog_ = std::move(catalog);
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
  stats.prefix_bytes = stats.prefixes.bytes_used;
  stats.budget_used = budget_->used();
  stats.budget_limit = budget_->limit();
  stats.budget_peak = budget_->peak_used();
  stats.num_offload_fallbacks = num_offload_fallbacks_;
  stats.sessions = session_counts_;
  for (const auto& [id, s] : sessions_) {
    if (s->closed) continue;
    ++stats.sessions.live;
    if (s->turn) ++stats.sessions.running;
    if (s->cache == nullptr) continue;
    if (s->offloaded) ++stats.sessions.offloaded;
    stats.sessions.memory += s->cache->Memory();
  }
  return stats;
}

}  // namespace kvserve::cache
