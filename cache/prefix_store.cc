// The store of named and automatic prefix snapshots (see prefix_store.h).
#include "cache/prefix_store.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cache/snapshot.h"

namespace kvserve::cache {

absl::StatusOr<std::unique_ptr<PrefixStore>> PrefixStore::Create(PrefixStoreOptions options,
                                                                 const base::Clock* clock) {
  if (options.budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix store budget_bytes must be > 0, got ", options.budget_bytes));
  }
  if (options.model_fingerprint.empty()) {
    return absl::InvalidArgumentError("prefix store model_fingerprint must not be empty");
  }
  if (clock == nullptr) return absl::InvalidArgumentError("prefix store needs a clock");
  if (options.retention_half_life <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("prefix store retention_half_life must be > 0");
  }
  return std::unique_ptr<PrefixStore>(new PrefixStore(std::move(options), clock));
}

PrefixStore::PrefixStore(PrefixStoreOptions options, const base::Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      events_(static_cast<uint64_t>(std::max<int64_t>(1, absl::ToUnixMillis(clock->Now())))) {}

void PrefixStore::DropExpiredLocked(absl::Time now, Released* released) {
  while (!expiries_.empty() && expiries_.begin()->first <= now) {
    RemoveLocked(expiries_.begin()->second, RemovalCause::kExpired, released);
    ++counters_.expirations;
  }
}

void PrefixStore::RemoveLocked(EntryId id, RemovalCause cause, Released* released) {
  auto it = entries_.find(id);
  Entry& entry = it->second;
  PrefixEvent removed;
  removed.kind = PrefixEventKind::kRemoved;
  removed.cause = cause;
  removed.named = entry.named;
  removed.space = entry.space;
  removed.name = entry.name;
  removed.tokens = entry.snapshot->content_ids();
  removed.entry_id = id;
  events_.Append(std::move(removed));
  // Described before the indexes forget it (a tier keeps an evicted named prefix as itself).
  std::optional<PrefixInfo> evicted_named;
  if (cause == RemovalCause::kEvicted && entry.named) evicted_named = InfoLocked(entry);
  if (entry.named) ++named_generation_;
  if (auto tree = trees_.find(entry.space); tree != trees_.end()) {
    tree->second.Erase(entry.snapshot->token_ids(), id);
    if (tree->second.empty()) trees_.erase(tree);
  }
  if (entry.named) named_.erase(entry.name);
  lru_.erase(entry.lru_position);
  if (entry.expiry_position) expiries_.erase(*entry.expiry_position);
  auto holder = holders_.find(entry.snapshot.get());
  if (--holder->second == 0) {
    holders_.erase(holder);
    bytes_used_ -= entry.snapshot->bytes();
  }
  if (auto space = spaces_.find(entry.space); space != spaces_.end()) {
    auto held = space->second.holders.find(entry.snapshot.get());
    if (--held->second == 0) {
      space->second.holders.erase(held);
      space->second.bytes -= entry.snapshot->bytes();
    }
    if (space->second.holders.empty()) spaces_.erase(space);
  }
  if (cause == RemovalCause::kEvicted && options_.on_evicted) {
    released->on_evicted = &options_.on_evicted;
    released->evicted.push_back({.space = entry.space,
                                 .snapshot = entry.snapshot,
                                 .hits = entry.hits,
                                 .retention = entry.options.retention,
                                 .named = std::move(evicted_named)});
  }
  released->snapshots.push_back(std::move(entry.snapshot));
  entries_.erase(it);
}

PrefixStore::EntryId PrefixStore::InsertLocked(Entry entry) {
  const EntryId id = next_id_++;
  lru_.push_back(id);
  entry.lru_position = std::prev(lru_.end());
  if (entry.options.ttl != absl::InfiniteDuration()) {
    entry.expiry_position = expiries_.emplace(entry.created_at + entry.options.ttl, id);
  }
  if (holders_[entry.snapshot.get()]++ == 0) bytes_used_ += entry.snapshot->bytes();
  SpaceUsage& space = spaces_[entry.space];
  if (space.holders[entry.snapshot.get()]++ == 0) space.bytes += entry.snapshot->bytes();
  trees_[entry.space].Insert(entry.snapshot->token_ids(), id);
  if (entry.named) {
    named_[entry.name] = id;
    ++named_generation_;
  }
  PrefixEvent stored;
  stored.kind = PrefixEventKind::kStored;
  stored.named = entry.named;
  stored.space = entry.space;
  stored.name = entry.name;
  stored.tokens = entry.snapshot->content_ids();
  stored.entry_id = id;
  stored.options = entry.options;
  stored.created_at = entry.created_at;
  events_.Append(std::move(stored));
  entries_.emplace(id, std::move(entry));
  return id;
}

void PrefixStore::TouchLocked(Entry& entry, absl::Time now) {
  entry.last_used_at = now;
  if (entry.named) ++named_generation_;
  lru_.splice(lru_.end(), lru_, entry.lru_position);
}

std::vector<PrefixStore::EntryId> PrefixStore::EvictionOrderLocked() const {
  const absl::Time now = clock_->Now();
  std::vector<std::pair<double, EntryId>> ranked;
  ranked.reserve(lru_.size());
  for (EntryId id : lru_) {
    const Entry& entry = entries_.at(id);
    ranked.emplace_back(RetentionPriority(entry.options.retention, entry.hits, entry.last_used_at,
                                          now, options_.retention_half_life),
                        id);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<EntryId> order;
  order.reserve(ranked.size());
  for (const auto& [priority, id] : ranked) order.push_back(id);
  return order;
}

bool PrefixStore::ReferencedLocked(const Entry& entry) const {
  return entry.snapshot.use_count() > holders_.at(entry.snapshot.get());
}

int64_t PrefixStore::SpaceBytesLocked(std::string_view space) const {
  auto it = spaces_.find(space);
  return it == spaces_.end() ? 0 : it->second.bytes;
}

absl::StatusOr<std::vector<PrefixStore::EntryId>> PrefixStore::PlanRoomLocked(
    const Snapshot& snapshot, std::string_view space, std::optional<EntryId> replaced,
    const std::string& what) const {
  const int64_t needed = holders_.contains(&snapshot) ? 0 : snapshot.bytes();
  int64_t available = options_.budget_bytes - bytes_used_;
  const bool limited = !space.empty() && options_.space_budget_bytes > 0;
  const auto space_usage = spaces_.find(space);
  const bool space_holds =
      space_usage != spaces_.end() && space_usage->second.holders.contains(&snapshot);
  const int64_t space_needed = limited && !space_holds ? snapshot.bytes() : 0;
  const int64_t space_used = SpaceBytesLocked(space);
  int64_t space_available = limited ? options_.space_budget_bytes - space_used : 0;
  // Entries that will still hold each snapshot as the plan goes (a snapshot's bytes come
  // free when its last entry goes), in the store and in the namespace.
  std::unordered_map<const Snapshot*, int> remaining;
  std::unordered_map<const Snapshot*, int> space_remaining;
  auto release = [&](const Entry& entry) {
    const Snapshot* s = entry.snapshot.get();
    auto [it, inserted] = remaining.try_emplace(s, holders_.at(s));
    if (--it->second == 0) available += s->bytes();
    if (limited && entry.space == space) {
      auto [held, fresh] = space_remaining.try_emplace(s, space_usage->second.holders.at(s));
      if (--held->second == 0) space_available += s->bytes();
    }
  };
  if (replaced) {
    const Entry& old = entries_.at(*replaced);
    if (old.snapshot.get() != &snapshot) release(old);
  }
  auto evictable = [&](EntryId id, const Entry& entry) {
    return id != replaced && !entry.options.pinned && entry.snapshot.get() != &snapshot &&
           !ReferencedLocked(entry);
  };
  std::vector<EntryId> victims;
  absl::flat_hash_set<EntryId> chosen;
  const std::vector<EntryId> order = EvictionOrderLocked();
  if (limited) {
    // The namespace's limit first, with its own entries.
    for (EntryId id : order) {
      if (space_needed <= space_available) break;
      const Entry& entry = entries_.at(id);
      if (entry.space != space || !evictable(id, entry)) continue;
      victims.push_back(id);
      chosen.insert(id);
      release(entry);
    }
    if (space_needed > space_available) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " needs ", space_needed, " bytes of its tenant's prefix cache but at most ",
          space_available, " can be made available (", options_.space_budget_name, " = ",
          options_.space_budget_bytes, " bytes per tenant, ", space_used,
          " in use by this tenant; pinned and referenced entries are never evicted)"));
    }
  }
  for (EntryId id : order) {
    if (needed <= available) return victims;
    const Entry& entry = entries_.at(id);
    if (chosen.contains(id) || !evictable(id, entry)) continue;
    victims.push_back(id);
    release(entry);
  }
  if (needed <= available) return victims;
  // What the whole cache holds and could free is other tenants' business: only the budget and
  // the caller's own bytes are named.
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " needs ", needed, " bytes but the prefix cache (budget ",
                   options_.budget_bytes, " bytes, ", space_used,
                   " held by this namespace) cannot free that much: pinned and "
                   "referenced entries are never evicted"));
}

