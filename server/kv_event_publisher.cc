// The KV-event publisher (see kv_event_publisher.h).
#include "server/kv_event_publisher.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/prefix_info.h"

namespace kvserve::server {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t FnvBytes(uint64_t h, const unsigned char* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= kFnvPrime;
  }
  return h;
}

// Little-endian bytes of `value`, whatever the host's order.
template <typename T>
uint64_t FnvLittleEndian(uint64_t h, T value) {
  const uint64_t v = static_cast<uint64_t>(value);
  unsigned char bytes[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
  return FnvBytes(h, bytes, sizeof(T));
}

KvEventBatch MakeBatch(uint64_t sequence, absl::Time time) {
  KvEventBatch batch;
  batch.sequence = sequence;
  batch.time = time;
  return batch;
}

KvBlockEvent MakeEvent(KvBlockEvent::Kind kind, uint64_t event_id, std::string space = "",
                       std::optional<int64_t> parent_hash = std::nullopt) {
  KvBlockEvent event;
  event.kind = kind;
  event.event_id = event_id;
  event.space = std::move(space);
  event.parent_hash = parent_hash;
  return event;
}

bool Visible(const KvBlockEvent& event, KvEventView view) {
  return view == KvEventView::kAll || event.kind == KvBlockEvent::Kind::kCleared ||
         event.space == cache::kSharedSpace;
}

KvEventBatch Filtered(const KvEventBatch& batch, KvEventView view) {
  if (view == KvEventView::kAll) return batch;
  KvEventBatch out = MakeBatch(batch.sequence, batch.time);
  for (const KvBlockEvent& e : batch.events) {
    if (Visible(e, view)) out.events.push_back(e);
  }
  return out;
}

}  // namespace

int64_t KvNamespaceSeed(std::string_view space) {
  return static_cast<int64_t>(
      FnvBytes(kFnvOffset, reinterpret_cast<const unsigned char*>(space.data()), space.size()));
}

int64_t KvBlockHash(int64_t parent_or_seed, absl::Span<const int32_t> block_tokens) {
  uint64_t h = FnvLittleEndian(kFnvOffset, static_cast<uint64_t>(parent_or_seed));
  for (int32_t t : block_tokens) h = FnvLittleEndian(h, static_cast<uint32_t>(t));
  return static_cast<int64_t>(h);
}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    KvEventPublisherOptions options) {
  if (options.buffer_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv events buffer_batches must be >= 1, got ", options.buffer_batches));
  }
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(options));
}

void KvEventPublisher::Consume(absl::Span<const cache::PrefixEvent> events) {
  std::vector<std::shared_ptr<Listener>> wake;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const cache::PrefixEvent& event : events) {
      buffer_.push_back(Apply(event, now));
      last_sequence_ = buffer_.back().sequence;
      while (static_cast<int64_t>(buffer_.size()) > options_.buffer_batches) buffer_.pop_front();
    }
    wake = LiveListenersLocked();
  }
  for (const std::shared_ptr<Listener>& listener : wake) listener->OnKvEvents();
}

std::vector<std::shared_ptr<KvEventPublisher::Listener>> KvEventPublisher::LiveListenersLocked() {
  std::vector<std::shared_ptr<Listener>> live;
  auto gone = [&live](const std::weak_ptr<Listener>& weak) {
    std::shared_ptr<Listener> listener = weak.lock();
    if (listener == nullptr) return true;
    live.push_back(std::move(listener));
    return false;
  };
  listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(), gone), listeners_.end());
  return live;
}

void KvEventPublisher::Close() {
  std::vector<std::shared_ptr<Listener>> wake;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    wake = LiveListenersLocked();
  }
  for (const std::shared_ptr<Listener>& listener : wake) listener->OnKvEvents();
}

