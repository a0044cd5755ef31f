// Host and disk tiers of evicted prefix snapshots (see snapshot_tiers.h).
#include "cache/snapshot_tiers.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cache/memory_pressure.h"
#include "cache/prefix_store.h"
#include "cache/snapshot.h"

namespace kvserve::cache {
namespace {

// The snapshot on `device` (a copy when it is elsewhere; the same snapshot otherwise).
std::shared_ptr<const Snapshot> OnDevice(std::shared_ptr<const Snapshot> snapshot,
                                         const at::Device& device) {
  if (snapshot == nullptr || snapshot->keys(0).device() == device) return snapshot;
  std::vector<at::Tensor> keys, values;
  for (int i = 0; i < snapshot->num_layers(); ++i) {
    keys.push_back(snapshot->keys(i).to(device).contiguous());
    values.push_back(snapshot->values(i).to(device).contiguous());
  }
  std::vector<int32_t> tokens(snapshot->token_ids().begin(), snapshot->token_ids().end());
  absl::StatusOr<std::shared_ptr<const Snapshot>> moved = Snapshot::FromTensors(
      std::move(tokens), snapshot->fingerprint(), std::move(keys), std::move(values));
  return moved.ok() ? *std::move(moved) : nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotTiers>> SnapshotTiers::Create(SnapshotTiersOptions options,
                                                                     const base::Clock* clock) {
  if (options.host_bytes < 0) {
    return absl::InvalidArgumentError("--prefix-host-bytes must be >= 0");
  }
  if (options.disk_bytes < 0) {
    return absl::InvalidArgumentError("--prefix-disk-bytes must be >= 0");
  }
  if (options.disk_bytes > 0 && options.disk_dir.empty()) {
    return absl::InvalidArgumentError("--prefix-disk-bytes > 0 needs --prefix-disk-dir");
  }
  if (options.half_life <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the retention half-life must be > 0");
  }
  if (options.identity.model_fingerprint.empty()) {
    return absl::InvalidArgumentError("snapshot tiers need the model fingerprint");
  }
  if (clock == nullptr) return absl::InvalidArgumentError("snapshot tiers need a clock");
  if (options.disk_bytes > 0) {
    std::error_code error;
    std::filesystem::create_directories(options.disk_dir, error);
    if (error || !std::filesystem::is_directory(options.disk_dir)) {
      return absl::InternalError(absl::StrCat("--prefix-disk-dir '", options.disk_dir,
                                              "' cannot be made a folder: ", error.message()));
    }
  }
  try {
    (void)at::Device(options.device);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("unknown device '", options.device, "'"));
  }
  std::unique_ptr<SnapshotTiers> tiers(new SnapshotTiers(std::move(options), clock));
  if (tiers->options_.disk_bytes > 0) tiers->Scan();
  tiers->worker_ = std::thread([self = tiers.get()] { self->Run(); });
  return tiers;
}

SnapshotTiers::SnapshotTiers(SnapshotTiersOptions options, const base::Clock* clock)
    : options_(std::move(options)), clock_(clock) {
  counters_.host_budget_bytes = options_.host_bytes;
  counters_.disk_budget_bytes = options_.disk_bytes;
}

SnapshotTiers::~SnapshotTiers() {
  {
    absl::MutexLock lock(&mu_);
    // What only the host holds is written too, so that the next start finds it.
    std::vector<std::pair<double, EntryId>> host_only;
    const absl::Time now = clock_->Now();
    for (const auto& [id, entry] : entries_) {
      if (entry.host != nullptr && !entry.on_disk) {
        host_only.emplace_back(PriorityLocked(entry, now), id);
      }
    }
    // The most valuable last: when the disk budget runs out, the least valuable leave first.
    std::sort(host_only.begin(), host_only.end());
    for (const auto& [priority, id] : host_only) QueueWriteLocked(id, entries_.at(id).host);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

void SnapshotTiers::Log(const std::string& message) {
  if (options_.log) {
    options_.log(message);
  } else {
    std::fprintf(stderr, "%s\n", message.c_str());
  }
}

std::string SnapshotTiers::PathOf(const Entry& entry) const {
  return absl::StrCat(options_.disk_dir, "/", SnapshotFileName(entry.space, entry.tokens));
}

double SnapshotTiers::PriorityLocked(const Entry& entry, absl::Time now) const {
  return RetentionPriority(entry.retention, entry.hits, entry.last_used, now, options_.half_life);
}

void SnapshotTiers::Scan() {
  std::error_code error;
  std::vector<std::pair<std::string, absl::Time>> files;
  for (const auto& item : std::filesystem::directory_iterator(options_.disk_dir, error)) {
    const std::string path = item.path().string();
    const std::string name = item.path().filename().string();
    if (absl::StrContains(name, ".kvsnap.tmp.")) {
      // A write a crash interrupted.
      std::filesystem::remove(item.path(), error);
      continue;
    }
    if (!absl::EndsWith(name, ".kvsnap")) continue;
    struct stat st;
    const absl::Time modified =
        ::stat(path.c_str(), &st) == 0 ? absl::FromTimeT(st.st_mtime) : clock_->Now();
    files.emplace_back(path, modified);
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [path, modified] : files) {
    absl::StatusOr<SnapshotFileHeader> header = ReadSnapshotFileHeader(path, options_.identity);
    if (header.ok() && path != absl::StrCat(options_.disk_dir, "/",
                                            SnapshotFileName(header->space, header->tokens))) {
      header = absl::DataLossError(absl::StrCat("'", path, "' is not named after its tokens"));
    }
    if (header.ok() && FindExactLocked(header->space, header->tokens) != 0) {
      header = absl::AlreadyExistsError(absl::StrCat("'", path, "' duplicates another file"));
    }
    if (!header.ok()) {
      Log(absl::StrCat("refusing prefix snapshot file (removed): ", header.status().message()));
      std::filesystem::remove(path, error);
      ++counters_.refused_files;
      continue;
    }
    if (header->named && header->named->options.ttl != absl::InfiniteDuration() &&
        header->named->created_at + header->named->options.ttl <= clock_->Now()) {
      // A named prefix whose TTL ran out while the server was down.
      std::filesystem::remove(path, error);
      continue;
    }
    const EntryId id = AddLocked(header->space, header->tokens, header->hits);
    Entry& entry = entries_.at(id);
    entry.retention = header->retention;
    entry.named = std::move(header->named);
    if (entry.named) ++named_generation_;
    entry.last_used = std::min(modified, clock_->Now());
    entry.on_disk = true;
    entry.file_bytes = header->file_bytes;
    disk_used_ += header->file_bytes;
    ++counters_.recovered_files;
  }
  // A smaller budget than last time: the lowest priorities go.
  if (disk_used_ > options_.disk_bytes) MakeDiskRoomLocked(0, 0);
}

SnapshotTiers::EntryId SnapshotTiers::FindExactLocked(std::string_view space,
                                                      absl::Span<const int32_t> tokens) const {
  auto tree = trees_.find(space);
  if (tree == trees_.end()) return 0;
  const int64_t n = static_cast<int64_t>(tokens.size());
  TokenRadixTree::Match match = tree->second.LongestStoredPrefix(tokens, n);
  return match.length == n && !match.ids.empty() ? match.ids.front() : 0;
}

SnapshotTiers::EntryId SnapshotTiers::AddLocked(std::string space, std::vector<int32_t> tokens,
                                                int64_t hits) {
  const EntryId id = next_id_++;
  trees_[space].Insert(tokens, id);
  Entry& entry = entries_[id];
  entry.space = std::move(space);
  entry.tokens = std::move(tokens);
  entry.hits = hits;
  entry.last_used = clock_->Now();
  return id;
}

bool SnapshotTiers::MaybeEraseLocked(EntryId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  const Entry& entry = it->second;
  if (entry.host != nullptr || entry.on_disk || entry.loading) return false;
  if (entry.named) ++named_generation_;
  if (auto tree = trees_.find(entry.space); tree != trees_.end()) {
    tree->second.Erase(entry.tokens, id);
    if (tree->second.empty()) trees_.erase(tree);
  }
  entries_.erase(it);
  return true;
}

void SnapshotTiers::RemoveFileLocked(EntryId id) {
  Entry& entry = entries_.at(id);
  if (!entry.on_disk) return;
  entry.on_disk = false;
  disk_used_ -= entry.file_bytes;
  entry.file_bytes = 0;
  if (entry.writing != nullptr) {
    // Not written yet: the worker sees that the entry no longer wants it.
    entry.writing = nullptr;
    return;
  }
  std::error_code error;
  std::filesystem::remove(PathOf(entry), error);
}

void SnapshotTiers::RemoveEntryLocked(EntryId id) {
  Entry& entry = entries_.at(id);
  if (entry.host != nullptr) {
    host_used_ -= entry.host_bytes;
    entry.host_bytes = 0;
    entry.host = nullptr;
  }
  RemoveFileLocked(id);
  if (entry.named) {
    entry.named.reset();
    ++named_generation_;
  }
  MaybeEraseLocked(id);
}

void SnapshotTiers::DropExpiredLocked(absl::Time now) {
  std::vector<EntryId> expired;
  for (const auto& [id, entry] : entries_) {
    if (entry.named && entry.named->options.ttl != absl::InfiniteDuration() &&
        entry.named->created_at + entry.named->options.ttl <= now) {
      expired.push_back(id);
    }
  }
  for (EntryId id : expired) RemoveEntryLocked(id);
}

bool SnapshotTiers::MakeDiskRoomLocked(int64_t bytes, EntryId keep) {
  if (bytes > options_.disk_bytes) return false;
  const absl::Time now = clock_->Now();
  while (disk_used_ + bytes > options_.disk_bytes) {
    EntryId victim = 0;
    double lowest = 0;
    for (const auto& [id, entry] : entries_) {
      // A file being read stays until the read is done.
      if (!entry.on_disk || id == keep || entry.loading) continue;
      const double priority = PriorityLocked(entry, now);
      if (victim == 0 || priority < lowest) {
        victim = id;
        lowest = priority;
      }
    }
    if (victim == 0) return false;
    RemoveFileLocked(victim);
    if (MaybeEraseLocked(victim)) ++counters_.dropped;
  }
  return true;
}

void SnapshotTiers::QueueWriteLocked(EntryId id, std::shared_ptr<const Snapshot> snapshot) {
  Entry& entry = entries_.at(id);
  if (options_.disk_bytes <= 0 || entry.on_disk) return;
  const int64_t bytes =
      SnapshotFileBytes(*snapshot, entry.space, options_.identity,
                        SnapshotFileExtras{.retention = entry.retention, .named = entry.named});
  if (!MakeDiskRoomLocked(bytes, id)) {
    ++counters_.too_large;
    return;
  }
  entry.on_disk = true;
  entry.file_bytes = bytes;
  entry.writing = std::move(snapshot);
  disk_used_ += bytes;
  jobs_.push_back({.id = id, .write = true});
}

void SnapshotTiers::MakeHostRoomLocked(int64_t bytes, EntryId keep) {
  const absl::Time now = clock_->Now();
  while (host_used_ + bytes > options_.host_bytes) {
    EntryId victim = 0;
    double lowest = 0;
    for (const auto& [id, entry] : entries_) {
      if (entry.host == nullptr || id == keep || entry.loading) continue;
      const double priority = PriorityLocked(entry, now);
      if (victim == 0 || priority < lowest) {
        victim = id;
        lowest = priority;
      }
    }
    if (victim == 0) return;
    Entry& entry = entries_.at(victim);
    std::shared_ptr<const Snapshot> snapshot = std::move(entry.host);
    host_used_ -= entry.host_bytes;
    entry.host_bytes = 0;
    if (options_.disk_bytes > 0 && !entry.on_disk) {
      ++counters_.host_to_disk;
      QueueWriteLocked(victim, std::move(snapshot));
    }
    if (MaybeEraseLocked(victim)) ++counters_.dropped;
  }
}

void SnapshotTiers::Demote(std::string space, std::shared_ptr<const Snapshot> snapshot,
                           int64_t hits, RetentionClass retention,
                           std::optional<PrefixInfo> named) {
  // An encoder-decoder capture (BART) is not tiered: its entry is keyed by the encoder input,
  // which a tier's token index does not hold, and its cross state has no file form.
  if (snapshot == nullptr || snapshot->cross_attention() != nullptr) return;
  if (options_.host_bytes <= 0 && options_.disk_bytes <= 0) return;
  // With CUDA the host tier's copy leaves the device; on a CPU build this is the same snapshot.
  if (options_.host_bytes > 0 && !snapshot->keys(0).device().is_cpu()) {
    snapshot = OnDevice(std::move(snapshot), at::Device(at::kCPU));
    if (snapshot == nullptr) return;
  }
  absl::MutexLock lock(&mu_);
  EntryId id = FindExactLocked(space, snapshot->token_ids());
  if (id == 0) {
    id = AddLocked(std::move(space),
                   std::vector<int32_t>(snapshot->token_ids().begin(), snapshot->token_ids().end()),
                   hits);
  }
  Entry& entry = entries_.at(id);
  entry.hits = std::max(entry.hits, hits);
  entry.retention = retention;
  entry.last_used = clock_->Now();
  if (named) {
    entry.named = std::move(named);
    ++named_generation_;
  }
  const int64_t bytes = snapshot->bytes();
  if (entry.host == nullptr && bytes <= options_.host_bytes) {
    // Held first, so that making room (which may remove this entry's file) keeps the entry.
    entry.host = std::move(snapshot);
    entry.host_bytes = bytes;
    host_used_ += bytes;
    MakeHostRoomLocked(0, id);
    ++counters_.demotions;
  } else if (entry.host == nullptr && options_.disk_bytes > 0 && !snapshot->holds_states()) {
    // (State snapshots stay off the disk: the snapshot file holds per-token K/V only.)
    if (!entry.on_disk) QueueWriteLocked(id, std::move(snapshot));
    if (entry.on_disk) ++counters_.demotions;
  } else if (entry.host == nullptr) {
    ++counters_.too_large;
  }
  MaybeEraseLocked(id);
}

void SnapshotTiers::Persist(std::string space, std::shared_ptr<const Snapshot> snapshot,
                            int64_t hits, RetentionClass retention,
                            std::optional<PrefixInfo> named) {
  if (snapshot == nullptr || options_.disk_bytes <= 0 || snapshot->holds_states() ||
      snapshot->cross_attention() != nullptr) {
    return;
  }
  absl::MutexLock lock(&mu_);
  EntryId id = FindExactLocked(space, snapshot->token_ids());
  if (id == 0) {
    id = AddLocked(std::move(space),
                   std::vector<int32_t>(snapshot->token_ids().begin(), snapshot->token_ids().end()),
                   hits);
  }
  entries_.at(id).hits = std::max(entries_.at(id).hits, hits);
  entries_.at(id).retention = retention;
  if (named) {
    entries_.at(id).named = std::move(named);
    ++named_generation_;
  }
  QueueWriteLocked(id, std::move(snapshot));
  MaybeEraseLocked(id);
}

std::optional<TierMatch> SnapshotTiers::Find(std::string_view space,
                                             absl::Span<const int32_t> tokens, int64_t min_tokens,
                                             int64_t longer_than, bool allow_partial) {
  const int64_t max_length = static_cast<int64_t>(tokens.size()) - 1;
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now());
  std::optional<TierMatch> best;
  for (std::string_view visible : {space, std::string_view()}) {
    auto tree = trees_.find(visible);
    if (tree != trees_.end()) {
      TokenRadixTree::Match match = allow_partial
                                        ? tree->second.LongestPrefix(tokens, max_length)
                                        : tree->second.LongestStoredPrefix(tokens, max_length);
      if (!match.ids.empty() && match.length > longer_than && match.length >= min_tokens &&
          (!best || match.length > best->num_tokens)) {
        const Entry& entry = entries_.at(match.ids.front());
        best = TierMatch{.id = match.ids.front(),
                         .num_tokens = match.length,
                         .tier = entry.host != nullptr ? SnapshotTier::kHost : SnapshotTier::kDisk};
      }
    }
    if (visible.empty()) break;
  }
  return best;
}

void SnapshotTiers::Promote(uint64_t id) {
  std::shared_ptr<const Snapshot> host;
  std::string space;
  int64_t hits = 0;
  RetentionClass retention = RetentionClass::kNormal;
  std::optional<PrefixInfo> named;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.loading) return;
    Entry& entry = it->second;
    entry.loading = true;
    if (entry.host == nullptr && entry.writing != nullptr) {
      // Still on its way to disk: the snapshot in memory serves.
      host = entry.writing;
    } else if (entry.host == nullptr) {
      jobs_.push_back({.id = id, .write = false});
      return;
    } else {
      host = std::move(entry.host);
      host_used_ -= entry.host_bytes;
      entry.host_bytes = 0;
    }
    space = entry.space;
    hits = entry.hits;
    retention = entry.retention;
    named = entry.named;
  }
  // A device copy (with CUDA) runs outside the lock.
  std::shared_ptr<const Snapshot> promoted = OnDevice(host, at::Device(options_.device));
  absl::MutexLock lock(&mu_);
  ++counters_.host_promotions;
  ready_.push_back({.id = id,
                    .space = std::move(space),
                    .snapshot = std::move(promoted),
                    .hits = hits,
                    .retention = retention,
                    .from = SnapshotTier::kHost,
                    .named = std::move(named)});
}

bool SnapshotTiers::Pending(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.loading;
}

std::vector<PromotedSnapshot> SnapshotTiers::TakePromoted() {
  absl::MutexLock lock(&mu_);
  std::vector<PromotedSnapshot> taken;
  taken.swap(ready_);
  const absl::Time now = clock_->Now();
  for (PromotedSnapshot& p : taken) {
    if (auto it = entries_.find(p.id); it != entries_.end()) {
      // A name forgotten (deleted, registered again) while the load ran is not brought back.
      if (!it->second.named) p.named.reset();
      it->second.loading = false;
      ++it->second.hits;
      it->second.last_used = now;
      MaybeEraseLocked(p.id);
    }
  }
  std::erase_if(taken, [](const PromotedSnapshot& p) { return p.snapshot == nullptr; });
  return taken;
}

void SnapshotTiers::Run() {
  for (;;) {
    Job job;
    std::shared_ptr<const Snapshot> to_write;
    std::string path, space;
    std::vector<int32_t> tokens;
    int64_t hits = 0;
    RetentionClass retention = RetentionClass::kNormal;
    std::optional<PrefixInfo> named;
    {
      absl::MutexLock lock(&mu_);
      busy_ = false;
      auto has_job = [this]()
                         ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !jobs_.empty() || stopping_; };
      mu_.Await(absl::Condition(&has_job));
      if (jobs_.empty()) return;  // stopping, with every write done
      job = jobs_.front();
      jobs_.pop_front();
      auto it = entries_.find(job.id);
      if (it == entries_.end()) continue;
      Entry& entry = it->second;
      if (job.write && entry.writing == nullptr) continue;  // no longer wanted
      if (!job.write && stopping_) {
        entry.loading = false;
        MaybeEraseLocked(job.id);
        continue;
      }
      busy_ = true;
      to_write = entry.writing;
      path = PathOf(entry);
      space = entry.space;
      tokens = entry.tokens;
      hits = entry.hits;
      retention = entry.retention;
      named = entry.named;
    }
    if (job.write) {
      absl::Status written =
          WriteSnapshotFile(path, *to_write, space, hits, options_.identity,
                            SnapshotFileExtras{.retention = retention, .named = named});
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(job.id);
      const bool wanted = it != entries_.end() && it->second.writing == to_write;
      if (!written.ok()) {
        Log(absl::StrCat("prefix snapshot not kept on disk: ", written.message()));
        ++counters_.disk_write_failures;
        if (wanted) {
          it->second.writing = nullptr;
          RemoveFileLocked(job.id);
          MaybeEraseLocked(job.id);
        }
      } else if (wanted) {
        it->second.writing = nullptr;
        ++counters_.disk_writes;
      } else {
        // Dropped while it was written.
        std::error_code error;
        std::filesystem::remove(path, error);
      }
      continue;
    }
    absl::StatusOr<std::shared_ptr<const Snapshot>> read =
        ReadSnapshotFile(path, options_.identity, tokens);
    std::shared_ptr<const Snapshot> promoted;
    if (read.ok()) promoted = OnDevice(*std::move(read), at::Device(options_.device));
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(job.id);
    if (it == entries_.end()) continue;
    if (promoted == nullptr) {
      Log(absl::StrCat("refusing prefix snapshot file (removed): ",
                       read.ok() ? "cannot move it to the device" : read.status().message()));
      ++counters_.refused_files;
      it->second.loading = false;
      RemoveFileLocked(job.id);
      MaybeEraseLocked(job.id);
      continue;
    }
    ++counters_.disk_loads;
    ready_.push_back({.id = job.id,
                      .space = std::move(space),
                      .snapshot = std::move(promoted),
                      .hits = hits,
                      .retention = retention,
                      .from = SnapshotTier::kDisk,
                      .named = std::move(named)});
  }
}