PrefixInfo PrefixStore::InfoLocked(const Entry& entry) const {
  return PrefixInfo{.name = entry.name,
                    .num_tokens = entry.snapshot->num_tokens(),
                    .bytes = entry.snapshot->bytes(),
                    .fingerprint = entry.snapshot->fingerprint(),
                    .created_at = entry.created_at,
                    .last_used_at = entry.last_used_at,
                    .hits = entry.hits,
                    .options = entry.options,
                    .referenced = ReferencedLocked(entry)};
}

absl::StatusOr<PrefixInfo> PrefixStore::PutNamed(const std::string& name,
                                                 std::shared_ptr<const Snapshot> snapshot,
                                                 const NamedPrefixOptions& options) {
  if (name.empty()) return absl::InvalidArgumentError("a named prefix needs a non-empty name");
  if (snapshot == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("named prefix '", name, "' has no snapshot"));
  }
  if (options.ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "named prefix '", name, "': ttl must be > 0, got ", absl::FormatDuration(options.ttl)));
  }
  if (snapshot->fingerprint() != options_.model_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("named prefix '", name, "' was computed by model '", snapshot->fingerprint(),
                     "' but this store serves model '", options_.model_fingerprint, "'"));
  }
  Released released;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  DropExpiredLocked(now, &released);
  std::optional<EntryId> existing;
  if (auto it = named_.find(name); it != named_.end()) {
    existing = it->second;
    Entry& entry = entries_.at(it->second);
    // An encoder-decoder model's prefix is its encoder input, beside the decoder tokens.
    if (entry.options == options && entry.snapshot->token_ids() == snapshot->token_ids() &&
        entry.snapshot->content_ids() == snapshot->content_ids()) {
      TouchLocked(entry, now);
      return InfoLocked(entry);
    }
  }
  const std::string_view space = SplitQualifiedPrefixName(name).first;
  absl::StatusOr<std::vector<EntryId>> victims = PlanRoomLocked(
      *snapshot, space, existing,
      absl::StrCat("named prefix '", std::string(SplitQualifiedPrefixName(name).second), "'"));
  if (!victims.ok()) {
    if (absl::IsResourceExhausted(victims.status())) ++counters_.space_refusals;
    return victims.status();
  }
  for (EntryId id : *victims) {
    RemoveLocked(id, RemovalCause::kEvicted, &released);
    ++counters_.evictions;
  }
  if (existing) RemoveLocked(*existing, RemovalCause::kReplaced, &released);
  Entry entry;
  entry.snapshot = std::move(snapshot);
  entry.space = std::string(space);
  entry.named = true;
  entry.name = name;
  entry.options = options;
  entry.created_at = entry.last_used_at = now;
  return InfoLocked(entries_.at(InsertLocked(std::move(entry))));
}

