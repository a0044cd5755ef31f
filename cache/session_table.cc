// The open sessions of iterative chat (see session_table.h).
#include "cache/session_table.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cache/kv_cache.h"
#include "cache/retention.h"

namespace kvserve::cache {
namespace {

int64_t CommonPrefixLength(absl::Span<const int32_t> a, absl::Span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

absl::Status NotOpen(const std::string& field, const std::string& id) {
  // Ids are not validated on lookup, so a huge one is quoted short.
  constexpr size_t kMaxQuoted = 64;
  const std::string quoted = id.size() <= kMaxQuoted ? id
                                                     : absl::StrCat(id.substr(0, kMaxQuoted),
                                                                    "... (", id.size(), " bytes)");
  return absl::NotFoundError(
      absl::StrCat(field, ": no open session '", quoted, "' (closed, expired or never created)"));
}

}  // namespace

struct SessionTable::Session {
  std::string id;
  std::shared_ptr<const SessionOptions> options;
  uint64_t serial = 0;  // creation order
  // Prompts and answers so far (the prefix's tokens first).
  std::vector<int32_t> history;
  // K/V of the first cache->SeqLength() tokens of the history (more after a rollback that
  // could not crop it); null: none (no turn yet, evicted, or a turn failed).
  std::unique_ptr<KvCache> cache;
  bool offloaded = false;               // moved to the host while idle
  std::optional<uint64_t> turn;         // the running turn
  std::vector<int32_t> history_before;  // the history when the running turn began
  bool closed = false;                  // Close while a turn ran: erased when it ends
  int64_t turns = 0;
  int64_t evictions = 0;
  absl::Time created_at;
  absl::Time last_used;
};

std::shared_ptr<const SessionOptions> SessionDirectory::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second;
}

void SessionDirectory::Set(const std::string& id, std::shared_ptr<const SessionOptions> options) {
  absl::MutexLock lock(&mu_);
  if (options == nullptr) {
    entries_.erase(id);
  } else {
    entries_[id] = std::move(options);
  }
}

absl::StatusOr<std::unique_ptr<SessionTable>> SessionTable::Create(
    const SessionTableOptions& options, const base::Clock* clock, RunningMemory running_memory) {
  if (clock == nullptr) return absl::InvalidArgumentError("the session table needs a clock");
  if (options.cache_bytes < 1) {
    return absl::InvalidArgumentError("--session-cache-bytes must be >= 1");
  }
  if (options.idle_offload < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session-idle-offload-seconds must be >= 0");
  }
  if (options.default_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session-ttl-seconds must be > 0");
  }
  if (options.max_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session-max-ttl-seconds must be > 0");
  }
  if (options.max_sessions < 1) return absl::InvalidArgumentError("--max-sessions must be >= 1");
  if (options.retention_half_life <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--prefix-retention-half-life-seconds must be > 0");
  }
  if (options.max_sessions_per_tenant < 0) {
    return absl::InvalidArgumentError("--tenant-max-sessions must be >= 0");
  }
  return std::unique_ptr<SessionTable>(new SessionTable(options, clock, std::move(running_memory)));
}

SessionTable::SessionTable(const SessionTableOptions& options, const base::Clock* clock,
                           RunningMemory running_memory)
    : options_(options), clock_(clock), running_memory_(std::move(running_memory)) {}

SessionTable::~SessionTable() = default;

SessionTable::Session* SessionTable::Find(const std::string& id, std::string_view tenant) const {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->closed) return nullptr;
  if (!tenant.empty() && it->second->options->tenant != tenant) return nullptr;
  return it->second.get();
}

std::string SessionTable::NewId() const {
  while (true) {
    uint8_t bytes[16];
    size_t filled = 0;
    while (filled < sizeof(bytes)) {
      const ssize_t got = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
      if (got < 0 && errno == EINTR) continue;
      KVSERVE_CHECK(got > 0) << "getrandom failed: errno " << errno;
      filled += static_cast<size_t>(got);
    }
    std::string id;
    id.reserve(2 * sizeof(bytes));
    for (uint8_t b : bytes) absl::StrAppend(&id, absl::Hex(b, absl::kZeroPad2));
    if (!sessions_.contains(id)) return id;
  }
}

