// Tests of PrefixRegistrar over a real KvCacheManager and a recording persistence: records
// follow the store's order exactly (the journal's order is the catalog's), replies wait for
// durability, and a change that cannot be recorded is undone, registrations and deletions alike.
#include "server/prefix_registrar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/kv_cache.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Records what it is asked to record; the test decides when each is durable, and how.
class RecordingPersistence final : public PrefixPersistence {
 public:
  struct Record {
    std::string what;  // "put NAME xN" or "delete NAME"
    Done done;
  };
  void RecordPut(const std::string& name, std::vector<int32_t> token_ids,
                 const cache::NamedPrefixOptions&, absl::Time, Done done) override {
    records.push_back({absl::StrCat("put ", name, " x", token_ids.size()), std::move(done)});
  }
  void RecordDelete(const std::string& name, Done done) override {
    records.push_back({absl::StrCat("delete ", name), std::move(done)});
  }
  std::vector<std::string> Whats() const {
    std::vector<std::string> whats;
    for (const Record& r : records) whats.push_back(r.what);
    return whats;
  }
  // Record i becomes durable (or fails with `status`).
  void Finish(size_t i, absl::Status status = absl::OkStatus()) {
    if (records[i].done) records[i].done(status);
  }
  std::vector<Record> records;
};

class PrefixRegistrarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache::KvCacheManagerOptions options;
    options.prefix_cache_bytes = 3 * 4 * 16;  // three 4-token snapshots of 16 bytes a token
    cache::KvModelShape shape{.layers = {cache::LayerSpec{}},
                              .num_kv_heads = 1,
                              .head_dim = 2,
                              .bytes_per_element = 4,
                              .fingerprint = "m"};
    kv_ = *cache::KvCacheManager::Create(options, std::move(shape), &clock_);
    registrar_ = std::make_unique<PrefixRegistrar>(kv_.get(), &persistence_,
                                                   [this](std::function<void()> work) {
                                                     posted_.push_back(std::move(work));
                                                     return true;
                                                   });
  }

  // A whole registration of `tokens` under `name`, its reply recorded in `replies_`.
  void Register(const std::string& name, std::vector<int32_t> tokens, bool pinned = true) {
    const cache::SequenceId id = next_id_++;
    cache::SequenceRequest r;
    r.prompt = tokens;
    r.registration = true;
    r.registration_name = name;
    r.registration_options.pinned = pinned;
    ASSERT_TRUE(kv_->Add(id, std::move(r)).ok());
    ASSERT_EQ(kv_->CanAdmit(id, {}).decision, cache::Admission::Decision::kAdmit);
    absl::StatusOr<cache::Allocation> a = kv_->Allocate(id);
    ASSERT_TRUE(a.ok());
    const at::Tensor k = at::ones({1, 1, static_cast<int64_t>(tokens.size()), 2});
    ASSERT_TRUE(a->cache->Update(0, k, -k).ok());
    absl::StatusOr<cache::PrefixInfo> stored = kv_->CompleteRegistration(id);
    kv_->Release(id);
    kv_->Maintain();
    registrar_->Stored(std::move(stored), [this, name](absl::StatusOr<cache::PrefixInfo> info) {
      replies_.push_back(absl::StrCat("register ", name, ": ", info.status().ToString()));
    });
  }
  void Delete(const std::string& name) {
    registrar_->Delete(name, [this, name](absl::Status status) {
      replies_.push_back(absl::StrCat("delete ", name, ": ", status.ToString()));
    });
  }
  // Runs what the persistence's callbacks posted to the engine thread.
  void RunPosted() {
    std::vector<std::function<void()>> posted;
    posted.swap(posted_);
    for (auto& work : posted) work();
  }
  bool Listed(const std::string& name) { return kv_->catalog().Get()->contains(name); }

  base::FakeClock clock_{absl::FromUnixSeconds(100)};
  std::unique_ptr<cache::KvCacheManager> kv_;
  RecordingPersistence persistence_;
  std::unique_ptr<PrefixRegistrar> registrar_;
  std::vector<std::function<void()>> posted_;
  std::vector<std::string> replies_;
  cache::SequenceId next_id_ = 1;
};

TEST_F(PrefixRegistrarTest, ARegistrationIsAnsweredOnceItsPutIsDurable) {
  Register("a", {1, 2, 3, 4});
  EXPECT_THAT(persistence_.Whats(), ElementsAre("put a x4"));
  EXPECT_THAT(replies_, IsEmpty());
  EXPECT_TRUE(Listed("a"));
  persistence_.Finish(0);
  EXPECT_THAT(replies_, ElementsAre("register a: OK"));
  // The same content again changes nothing in the store, yet its reply still waits for a
  // record of the name's state.
  Register("a", {1, 2, 3, 4});
  EXPECT_THAT(persistence_.Whats(), ElementsAre("put a x4", "put a x4"));
  EXPECT_EQ(replies_.size(), 1u);
  persistence_.Finish(1);
  EXPECT_EQ(replies_.size(), 2u);
}