KvEventBatch KvEventPublisher::Apply(const cache::PrefixEvent& event, absl::Time now) {
  KvEventBatch batch = MakeBatch(options_.sequence_base + event.sequence, now);
  switch (event.kind) {
    case cache::PrefixEventKind::kCleared: {
      blocks_.clear();
      entries_.clear();
      batch.events.push_back(MakeEvent(KvBlockEvent::Kind::kCleared, next_event_id_++));
      break;
    }
    case cache::PrefixEventKind::kStored: {
      std::vector<int64_t>& hashes = entries_[event.entry_id];
      hashes.clear();
      const size_t num_blocks = event.tokens.size() / kKvBlockSize;
      const absl::Span<const int32_t> tokens(event.tokens);
      int64_t parent_or_seed = KvNamespaceSeed(event.space);
      KvBlockEvent* run = nullptr;  // the stored event the next new block extends
      for (size_t i = 0; i < num_blocks; ++i) {
        const absl::Span<const int32_t> block = tokens.subspan(i * kKvBlockSize, kKvBlockSize);
        const int64_t hash = KvBlockHash(parent_or_seed, block);
        const std::optional<int64_t> parent =
            i == 0 ? std::nullopt : std::optional<int64_t>(parent_or_seed);
        hashes.push_back(hash);
        BlockState& state = blocks_[hash];
        if (state.refs++ > 0) {
          run = nullptr;
        } else {
          state.parent = parent;
          state.tokens.assign(block.begin(), block.end());
          state.space = event.space;
          state.depth = static_cast<int>(i);
          if (run == nullptr) {
            batch.events.push_back(
                MakeEvent(KvBlockEvent::Kind::kStored, next_event_id_++, event.space, parent));
            run = &batch.events.back();
          }
          run->blocks.push_back(KvBlock{.hash = hash, .tokens = state.tokens});
        }
        parent_or_seed = hash;
      }
      break;
    }
    case cache::PrefixEventKind::kRemoved: {
      auto it = entries_.find(event.entry_id);
      if (it == entries_.end()) break;
      KvBlockEvent removed = MakeEvent(KvBlockEvent::Kind::kRemoved, 0, event.space);
      // Children first: a router never holds a block whose parent it dropped.
      for (auto hash = it->second.rbegin(); hash != it->second.rend(); ++hash) {
        auto block = blocks_.find(*hash);
        if (block == blocks_.end()) continue;
        if (--block->second.refs == 0) {
          blocks_.erase(block);
          removed.removed.push_back(*hash);
        }
      }
      entries_.erase(it);
      if (!removed.removed.empty()) {
        removed.event_id = next_event_id_++;
        batch.events.push_back(std::move(removed));
      }
      break;
    }
  }
  return batch;
}

KvEventRead KvEventPublisher::Read(uint64_t next, KvEventView view) const {
  absl::MutexLock lock(&mu_);
  KvEventRead read;
  const uint64_t oldest = buffer_.empty() ? last_sequence_ + 1 : buffer_.front().sequence;
  if (next == last_sequence_ + 1) {
    if (closed_) read.kind = KvEventRead::Kind::kClosed;
    return read;  // kNone
  }
  if (next > last_sequence_ + 1 || next < oldest) {
    read.kind = KvEventRead::Kind::kResync;
    read.first_missing = next;
    read.last_missing = next < oldest ? oldest - 1 : last_sequence_;
    read.batch = SnapshotLocked(view);
    return read;
  }
  read.kind = KvEventRead::Kind::kBatch;
  read.batch = Filtered(buffer_[next - oldest], view);
  return read;
}

KvEventBatch KvEventPublisher::Snapshot(KvEventView view) const {
  absl::MutexLock lock(&mu_);
  return SnapshotLocked(view);
}

KvEventBatch KvEventPublisher::SnapshotLocked(KvEventView view) const {
  KvEventBatch batch = MakeBatch(last_sequence_, absl::Now());
  batch.events.push_back(MakeEvent(KvBlockEvent::Kind::kCleared, 0));
  std::vector<std::pair<int, int64_t>> order;  // (depth, hash): parents before children
  for (const auto& [hash, state] : blocks_) {
    if (view == KvEventView::kAll || state.space == cache::kSharedSpace) {
      order.emplace_back(state.depth, hash);
    }
  }
  std::sort(order.begin(), order.end());
  for (const auto& [depth, hash] : order) {
    const BlockState& state = blocks_.at(hash);
    KvBlockEvent stored = MakeEvent(KvBlockEvent::Kind::kStored, 0, state.space, state.parent);
    stored.blocks.push_back(KvBlock{.hash = hash, .tokens = state.tokens});
    batch.events.push_back(std::move(stored));
  }
  return batch;
}

void KvEventPublisher::AddListener(std::weak_ptr<Listener> listener) {
  absl::MutexLock lock(&mu_);
  listeners_.push_back(std::move(listener));
}

uint64_t KvEventPublisher::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return last_sequence_;
}

uint64_t KvEventPublisher::oldest_sequence() const {
  absl::MutexLock lock(&mu_);
  return buffer_.empty() ? 0 : buffer_.front().sequence;
}

int64_t KvEventPublisher::num_blocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(blocks_.size());
}

}  // namespace kvserve::server