std::shared_ptr<const Snapshot> PrefixStore::GetNamed(const std::string& name) {
  Released released;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  DropExpiredLocked(now, &released);
  auto it = named_.find(name);
  if (it == named_.end()) {
    ++counters_.named_misses;
    return nullptr;
  }
  Entry& entry = entries_.at(it->second);
  ++entry.hits;
  ++counters_.named_hits;
  TouchLocked(entry, now);
  return entry.snapshot;
}

std::optional<PrefixInfo> PrefixStore::Info(const std::string& name) {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  auto it = named_.find(name);
  if (it == named_.end()) return std::nullopt;
  return InfoLocked(entries_.at(it->second));
}

std::vector<PrefixInfo> PrefixStore::List() {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  std::vector<PrefixInfo> infos;
  infos.reserve(named_.size());
  for (const auto& [name, id] : named_) infos.push_back(InfoLocked(entries_.at(id)));
  return infos;
}

StoreListing PrefixStore::ListEntries() {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  StoreListing listing;
  // The log is appended to under mu_ only, so its last number matches the entries.
  listing.sequence = events_.last_sequence();
  listing.entries.reserve(entries_.size());
  for (const auto& [id, entry] : entries_) {
    const absl::Span<const int32_t> tokens = entry.snapshot->token_ids();
    listing.entries.push_back(StoredEntry{.entry_id = id,
                                          .space = entry.space,
                                          .named = entry.named,
                                          .name = entry.name,
                                          .tokens = {tokens.begin(), tokens.end()}});
  }
  std::sort(listing.entries.begin(), listing.entries.end(),
            [](const StoredEntry& a, const StoredEntry& b) { return a.entry_id < b.entry_id; });
  return listing;
}