SessionInfo SessionTable::InfoOf(const Session& session) const {
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
    if (running_memory_) info.memory = running_memory_(*session.turn);
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

absl::StatusOr<SessionInfo> SessionTable::Open(SessionOptions options) {
  if (!options.cache.use_cache()) {
    return absl::InvalidArgumentError(
        "options.cache.use_cache: a session keeps a cache; it cannot be false");
  }
  if (options.ttl <= absl::ZeroDuration()) options.ttl = options_.default_ttl;
  // A session cannot outlive the cap, however long it asks to live.
  options.ttl = std::min(options.ttl, options_.max_ttl);
  int64_t open = 0;
  int64_t own = 0;
  for (const auto& [id, s] : sessions_) {
    if (s->closed) continue;
    ++open;
    if (s->options->tenant == options.tenant) ++own;
  }
  if (options_.max_sessions_per_tenant > 0 && own >= options_.max_sessions_per_tenant) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this tenant has ", own, " sessions open, its limit (--tenant-max-sessions ",
                     options_.max_sessions_per_tenant, "); close one or wait for one to expire"));
  }
  if (open >= options_.max_sessions) {
    // Other tenants' counts are not the caller's business: only the limit is named.
    return absl::ResourceExhaustedError(
        absl::StrCat("the server holds its limit of ", options_.max_sessions,
                     " open sessions (--max-sessions); close one or wait for one to expire"));
  }
  auto session = std::make_unique<Session>();
  session->id = NewId();
  session->history = options.prefix_tokens;
  session->options = std::make_shared<const SessionOptions>(std::move(options));
  session->serial = next_serial_++;
  session->created_at = clock_->Now();
  session->last_used = session->created_at;
  directory_.Set(session->id, session->options);
  Session& stored = *session;
  sessions_.emplace(session->id, std::move(session));
  next_maintenance_ = absl::InfinitePast();
  return InfoOf(stored);
}

absl::StatusOr<SessionInfo> SessionTable::Get(const std::string& id,
                                              std::string_view tenant) const {
  const Session* session = Find(id, tenant);
  if (session == nullptr) return NotOpen("id", id);
  return InfoOf(*session);
}

std::vector<SessionInfo> SessionTable::List(std::string_view tenant) const {
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

absl::Status SessionTable::Close(const std::string& id, std::string_view tenant) {
  Session* session = Find(id, tenant);
  if (session == nullptr) return NotOpen("id", id);
  if (session->turn) {
    // The running turn keeps its cache until it ends; EndTurn erases the session then.
    session->closed = true;
    directory_.Set(id, nullptr);
    return absl::OkStatus();
  }
  Erase(id);
  return absl::OkStatus();
}

absl::StatusOr<SessionInfo> SessionTable::Rollback(const std::string& id, int64_t n,
                                                   std::string_view tenant) {
  Session* session = Find(id, tenant);
  if (session == nullptr) return NotOpen("id", id);
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
  next_maintenance_ = absl::InfinitePast();
  return InfoOf(*session);
}

void SessionTable::EvictCache(Session& session) {
  if (session.cache == nullptr) return;
  session.cache.reset();
  session.offloaded = false;
  ++session.evictions;
  ++counts_.evictions;
}

void SessionTable::Erase(const std::string& id) {
  sessions_.erase(id);
  directory_.Set(id, nullptr);
}

int64_t SessionTable::IdleDeviceBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : sessions_) {
    if (s->cache != nullptr && !s->turn) bytes += s->cache->Memory().device_bytes;
  }
  return bytes;
}

void SessionTable::SortByRetention(std::vector<Session*>& sessions) const {
  const absl::Time now = clock_->Now();
  std::vector<std::pair<double, Session*>> ranked;
  ranked.reserve(sessions.size());
  for (Session* s : sessions) {
    ranked.emplace_back(RetentionPriority(RetentionClass::kNormal, s->turns, s->last_used, now,
                                          options_.retention_half_life),
                        s);
  }
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    if (a.second->last_used != b.second->last_used) {
      return a.second->last_used < b.second->last_used;
    }
    return a.second->serial < b.second->serial;
  });
  for (size_t i = 0; i < ranked.size(); ++i) sessions[i] = ranked[i].second;
}

std::optional<double> SessionTable::LowestIdlePriority() const {
  const absl::Time now = clock_->Now();
  std::optional<double> lowest;
  for (const auto& [id, s] : sessions_) {
    if (s->cache == nullptr || s->turn || s->cache->Memory().device_bytes <= 0) continue;
    const double priority = RetentionPriority(RetentionClass::kNormal, s->turns, s->last_used, now,
                                              options_.retention_half_life);
    if (!lowest || priority < *lowest) lowest = priority;
  }
  return lowest;
}

int64_t SessionTable::OffloadIdle(int64_t bytes) {
  std::vector<Session*> idle;
  for (auto& [id, s] : sessions_) {
    if (s->cache != nullptr && !s->turn && s->cache->Memory().device_bytes > 0) {
      idle.push_back(s.get());
    }
  }
  SortByRetention(idle);
  int64_t freed = 0;
  for (Session* s : idle) {
    if (freed >= bytes) break;
    freed += s->cache->ConvertToOffloaded();
    s->offloaded = true;
  }
  return freed;
}

void SessionTable::Maintain() {
  const absl::Time now = clock_->Now();
  if (now < next_maintenance_) return;
  next_maintenance_ = now + absl::Milliseconds(100);
  std::vector<std::string> expired;
  std::vector<Session*> idle;
  for (auto& [id, s] : sessions_) {
    if (s->turn || s->closed) continue;
    if (s->options->ttl != absl::InfiniteDuration() && now - s->last_used >= s->options->ttl) {
      expired.push_back(id);
      continue;
    }
    if (s->cache == nullptr) continue;
    if (!s->offloaded && now - s->last_used >= options_.idle_offload &&
        s->cache->Memory().device_bytes > 0) {
      s->cache->ConvertToOffloaded();
      s->offloaded = true;
    }
    idle.push_back(s.get());
  }
  for (const std::string& id : expired) {
    ++counts_.expirations;
    Erase(id);
  }
  int64_t total = 0;
  for (const Session* s : idle) total += s->cache->Memory().total();
  if (total <= options_.cache_bytes) return;
  // Lowest retention priority first.
  SortByRetention(idle);
  for (Session* s : idle) {
    if (total <= options_.cache_bytes) break;
    total -= s->cache->Memory().total();
    EvictCache(*s);
  }
}