// The journal hears what the store did in the store's order: an eviction made by a put is
// recorded before that put, and automatic entries are not recorded at all.
TEST_F(PrefixRegistrarTest, RecordsFollowTheStoresOrder) {
  Register("u1", {1, 1, 1, 1}, /*pinned=*/false);
  Register("u2", {2, 2, 2, 2}, /*pinned=*/false);
  Register("p", {3, 3, 3, 3});
  Register("q", {4, 4, 4, 4});  // evicts u1, the least recently used
  EXPECT_THAT(persistence_.Whats(),
              ElementsAre("put u1 x4", "put u2 x4", "put p x4", "delete u1", "put q x4"));
  EXPECT_FALSE(Listed("u1"));
}

TEST_F(PrefixRegistrarTest, APutThatCannotBeSavedIsUndone) {
  Register("a", {1, 2, 3, 4});
  persistence_.Finish(0, absl::InternalError("could not save the prefix state: disk full"));
  EXPECT_THAT(replies_, ElementsAre(HasSubstr("register a: INTERNAL: could not save")));
  EXPECT_TRUE(Listed("a"));  // until the engine thread runs the undo
  RunPosted();
  EXPECT_FALSE(Listed("a"));
  EXPECT_THAT(persistence_.Whats(), ElementsAre("put a x4", "delete a"));
}

// The bug of a delete recorded first and applied later: a registration completing in between
// was recorded after the delete, then removed by it without a record. Now a deletion is applied
// and recorded in one go, so a registration after it is recorded after it and stays.
TEST_F(PrefixRegistrarTest, ARegistrationAfterADeleteIsRecordedAfterItAndStays) {
  Register("a", {1, 2, 3, 4});
  persistence_.Finish(0);
  Delete("a");
  Register("a", {5, 6, 7, 8});
  EXPECT_THAT(persistence_.Whats(), ElementsAre("put a x4", "delete a", "put a x4"));
  persistence_.Finish(1);
  persistence_.Finish(2);
  EXPECT_THAT(replies_, ElementsAre("register a: OK", "delete a: OK", "register a: OK"));
  EXPECT_TRUE(Listed("a"));
}

// A deletion that cannot be saved leaves no trace: the prefix comes back as it was (its
// creation time, for its TTL) and the journal hears the put that restores it.
TEST_F(PrefixRegistrarTest, ADeleteThatCannotBeSavedIsUndoneBeforeItsReply) {
  Register("a", {1, 2, 3, 4});
  persistence_.Finish(0);
  const absl::Time created = kv_->catalog().Get()->at("a").info.created_at;
  clock_.Advance(absl::Seconds(5));
  Delete("a");
  EXPECT_FALSE(Listed("a"));
  persistence_.Finish(1, absl::InternalError("could not save the prefix state: disk full"));
  EXPECT_EQ(replies_.size(), 1u);  // the reply waits for the undo
  RunPosted();
  EXPECT_THAT(replies_, ElementsAre("register a: OK", HasSubstr("delete a: INTERNAL")));
  ASSERT_TRUE(Listed("a"));
  EXPECT_EQ(kv_->catalog().Get()->at("a").info.created_at, created);
  EXPECT_THAT(persistence_.Whats(), ElementsAre("put a x4", "delete a", "put a x4"));
}

TEST_F(PrefixRegistrarTest, DeletingAnAbsentNameIsNotFoundNamingIt) {
  Delete("tenant/missing");
  EXPECT_THAT(persistence_.Whats(), ElementsAre("delete tenant/missing"));
  persistence_.Finish(0);
  EXPECT_THAT(replies_, ElementsAre("delete tenant/missing: NOT_FOUND: name: no prefix named "
                                    "'missing' is registered"));
}

// Two clients delete one name: the second finds it gone while the first's delete is not yet
// durable. Its NOT_FOUND waits behind that delete, so that a crash before the first record is
// saved cannot bring back a name a client was told is absent.
TEST_F(PrefixRegistrarTest, ANotFoundIsAnsweredOnlyOnceTheDeleteBeforeItIsDurable) {
  Register("a", {1, 2, 3, 4});
  persistence_.Finish(0);
  Delete("a");
  Delete("a");
  EXPECT_THAT(persistence_.Whats(), ElementsAre("put a x4", "delete a", "delete a"));
  EXPECT_THAT(replies_, ElementsAre("register a: OK"));
  persistence_.Finish(1);
  persistence_.Finish(2);
  EXPECT_THAT(replies_,
              ElementsAre("register a: OK", "delete a: OK", HasSubstr("delete a: NOT_FOUND")));
}

TEST_F(PrefixRegistrarTest, ANotFoundWhoseRecordFailsAnswersTheFailure) {
  Delete("gone");
  persistence_.Finish(0, absl::InternalError("could not save the prefix state: disk full"));
  EXPECT_THAT(replies_, ElementsAre(HasSubstr("delete gone: INTERNAL: could not save")));
}

}  // namespace
}  // namespace kvserve::server
