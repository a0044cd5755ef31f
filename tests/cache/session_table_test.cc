// Tests of SessionTable on its own: opening (limits, per-tenant limits, the TTL cap, ids that
// tell nothing of each other), tenancy of every client call, the directory, and turns' history
// and cache hand-over. Turns that run steps are in kv_cache_manager_test.cc.
#include "cache/session_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cache/kv_cache.h"

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kStart = absl::FromUnixSeconds(7000);

CacheSpec Dynamic() { return *CacheSpec::Parse(""); }

class SessionTableTest : public ::testing::Test {
 protected:
  std::unique_ptr<SessionTable> Make(SessionTableOptions options = {}) {
    absl::StatusOr<std::unique_ptr<SessionTable>> table =
        SessionTable::Create(options, &clock_, nullptr);
    EXPECT_TRUE(table.ok()) << table.status();
    return table.ok() ? std::move(*table) : nullptr;
  }

  absl::StatusOr<SessionInfo> Open(SessionTable& table, const std::string& tenant,
                                   absl::Duration ttl = absl::ZeroDuration()) {
    SessionOptions options;
    options.cache = Dynamic();
    options.tenant = tenant;
    options.ttl = ttl;
    return table.Open(options);
  }

  base::FakeClock clock_{kStart};
};

TEST_F(SessionTableTest, CreateValidatesOptions) {
  auto error = [this](SessionTableOptions options) {
    return std::string(SessionTable::Create(options, &clock_, nullptr).status().message());
  };
  SessionTableOptions o;
  o.cache_bytes = 0;
  EXPECT_THAT(error(o), HasSubstr("--session-cache-bytes"));
  o = {};
  o.default_ttl = absl::ZeroDuration();
  EXPECT_THAT(error(o), HasSubstr("--session-ttl-seconds"));
  o = {};
  o.max_ttl = absl::ZeroDuration();
  EXPECT_THAT(error(o), HasSubstr("--session-max-ttl-seconds"));
  o = {};
  o.max_sessions = 0;
  EXPECT_THAT(error(o), HasSubstr("--max-sessions"));
  o = {};
  o.max_sessions_per_tenant = -1;
  EXPECT_THAT(error(o), HasSubstr("--tenant-max-sessions"));
  EXPECT_FALSE(SessionTable::Create({}, nullptr, nullptr).ok());
}

// splitmix64's output function and its inverse: an id generator built on it gives away its
// state with every id.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
uint64_t UnXorShift(uint64_t y, int k) {
  uint64_t x = y;
  for (int i = 0; i < 64 / k + 1; ++i) x = y ^ (x >> k);
  return x;
}
uint64_t Inverse(uint64_t odd) {
  uint64_t inverse = odd;
  for (int i = 0; i < 6; ++i) inverse *= 2 - odd * inverse;
  return inverse;
}
uint64_t UnMix(uint64_t out) {
  uint64_t z = UnXorShift(out, 31) * Inverse(0x94D049BB133111EBULL);
  z = UnXorShift(z, 27) * Inverse(0xBF58476D1CE4E5B9ULL);
  return UnXorShift(z, 30);
}

// One id does not give the next: what a splitmix64 counter would produce from the state the
// first id reveals is not what the table hands out.
TEST_F(SessionTableTest, IdsAreRandomAndTellNothingOfEachOther) {
  ASSERT_EQ(UnMix(Mix(12345)), 12345u);  // the inversion itself works
  auto table = Make();
  absl::StatusOr<SessionInfo> first = Open(*table, "t");
  absl::StatusOr<SessionInfo> second = Open(*table, "t");
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first->id.size(), 32u);
  ASSERT_EQ(second->id.size(), 32u);
  EXPECT_NE(first->id, second->id);
  uint64_t half = 0;
  ASSERT_TRUE(absl::SimpleHexAtoi(first->id.substr(0, 16), &half));
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  const uint64_t state = UnMix(half);
  const std::string predicted = absl::StrCat(absl::Hex(Mix(state + 2 * kGolden), absl::kZeroPad16),
                                             absl::Hex(Mix(state + 3 * kGolden), absl::kZeroPad16));
  EXPECT_NE(second->id, predicted);
  const std::string own_half = absl::StrCat(absl::Hex(Mix(state + kGolden), absl::kZeroPad16));
  EXPECT_NE(first->id.substr(16), own_half);
}

// No tenant can hold every session: each has its own limit, and no session outlives the cap
// whatever TTL it asks for (never expiring included).
TEST_F(SessionTableTest, TenantLimitsAndTheTtlCapKeepOneTenantFromHoldingEverything) {
  SessionTableOptions options;
  options.max_sessions = 3;
  options.max_sessions_per_tenant = 2;
  options.max_ttl = absl::Hours(1);
  auto table = Make(options);
  ASSERT_TRUE(Open(*table, "greedy", absl::Seconds(int64_t{1} << 40)).ok());
  ASSERT_TRUE(Open(*table, "greedy", absl::InfiniteDuration()).ok());
  absl::StatusOr<SessionInfo> third = Open(*table, "greedy");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("--tenant-max-sessions 2"));
  absl::StatusOr<SessionInfo> other = Open(*table, "other");
  ASSERT_TRUE(other.ok()) << other.status();
  // The server's own limit names no other tenant's count.
  absl::StatusOr<SessionInfo> full = Open(*table, "third");
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("--max-sessions"));
  EXPECT_THAT(full.status().message(), Not(HasSubstr("greedy")));
  for (const SessionInfo& s : table->List("greedy")) {
    EXPECT_EQ(s.options.ttl, absl::Hours(1));
    EXPECT_EQ(s.expires_at, kStart + absl::Hours(1));
  }
  clock_.Advance(absl::Hours(1));
  table->Maintain();
  EXPECT_TRUE(table->List("greedy").empty());
  EXPECT_EQ(table->Stats().expirations, 3);  // "other" too, after its default 30 minutes
  EXPECT_TRUE(Open(*table, "third").ok());
}