SessionStats SessionTable::Stats() const {
  SessionStats stats = counts_;
  for (const auto& [id, s] : sessions_) {
    if (s->closed) continue;
    ++stats.live;
    if (s->turn) ++stats.running;
    if (s->cache == nullptr) continue;
    if (s->offloaded) ++stats.offloaded;
    stats.memory += s->cache->Memory();
  }
  return stats;
}

absl::Status SessionTable::BeginTurn(const std::string& id, uint64_t turn, bool append,
                                     absl::Span<const int32_t> first_turn_prompt,
                                     int64_t max_new_tokens, std::vector<int32_t>* prompt,
                                     CacheSpec* cache) {
  Session* session = Find(id);
  if (session == nullptr) return NotOpen("session", id);
  if (session->turn) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session: session '", id, "' has a turn running; send the next turn once it has finished"));
  }
  const int64_t history = static_cast<int64_t>(session->history.size());
  std::vector<int32_t> whole;
  if (append) {
    const absl::Span<const int32_t> added =
        session->history.empty() ? first_turn_prompt : absl::Span<const int32_t>(*prompt);
    whole = session->history;
    whole.insert(whole.end(), added.begin(), added.end());
  } else {
    whole = *prompt;
  }
  if (whole.empty()) {
    return absl::InvalidArgumentError("a sequence needs at least one prompt token");
  }
  const int64_t total = static_cast<int64_t>(whole.size()) + max_new_tokens;
  if (options_.max_positions > 0 && total > options_.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input: the session's conversation (", history, " tokens before this turn, ", whole.size(),
        " with it) and max_new_tokens ", max_new_tokens, " exceed the model's context of ",
        options_.max_positions, " tokens; roll the session back or start a new one"));
  }
  const CacheSpec& spec = session->options->cache;
  if (spec.is_static() && spec.max_cache_len && total - 1 > *spec.max_cache_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input: the session's conversation with this turn (", whole.size(),
        " tokens) and max_new_tokens ", max_new_tokens,
        " exceed its static cache's max_cache_len of ", *spec.max_cache_len, " tokens"));
  }
  *prompt = std::move(whole);
  *cache = spec;
  session->turn = turn;
  session->history_before = session->history;
  return absl::OkStatus();
}

SessionReuse SessionTable::ChooseReuse(const std::string& id,
                                       absl::Span<const int32_t> prompt) const {
  SessionReuse reuse;
  const Session* session = Find(id);
  if (session == nullptr) return reuse;
  if (session->cache == nullptr) {
    if (session->evictions > 0 && !session->history.empty()) {
      reuse.reason = "the session's cache was evicted";
    }
    return reuse;
  }
  reuse.device_bytes = session->cache->Memory().device_bytes;
  const int64_t held = session->cache->SeqLength();
  // The last prompt token is always computed: its logits choose the first new token.
  const int64_t common = std::min({CommonPrefixLength(prompt, session->history), held,
                                   static_cast<int64_t>(prompt.size()) - 1});
  if (common < held) {
    if (absl::Status s = session->cache->CheckCrop(-(held - common)); !s.ok()) {
      reuse.reason =
          absl::StrCat("the session's cache cannot be cropped back ", held - common,
                       " tokens to the common prefix of ", common, " tokens: ", s.message());
      return reuse;
    }
  }
  reuse.num_tokens = common;
  return reuse;
}

std::unique_ptr<KvCache> SessionTable::TakeCache(const std::string& id) {
  Session* session = Find(id);
  if (session == nullptr || session->cache == nullptr) return nullptr;
  ++counts_.hits;
  session->offloaded = false;
  return std::move(session->cache);
}

void SessionTable::DropCache(const std::string& id) {
  Session* session = Find(id);
  if (session == nullptr) return;
  if (session->turns > 0) ++counts_.misses;
  session->cache.reset();
  session->offloaded = false;
}

void SessionTable::EndTurn(const std::string& id, std::unique_ptr<KvCache> cache,
                           absl::Span<const int32_t> tokens, bool keep, bool allocated) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& session = *it->second;
  session.turn.reset();
  session.last_used = clock_->Now();
  ++session.turns;
  next_maintenance_ = absl::InfinitePast();
  if (session.closed) {
    Erase(id);
    return;
  }
  if (!allocated) return;
  if (keep && cache != nullptr && !tokens.empty() &&
      cache->SeqLength() <= static_cast<int64_t>(tokens.size())) {
    session.cache = std::move(cache);
    session.history.assign(tokens.begin(), tokens.end());
  } else {
    session.cache.reset();
    session.history = std::move(session.history_before);
  }
  session.history_before.clear();
}

}  // namespace kvserve::cache