std::vector<DemotedPrefix> SnapshotTiers::NamedEntries() {
  absl::MutexLock lock(&mu_);
  DropExpiredLocked(clock_->Now());
  std::vector<DemotedPrefix> named;
  for (const auto& [id, entry] : entries_) {
    if (!entry.named) continue;
    DemotedPrefix& d = named.emplace_back();
    d.info = *entry.named;
    d.info.hits = std::max(d.info.hits, entry.hits);
    d.info.num_tokens = static_cast<int64_t>(entry.tokens.size());
    d.info.referenced = false;
    d.space = entry.space;
    d.tokens = entry.tokens;
    d.tier = entry.host != nullptr ? SnapshotTier::kHost : SnapshotTier::kDisk;
  }
  std::sort(named.begin(), named.end(), [](const DemotedPrefix& a, const DemotedPrefix& b) {
    return a.info.name < b.info.name;
  });
  return named;
}

std::optional<PrefixInfo> SnapshotTiers::ForgetNamed(std::string_view name) {
  absl::MutexLock lock(&mu_);
  std::vector<EntryId> found;
  std::optional<PrefixInfo> info;
  for (const auto& [id, entry] : entries_) {
    if (entry.named && entry.named->name == name) {
      found.push_back(id);
      info = entry.named;
      info->hits = std::max(info->hits, entry.hits);
    }
  }
  for (EntryId id : found) RemoveEntryLocked(id);
  return info;
}