TEST_F(SessionTableTest, AnotherTenantsSessionIsAsAbsentAsOneNeverOpened) {
  auto table = Make();
  absl::StatusOr<SessionInfo> mine = Open(*table, "a");
  ASSERT_TRUE(mine.ok());
  const std::string id = mine->id;
  EXPECT_TRUE(table->Get(id, "a").ok());
  EXPECT_EQ(table->Get(id, "b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Get("nope", "a").status().message(),
            "id: no open session 'nope' (closed, expired or never created)");
  EXPECT_TRUE(table->List("b").empty());
  EXPECT_EQ(table->Close(id, "b").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Rollback(id, 1, "b").status().code(), absl::StatusCode::kNotFound);
  ASSERT_NE(table->directory().Find(id), nullptr);
  EXPECT_EQ(table->directory().Find(id)->tenant, "a");
  EXPECT_TRUE(table->Close(id, "a").ok());
  EXPECT_EQ(table->directory().Find(id), nullptr);
}

TEST_F(SessionTableTest, ATurnAppendsToTheHistoryAndGetsItBackWhenItFails) {
  auto table = Make({.max_positions = 32});
  absl::StatusOr<SessionInfo> s = Open(*table, "a");
  ASSERT_TRUE(s.ok());
  std::vector<int32_t> prompt = {5, 6};
  CacheSpec spec;
  ASSERT_TRUE(table->BeginTurn(s->id, 1, /*append=*/true, {1, 5, 6}, 4, &prompt, &spec).ok());
  EXPECT_THAT(prompt, ElementsAre(1, 5, 6));  // the first turn's own start
  EXPECT_EQ(spec.implementation, CacheImplementation::kDynamic);
  std::vector<int32_t> again = {7};
  EXPECT_EQ(table->BeginTurn(s->id, 2, true, {1, 7}, 4, &again, &spec).code(),
            absl::StatusCode::kFailedPrecondition);
  auto cache = *KvCache::CreateDynamic({LayerSpec{}});
  table->EndTurn(s->id, std::move(cache), {1, 5, 6, 9}, /*keep=*/true, /*allocated=*/true);
  EXPECT_EQ(table->Get(s->id)->num_tokens, 4);
  EXPECT_EQ(table->Get(s->id)->turns, 1);
  // A turn that fails after it started leaves the history as it was and drops the cache.
  ASSERT_TRUE(table->BeginTurn(s->id, 3, true, {1, 7}, 4, &again, &spec).ok());
  EXPECT_THAT(again, ElementsAre(1, 5, 6, 9, 7));
  table->EndTurn(s->id, nullptr, {}, /*keep=*/false, /*allocated=*/true);
  EXPECT_EQ(table->Get(s->id)->num_tokens, 4);
  EXPECT_EQ(table->Get(s->id)->state, SessionState::kEmpty);
  // The context bounds the whole conversation.
  std::vector<int32_t> long_turn(20, 3);
  absl::Status refused = table->BeginTurn(s->id, 4, true, {}, 10, &long_turn, &spec);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("exceed the model's context of 32"));
  std::vector<int32_t> empty;
  EXPECT_EQ(table->BeginTurn("nope", 5, true, {}, 1, &empty, &spec).code(),
            absl::StatusCode::kNotFound);
}

// Idle caches leave (to the host under memory pressure) in the prefix snapshots' retention
// order, the session's turns counting as its hits: a session used often outlives a more recent
// one used once.
TEST_F(SessionTableTest, IdleCachesAreOffloadedInRetentionOrder) {
  auto table = Make({.max_positions = 64});
  auto run_turns = [&](const std::string& id, int n, uint64_t first_turn) {
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> prompt = {5};
      CacheSpec spec;
      ASSERT_TRUE(table->BeginTurn(id, first_turn + i, true, {1, 5}, 4, &prompt, &spec).ok());
      auto cache = *KvCache::CreateDynamic({LayerSpec{}});
      const int64_t n_tokens = static_cast<int64_t>(prompt.size());
      at::Tensor kv = at::ones({1, 1, n_tokens, 2});
      ASSERT_TRUE(cache->Update(0, kv, kv).ok());
      table->EndTurn(id, std::move(cache), prompt, /*keep=*/true, /*allocated=*/true);
    }
  };
  absl::StatusOr<SessionInfo> often = Open(*table, "a");
  absl::StatusOr<SessionInfo> once = Open(*table, "a");
  ASSERT_TRUE(often.ok() && once.ok());
  run_turns(often->id, 3, 10);
  clock_.Advance(absl::Seconds(1));
  run_turns(once->id, 1, 20);
  ASSERT_GT(table->IdleDeviceBytes(), 0);
  // One byte to free: one session goes, the one used once (least recently used would have
  // been the other).
  EXPECT_GT(table->OffloadIdle(1), 0);
  EXPECT_EQ(table->Get(once->id)->state, SessionState::kOffloaded);
  EXPECT_EQ(table->Get(often->id)->state, SessionState::kIdle);
}

}  // namespace
}  // namespace kvserve::cache