bool PrefixStore::DeleteNamed(const std::string& name) {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  auto it = named_.find(name);
  if (it == named_.end()) return false;
  RemoveLocked(it->second, RemovalCause::kDeleted, &released);
  return true;
}

bool PrefixStore::RestoreNamed(const PrefixInfo& info, std::shared_ptr<const Snapshot> snapshot) {
  if (snapshot == nullptr || snapshot->fingerprint() != options_.model_fingerprint) return false;
  Released released;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  DropExpiredLocked(now, &released);
  if (named_.contains(info.name)) return false;
  if (info.options.ttl != absl::InfiniteDuration() && info.created_at + info.options.ttl <= now) {
    return false;
  }
  const std::string_view space = SplitQualifiedPrefixName(info.name).first;
  absl::StatusOr<std::vector<EntryId>> victims =
      PlanRoomLocked(*snapshot, space, std::nullopt, "restored prefix");
  if (!victims.ok()) return false;
  for (EntryId id : *victims) {
    RemoveLocked(id, RemovalCause::kEvicted, &released);
    ++counters_.evictions;
  }
  Entry entry;
  entry.snapshot = std::move(snapshot);
  entry.space = std::string(space);
  entry.named = true;
  entry.name = info.name;
  entry.options = info.options;
  entry.created_at = info.created_at;
  entry.last_used_at = now;
  entry.hits = info.hits;
  InsertLocked(std::move(entry));
  return true;
}