void SnapshotTiers::StorePromoted(PrefixStore& store, MemoryPressure& pressure) {
  for (PromotedSnapshot& promoted : TakePromoted()) {
    bool stored = false;
    if (pressure.MakeRoom(promoted.snapshot->bytes())) {
      if (promoted.named && store.PeekNamed(promoted.named->name) == nullptr) {
        promoted.named->hits = promoted.hits;
        stored = store.RestoreNamed(*promoted.named, promoted.snapshot);
      } else {
        stored = store.PutAutomatic(promoted.space, promoted.snapshot, promoted.retention,
                                    promoted.hits);
      }
    }
    if (!stored) {
      Demote(std::move(promoted.space), std::move(promoted.snapshot), promoted.hits,
             promoted.retention, std::move(promoted.named));
    }
  }
}

uint64_t SnapshotTiers::named_generation() {
  absl::MutexLock lock(&mu_);
  return named_generation_;
}

void SnapshotTiers::WaitIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return jobs_.empty() && !busy_; };
  mu_.Await(absl::Condition(&idle));
}

SnapshotTiersStats SnapshotTiers::stats() {
  absl::MutexLock lock(&mu_);
  SnapshotTiersStats stats = counters_;
  for (const auto& [id, entry] : entries_) {
    if (entry.host != nullptr) ++stats.host_entries;
    if (entry.on_disk) ++stats.disk_entries;
  }
  stats.host_bytes = host_used_;
  stats.disk_bytes = disk_used_;
  return stats;
}

}  // namespace kvserve::cache