bool PrefixStore::PutAutomatic(std::string_view space, std::shared_ptr<const Snapshot> snapshot,
                               RetentionClass retention, int64_t hits) {
  if (snapshot == nullptr || snapshot->fingerprint() != options_.model_fingerprint) return false;
  Released released;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  DropExpiredLocked(now, &released);
  const absl::Span<const int32_t> tokens = snapshot->token_ids();
  for (std::string_view visible : {space, kSharedSpace}) {
    auto tree = trees_.find(visible);
    if (tree != trees_.end() &&
        tree->second.CommonPrefixLength(tokens) == static_cast<int64_t>(tokens.size())) {
      return false;
    }
  }
  absl::StatusOr<std::vector<EntryId>> victims =
      PlanRoomLocked(*snapshot, space, std::nullopt, "automatic prefix");
  if (!victims.ok()) {
    if (!space.empty() && options_.space_budget_bytes > 0 &&
        SpaceBytesLocked(space) + snapshot->bytes() > options_.space_budget_bytes) {
      ++counters_.space_refusals;
    }
    return false;
  }
  for (EntryId id : *victims) {
    RemoveLocked(id, RemovalCause::kEvicted, &released);
    ++counters_.evictions;
  }
  Entry entry;
  entry.snapshot = std::move(snapshot);
  entry.space = std::string(space);
  entry.options.pinned = false;
  entry.options.retention = retention;
  entry.hits = hits;
  entry.created_at = entry.last_used_at = now;
  InsertLocked(std::move(entry));
  return true;
}

PrefixMatch PrefixStore::PeekLocked(std::string_view space, absl::Span<const int32_t> tokens,
                                    int64_t min_tokens, bool allow_partial) const {
  const int64_t min_length = std::max<int64_t>(min_tokens, 1);
  const int64_t max_length = static_cast<int64_t>(tokens.size()) - 1;
  if (max_length < min_length) return {};
  // The longest match over the caller's namespace and the shared one; entries of both that
  // serve it compete.
  int64_t length = 0;
  std::vector<EntryId> ids;
  for (std::string_view visible : {space, kSharedSpace}) {
    auto tree = trees_.find(visible);
    if (tree == trees_.end()) continue;
    TokenRadixTree::Match match = allow_partial
                                      ? tree->second.LongestPrefix(tokens, max_length)
                                      : tree->second.LongestStoredPrefix(tokens, max_length);
    if (match.ids.empty() || match.length < length) continue;
    if (match.length > length) ids.clear();
    length = match.length;
    ids.insert(ids.end(), match.ids.begin(), match.ids.end());
    if (visible == kSharedSpace) break;  // the caller's namespace was the shared one
  }
  if (length < min_length || ids.empty()) return {};
  const Entry* best = nullptr;
  EntryId best_id = 0;
  for (EntryId id : ids) {
    const Entry& entry = entries_.at(id);
    if (best == nullptr || (entry.named && (!best->named || entry.name < best->name))) {
      best = &entry;
      best_id = id;
    }
  }
  return PrefixMatch{.snapshot = best->snapshot,
                     .num_tokens = length,
                     .named = best->named,
                     .name = best->name,
                     .entry_id = best_id};
}

void PrefixStore::RecordUseLocked(const PrefixMatch& match, absl::Time now) {
  if (match.empty()) {
    ++counters_.automatic_misses;
    return;
  }
  std::optional<EntryId> id;
  if (match.entry_id != 0 && entries_.contains(match.entry_id)) {
    id = match.entry_id;
  } else if (match.named) {
    if (auto it = named_.find(match.name); it != named_.end()) id = it->second;
  }
  if (!id) return;
  Entry& entry = entries_.at(*id);
  if (entry.snapshot != match.snapshot) return;  // replaced or dropped since
  ++entry.hits;
  ++(entry.named ? counters_.named_hits : counters_.automatic_hits);
  TouchLocked(entry, now);
}

PrefixMatch PrefixStore::Lookup(std::string_view space, absl::Span<const int32_t> tokens,
                                int64_t min_tokens, bool allow_partial) {
  Released released;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  DropExpiredLocked(now, &released);
  PrefixMatch match = PeekLocked(space, tokens, min_tokens, allow_partial);
  RecordUseLocked(match, now);
  return match;
}

PrefixMatch PrefixStore::Peek(std::string_view space, absl::Span<const int32_t> tokens,
                              int64_t min_tokens, bool allow_partial) {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  return PeekLocked(space, tokens, min_tokens, allow_partial);
}

void PrefixStore::RecordNamedMiss() {
  absl::MutexLock lock(&mu_);
  ++counters_.named_misses;
}

void PrefixStore::RecordUse(const PrefixMatch& match) {
  Released released;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  DropExpiredLocked(now, &released);
  RecordUseLocked(match, now);
}

int64_t PrefixStore::Reclaim(int64_t bytes) {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  // Plan, then remove: a removed entry's snapshot waits in `released`, which would make
  // another entry holding the same snapshot look referenced.
  std::vector<EntryId> victims;
  std::unordered_map<const Snapshot*, int> remaining;  // entries left holding each snapshot
  int64_t planned = 0;
  for (EntryId id : EvictionOrderLocked()) {
    if (planned >= bytes) break;
    const Entry& entry = entries_.at(id);
    if (entry.options.pinned || ReferencedLocked(entry)) continue;
    victims.push_back(id);
    auto [it, inserted] =
        remaining.try_emplace(entry.snapshot.get(), holders_.at(entry.snapshot.get()));
    if (--it->second == 0) planned += entry.snapshot->bytes();
  }
  const int64_t before = bytes_used_;
  for (EntryId id : victims) {
    RemoveLocked(id, RemovalCause::kEvicted, &released);
    ++counters_.evictions;
  }
  return before - bytes_used_;
}

std::optional<double> PrefixStore::LowestReclaimablePriority() {
  Released released;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  DropExpiredLocked(now, &released);
  for (EntryId id : EvictionOrderLocked()) {
    const Entry& entry = entries_.at(id);
    if (entry.options.pinned || ReferencedLocked(entry)) continue;
    return RetentionPriority(entry.options.retention, entry.hits, entry.last_used_at, now,
                             options_.retention_half_life);
  }
  return std::nullopt;
}

int64_t PrefixStore::ReclaimableBytes() {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  // A snapshot's bytes come free when every entry holding it can go (one snapshot may be held
  // by several entries, e.g. under two names).
  std::unordered_map<const Snapshot*, int> evictable_holders;
  for (const auto& [id, entry] : entries_) {
    if (entry.options.pinned || ReferencedLocked(entry)) continue;
    ++evictable_holders[entry.snapshot.get()];
  }
  int64_t bytes = 0;
  for (const auto& [snapshot, count] : evictable_holders) {
    if (count == holders_.at(snapshot)) bytes += snapshot->bytes();
  }
  return bytes;
}

std::shared_ptr<const Snapshot> PrefixStore::PeekNamed(const std::string& name) {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  auto it = named_.find(name);
  return it == named_.end() ? nullptr : entries_.at(it->second).snapshot;
}

int64_t PrefixStore::space_bytes(std::string_view space) {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  return SpaceBytesLocked(space);
}

uint64_t PrefixStore::named_generation() {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  return named_generation_;
}

bool PrefixStore::Holds(const Snapshot* snapshot) {
  absl::MutexLock lock(&mu_);
  return holders_.contains(snapshot);
}

std::vector<AutomaticEntry> PrefixStore::AutomaticEntries() {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  std::vector<AutomaticEntry> automatic;
  for (EntryId id : lru_) {
    const Entry& entry = entries_.at(id);
    if (!entry.named) {
      automatic.push_back(
          {entry.space, entry.snapshot, entry.hits, entry.options.retention, std::nullopt});
    }
  }
  return automatic;
}

PrefixStoreStats PrefixStore::stats() {
  Released released;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now(), &released);
  PrefixStoreStats stats = counters_;
  stats.named_entries = static_cast<int64_t>(named_.size());
  stats.automatic_entries = static_cast<int64_t>(entries_.size() - named_.size());
  stats.bytes_used = bytes_used_;
  stats.budget_bytes = options_.budget_bytes;
  return stats;
}

}  // namespace kvserve::cache
