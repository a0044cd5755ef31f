// Tests of PrefixJournal: replay (order, last put wins, deletes, TTL by a fake clock), lines
// skipped at recovery, legacy prefixes.json migration, compaction, group commit, failed writes,
// refused files, the null journal, and recovery proportional to what is live.
#include "server/prefix_journal.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"

namespace kvserve::server {
namespace {

namespace fs = std::filesystem;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

// 2023-11-14T22:13:20Z.
const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

v1::RegisterPrefixRequest Text(const std::string& name, const std::string& text) {
  v1::RegisterPrefixRequest request;
  request.set_name(name);
  request.set_text(text);
  return request;
}

v1::PrefixOptions Opts(bool pinned, int64_t ttl_seconds, const std::string& implementation) {
  v1::PrefixOptions options;
  options.set_pinned(pinned);
  options.set_ttl_seconds(ttl_seconds);
  options.set_cache_implementation(implementation);
  return options;
}

v1::PrefixOptions Pinned() { return Opts(true, 0, "static"); }

std::vector<std::string> Names(const std::vector<RecoveredPrefix>& prefixes) {
  std::vector<std::string> names;
  for (const RecoveredPrefix& p : prefixes) names.push_back(p.request.name());
  return names;
}

// Sends spdlog's default logger to a string ("level message" per line) while alive.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_));
    logger->set_pattern("%l %v");
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  // What was logged; read after a Flush (or Open) so that the writer thread is done logging.
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::logger> previous_;
};

// A fresh, not yet created state directory per test, removed at the end.
class PrefixJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("kvserve_prefix_journal_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  PrefixJournalOptions Options() const {
    PrefixJournalOptions options;
    options.state_dir = dir_.string();
    options.clock = &clock_;
    return options;
  }
  fs::path journal_file() const { return dir_ / "prefixes.journal"; }
  fs::path legacy_file() const { return dir_ / "prefixes.json"; }

  std::unique_ptr<PrefixJournal> OpenOrDie(const PrefixJournalOptions& options) {
    absl::StatusOr<std::unique_ptr<PrefixJournal>> journal = PrefixJournal::Open(options);
    EXPECT_TRUE(journal.ok()) << journal.status();
    return journal.ok() ? *std::move(journal) : nullptr;
  }
  std::unique_ptr<PrefixJournal> OpenOrDie() { return OpenOrDie(Options()); }

  // The journal's lines, without their newlines.
  std::vector<std::string> Lines() const {
    std::ifstream in(journal_file(), std::ios::binary);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  std::string Contents(const fs::path& path) const {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  void Write(const fs::path& path, const std::string& contents) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << contents;
  }
  void Append(const fs::path& path, const std::string& contents) {
    std::ofstream(path, std::ios::binary | std::ios::app) << contents;
  }

  base::FakeClock clock_{kStart};
  fs::path dir_;
};

TEST_F(PrefixJournalTest, NullJournalRecoversNothingAndReportsEveryRecordSaved) {
  PrefixJournalOptions options;
  options.clock = &clock_;
  std::unique_ptr<PrefixJournal> journal = OpenOrDie(options);
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(journal->recovered(), IsEmpty());
  std::vector<absl::Status> done;
  journal->RecordPut(Text("sys", "You are terse."), Pinned(), kStart,
                     [&](absl::Status status) { done.push_back(status); });
  journal->RecordDelete("sys", [&](absl::Status status) { done.push_back(status); });
  journal->RecordPut(Text("other", "x"), Pinned(), kStart, nullptr);
  // Called inline: nothing is written.
  EXPECT_THAT(done, ElementsAre(absl::OkStatus(), absl::OkStatus()));
  EXPECT_TRUE(journal->Flush().ok());
  EXPECT_FALSE(fs::exists("prefixes.journal"));
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(PrefixJournalTest, InvalidOptionsAreRefused) {
  PrefixJournalOptions options = Options();
  options.clock = nullptr;
  EXPECT_EQ(PrefixJournal::Open(options).status(),
            absl::InvalidArgumentError("PrefixJournalOptions.clock: must not be null"));
  options = Options();
  options.compact_live_factor = 0;
  EXPECT_EQ(
      PrefixJournal::Open(options).status(),
      absl::InvalidArgumentError("PrefixJournalOptions.compact_live_factor: must be >= 1 (got 0)"));
  options = Options();
  options.compact_min_records = -1;
  EXPECT_EQ(PrefixJournal::Open(options).status(),
            absl::InvalidArgumentError(
                "PrefixJournalOptions.compact_min_records: must be >= 0 (got -1)"));
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(PrefixJournalTest, OpenCreatesTheDirectoryAndWritesOnlyRecords) {
  PrefixJournalOptions options = Options();
  options.state_dir = (dir_ / "a" / "b").string();
  std::unique_ptr<PrefixJournal> journal = OpenOrDie(options);
  ASSERT_NE(journal, nullptr);
  EXPECT_TRUE(fs::is_directory(options.state_dir));
  EXPECT_FALSE(fs::exists(fs::path(options.state_dir) / "prefixes.journal"));

  journal->RecordPut(Text("sys", "You are\nterse."), Opts(false, 60, "dynamic"),
                     kStart + absl::Milliseconds(1500), nullptr);
  journal->RecordDelete("sys", nullptr);
  ASSERT_TRUE(journal->Flush().ok());
  // The format: one JSON object per line; proto3 JSON with the proto's field names inside.
  EXPECT_EQ(Contents(fs::path(options.state_dir) / "prefixes.journal"),
            "{\"op\":\"put\",\"created_at\":\"2023-11-14T22:13:21.5+00:00\","
            "\"options\":{\"pinned\":false,\"ttl_seconds\":\"60\","
            "\"cache_implementation\":\"dynamic\"},"
            "\"request\":{\"name\":\"sys\",\"text\":\"You are\\nterse.\"}}\n"
            "{\"op\":\"delete\",\"name\":\"sys\"}\n");
}

TEST_F(PrefixJournalTest, ReplayKeepsRegistrationOrderAndTheLastPutOfEachName) {
  v1::RegisterPrefixRequest ids;
  ids.set_name("ids");
  ids.mutable_token_ids()->add_ids(5);
  ids.mutable_token_ids()->add_ids(7);
  ids.mutable_options()->set_ttl_seconds(600);
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    EXPECT_THAT(journal->recovered(), IsEmpty());
    journal->RecordPut(Text("b", "bee"), Pinned(), kStart, nullptr);
    journal->RecordPut(Text("a", "ay"), Pinned(), kStart, nullptr);
    journal->RecordPut(Text("c", "sea"), Pinned(), kStart, nullptr);
    // A replacement keeps its place and takes the new content, options and time.
    journal->RecordPut(Text("a", "alpha"), Opts(false, 0, "dynamic"), kStart + absl::Seconds(5),
                       nullptr);
    // A name deleted and put again goes last.
    journal->RecordDelete("b", nullptr);
    journal->RecordPut(Text("b", "beta"), Pinned(), kStart + absl::Seconds(6), nullptr);
    journal->RecordPut(ids, Opts(true, 600, "static"), kStart + absl::Seconds(7), nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  std::unique_ptr<PrefixJournal> reopened = OpenOrDie();
  ASSERT_NE(reopened, nullptr);
  const std::vector<RecoveredPrefix>& recovered = reopened->recovered();
  EXPECT_THAT(Names(recovered), ElementsAre("a", "c", "b", "ids"));
  ASSERT_EQ(recovered.size(), 4u);
  EXPECT_EQ(recovered[0].request.text(), "alpha");
  EXPECT_TRUE(MessageDifferencer::Equals(recovered[0].options, Opts(false, 0, "dynamic")));
  EXPECT_EQ(recovered[0].created_at, kStart + absl::Seconds(5));
  EXPECT_EQ(recovered[1].request.text(), "sea");
  EXPECT_EQ(recovered[1].created_at, kStart);
  EXPECT_EQ(recovered[2].request.text(), "beta");
  EXPECT_EQ(recovered[2].created_at, kStart + absl::Seconds(6));
  EXPECT_TRUE(MessageDifferencer::Equals(recovered[3].request, ids));
  EXPECT_TRUE(MessageDifferencer::Equals(recovered[3].options, Opts(true, 600, "static")));
  EXPECT_EQ(recovered[3].created_at, kStart + absl::Seconds(7));
}

TEST_F(PrefixJournalTest, DeletesRemoveAndDeletingTheUnknownIsHarmless) {
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    journal->RecordPut(Text("a", "alpha"), Pinned(), kStart, nullptr);
    journal->RecordPut(Text("b", "beta"), Pinned(), kStart, nullptr);
    journal->RecordDelete("a", nullptr);
    journal->RecordDelete("never-registered", nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  EXPECT_EQ(Lines().size(), 4u);
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    EXPECT_THAT(Names(journal->recovered()), ElementsAre("b"));
    journal->RecordDelete("b", nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(journal->recovered(), IsEmpty());
}

TEST_F(PrefixJournalTest, PrefixesWhoseTtlRanOutByTheClockAreNotRecovered) {
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    journal->RecordPut(Text("minute", "m"), Opts(false, 60, "static"), kStart, nullptr);
    journal->RecordPut(Text("forever", "f"), Opts(false, 0, "static"), kStart, nullptr);
    journal->RecordPut(Text("later", "l"), Opts(true, 120, "static"), kStart + absl::Seconds(10),
                       nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  clock_.Set(kStart + absl::Seconds(60) - absl::Nanoseconds(1));
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    EXPECT_THAT(Names(journal->recovered()), ElementsAre("minute", "forever", "later"));
  }
  // created_at + ttl <= now: expired.
  clock_.Set(kStart + absl::Seconds(60));
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    EXPECT_THAT(Names(journal->recovered()), ElementsAre("forever", "later"));
    // The remaining TTL is measured from the recorded time.
    EXPECT_EQ(journal->recovered()[1].created_at, kStart + absl::Seconds(10));
  }
  clock_.Set(kStart + absl::Seconds(130));
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("forever"));
}

TEST_F(PrefixJournalTest, TornAndGarbageLinesAreSkippedWithAWarningAndLaterRecordsApplied) {
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    journal->RecordPut(Text("a", "alpha"), Pinned(), kStart, nullptr);
    journal->RecordPut(Text("b", "beta"), Pinned(), kStart, nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  const std::string put_d =
      R"({"op":"put","created_at":"2023-11-14T22:13:20+00:00","options":{"pinned":true},)"
      R"("request":{"name":"d","text":"delta"}})";
  Append(journal_file(),
         "this is not json\n"
         "{\"op\":\"frobnicate\",\"name\":\"b\"}\n"
         "{\"op\":\"delete\",\"name\":\"a\"}\n"
         "[1, 2]\n"
         "{\"op\":\"put\",\"request\":{\"name\":\"x\"}}\n"
         "{\"op\":\"put\",\"created_at\":\"2023-11-14T22:13:20+00:00\",\"options\":{},"
         "\"request\":{\"name\":\"c\",\"text\":\"gamma\"}}\n" +
             put_d.substr(0, 40));  // killed mid-write
  const std::string path = journal_file().string();
  {
    LogCapture log;
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    EXPECT_THAT(Names(journal->recovered()), ElementsAre("b", "c"));
    EXPECT_EQ(log.text(),
              absl::StrCat("warning ", path, ":3: skipped: not JSON\n",  //
                           "warning ", path, ":4: skipped: unknown op \"frobnicate\"\n", "warning ",
                           path, ":6: skipped: not a JSON object\n", "warning ", path,
                           ":7: skipped: a put without \"request\", \"options\" objects and a "
                           "\"created_at\" string\n",
                           "warning ", path,
                           ":9: skipped: not JSON (an incomplete last line: a write cut "
                           "short)\n"));
    // Rewritten before anything is appended: nothing is glued to the torn line.
    EXPECT_EQ(Lines().size(), 2u);
    journal->RecordPut(Text("d", "delta"), Pinned(), kStart, nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  LogCapture log;
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("b", "c", "d"));
  EXPECT_EQ(log.text(), "");
}

TEST_F(PrefixJournalTest, ManySkippedLinesAreLoggedUpToALimit) {
  std::string garbage;
  for (int i = 0; i < 40; ++i) garbage += "garbage\n";
  Write(journal_file(), garbage);
  LogCapture log;
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(journal->recovered(), IsEmpty());
  std::string expected;
  for (int line = 1; line <= 16; ++line) {
    absl::StrAppend(&expected, "warning ", journal_file().string(), ":", line,
                    ": skipped: not JSON\n");
  }
  absl::StrAppend(&expected, "warning ", journal_file().string(), ": 24 more lines skipped\n");
  EXPECT_EQ(log.text(), expected);
  EXPECT_THAT(Lines(), IsEmpty());
}

// What kvserve wrote to --state-dir before the journal: PrefixRegistry's prefixes.json.
constexpr char kLegacyState[] = R"({
 "prefixes": [
  {
   "name": "sys",
   "text": "You are terse.",
   "options": {
    "pinned": false,
    "ttlSeconds": "3600",
    "cacheImplementation": "dynamic"
   }
  },
  {
   "name": "ids",
   "tokenIds": {
    "ids": [
     5,
     7
    ]
   }
  }
 ]
})";

TEST_F(PrefixJournalTest, LegacyPrefixesJsonIsMigratedOnce) {
  Write(legacy_file(), kLegacyState);
  {
    LogCapture log;
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    const std::vector<RecoveredPrefix>& recovered = journal->recovered();
    EXPECT_THAT(Names(recovered), ElementsAre("sys", "ids"));
    ASSERT_EQ(recovered.size(), 2u);
    EXPECT_EQ(recovered[0].request.text(), "You are terse.");
    EXPECT_EQ(recovered[0].request.options().ttl_seconds(), 3600);
    // Defaults applied; registered (for the TTL) when migrated.
    EXPECT_TRUE(MessageDifferencer::Equals(recovered[0].options, Opts(false, 3600, "dynamic")));
    EXPECT_EQ(recovered[0].created_at, kStart);
    EXPECT_THAT(recovered[1].request.token_ids().ids(), ElementsAre(5, 7));
    EXPECT_TRUE(MessageDifferencer::Equals(recovered[1].options, Opts(true, 0, "static")));
    EXPECT_EQ(log.text(), absl::StrCat("info ", legacy_file().string(),
                                       ": 2 prefixes migrated to prefixes.journal\n"));
  }
  EXPECT_FALSE(fs::exists(legacy_file()));
  EXPECT_EQ(Contents(dir_ / "prefixes.json.migrated"), kLegacyState);
  EXPECT_EQ(Lines().size(), 2u);

  clock_.Advance(absl::Seconds(3600));
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("ids"));
}

TEST_F(PrefixJournalTest, LegacyFileIsIgnoredOnceAJournalExists) {
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    journal->RecordPut(Text("a", "alpha"), Pinned(), kStart, nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  Write(legacy_file(), kLegacyState);
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("a"));
  EXPECT_EQ(Contents(legacy_file()), kLegacyState);
}

TEST_F(PrefixJournalTest, LegacyFileThatDoesNotParseIsLeftWithAWarning) {
  Write(legacy_file(), "{\"prefixes\": [ {\"name\": ");
  LogCapture log;
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(journal->recovered(), IsEmpty());
  EXPECT_THAT(log.text(), ::testing::StartsWith("warning " + legacy_file().string() +
                                                ": not a kvserve.v1.PrefixState: "));
  EXPECT_THAT(log.text(), ::testing::EndsWith("; its prefixes are not recovered\n"));
  EXPECT_TRUE(fs::exists(legacy_file()));
}

TEST_F(PrefixJournalTest, CompactionKeepsTheFileProportionalToTheLiveSet) {
  PrefixJournalOptions options = Options();
  options.compact_live_factor = 2;
  options.compact_min_records = 8;  // 3 live: compacted past max(6, 8) records
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie(options);
    ASSERT_NE(journal, nullptr);
    for (const char* name : {"a", "b", "c"}) {
      journal->RecordPut(Text(name, name), Pinned(), kStart, nullptr);
      ASSERT_TRUE(journal->Flush().ok());
    }
    size_t expected_lines = 3;
    for (int i = 0; i < 20; ++i) {
      journal->RecordPut(Text("a", absl::StrCat("version ", i)), Pinned(), kStart, nullptr);
      ASSERT_TRUE(journal->Flush().ok());
      expected_lines = expected_lines == 8 ? 3 : expected_lines + 1;
      EXPECT_EQ(Lines().size(), expected_lines) << "after version " << i;
    }
    // Compacted after version 17 (the 9th record): one put per live prefix, in order.
    const std::vector<std::string> lines = Lines();
    ASSERT_EQ(lines.size(), 5u);
    EXPECT_THAT(lines[0], ::testing::HasSubstr("\"version 17\""));
    EXPECT_THAT(lines[1], ::testing::HasSubstr("\"name\":\"b\""));
    EXPECT_THAT(lines[2], ::testing::HasSubstr("\"name\":\"c\""));
    EXPECT_FALSE(fs::exists(dir_ / "prefixes.journal.tmp"));
  }
  std::unique_ptr<PrefixJournal> journal = OpenOrDie(options);
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("a", "b", "c"));
  EXPECT_EQ(journal->recovered()[0].request.text(), "version 19");
}

TEST_F(PrefixJournalTest, CompactionDropsExpiredPrefixes) {
  PrefixJournalOptions options = Options();
  options.compact_min_records = 4;
  std::unique_ptr<PrefixJournal> journal = OpenOrDie(options);
  ASSERT_NE(journal, nullptr);
  journal->RecordPut(Text("short", "s"), Opts(false, 10, "static"), kStart, nullptr);
  journal->RecordPut(Text("keep", "k"), Pinned(), kStart, nullptr);
  ASSERT_TRUE(journal->Flush().ok());
  clock_.Advance(absl::Seconds(10));
  for (int i = 0; i < 3; ++i) {
    journal->RecordPut(Text("keep", absl::StrCat("k", i)), Pinned(), kStart, nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  // 5 records > max(2 * 2, 4): compacted, the expired prefix left out.
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], ::testing::HasSubstr("\"text\":\"k2\""));
}

TEST_F(PrefixJournalTest, AFailedCompactionLosesNothing) {
  PrefixJournalOptions options = Options();
  options.compact_min_records = 4;
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie(options);
    ASSERT_NE(journal, nullptr);
    // A directory where the compacted file is written makes every compaction fail, even for
    // root; the records themselves are appended all the same.
    fs::create_directories(dir_ / "prefixes.journal.tmp");
    for (int i = 0; i < 6; ++i) {
      journal->RecordPut(Text(absl::StrCat("p", i % 2), absl::StrCat(i)), Pinned(), kStart,
                         nullptr);
      ASSERT_TRUE(journal->Flush().ok());
    }
    EXPECT_EQ(Lines().size(), 6u);
    fs::remove(dir_ / "prefixes.journal.tmp");
    journal->RecordDelete("p0", nullptr);
    ASSERT_TRUE(journal->Flush().ok());
    EXPECT_EQ(Lines().size(), 1u);
  }
  std::unique_ptr<PrefixJournal> journal = OpenOrDie(options);
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("p1"));
  EXPECT_EQ(journal->recovered()[0].request.text(), "5");
}

TEST_F(PrefixJournalTest, ALeftoverTemporaryFileIsIgnoredAndRemoved) {
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    journal->RecordPut(Text("a", "alpha"), Pinned(), kStart, nullptr);
    ASSERT_TRUE(journal->Flush().ok());
  }
  // A compaction killed before its rename.
  Write(dir_ / "prefixes.journal.tmp", "{\"op\":\"delete\",\"name\":\"a\"}\n{\"op\":");
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("a"));
  EXPECT_FALSE(fs::exists(dir_ / "prefixes.journal.tmp"));
}

TEST_F(PrefixJournalTest, GroupCommitCallsEveryDoneInOrderBeforeFlushReturns) {
  constexpr int kRecords = 500;
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  absl::Mutex mu;
  std::vector<int> done_order;
  std::vector<absl::Status> statuses;
  for (int i = 0; i < kRecords; ++i) {
    journal->RecordPut(Text(absl::StrFormat("p%03d", i), "x"), Pinned(), kStart,
                       [&, i](absl::Status status) {
                         absl::MutexLock lock(&mu);
                         done_order.push_back(i);
                         statuses.push_back(status);
                       });
  }
  ASSERT_TRUE(journal->Flush().ok());
  std::vector<int> expected_order;
  for (int i = 0; i < kRecords; ++i) expected_order.push_back(i);
  absl::MutexLock lock(&mu);
  EXPECT_THAT(done_order, ElementsAreArray(expected_order));
  EXPECT_THAT(statuses, ::testing::Each(absl::OkStatus()));
  EXPECT_EQ(Lines().size(), static_cast<size_t>(kRecords));
}

TEST_F(PrefixJournalTest, TheDestructorFlushes) {
  bool saved = false;
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    journal->RecordPut(Text("a", "alpha"), Pinned(), kStart,
                       [&](absl::Status status) { saved = status.ok(); });
  }
  EXPECT_TRUE(saved);
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("a"));
}

TEST_F(PrefixJournalTest, AFailedWriteIsInternalWithoutPathsAndTheJournalCatchesUp) {
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  // A directory where the journal goes makes every write fail, even for root.
  fs::create_directories(journal_file());
  const absl::Status kFailed =
      absl::InternalError("could not save the prefix state: Is a directory");
  std::vector<absl::Status> done;
  auto record = [&](absl::Status status) { done.push_back(status); };
  {
    LogCapture log;
    journal->RecordPut(Text("a", "alpha"), Pinned(), kStart, record);
    EXPECT_EQ(journal->Flush(), kFailed);
    // The path is in the server's log only.
    EXPECT_EQ(log.text(), "error could not save the prefix state: open " + journal_file().string() +
                              ": Is a directory\n");
  }
  EXPECT_TRUE(journal->Flush().ok());  // the error was reported once
  journal->RecordPut(Text("b", "beta"), Pinned(), kStart, record);
  EXPECT_EQ(journal->Flush(), kFailed);
  EXPECT_THAT(done, ElementsAre(kFailed, kFailed));

  // Writable again: the catalog undoes "a" and keeps "b"; the next write saves the whole set.
  fs::remove(journal_file());
  journal->RecordDelete("a", record);
  EXPECT_TRUE(journal->Flush().ok());
  EXPECT_THAT(done, ElementsAre(kFailed, kFailed, absl::OkStatus()));
  EXPECT_EQ(Lines().size(), 1u);
  journal.reset();
  journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAre("b"));
}

TEST_F(PrefixJournalTest, SpecialAndOversizeFilesAreRefusedByName) {
  fs::create_directories(journal_file());
  EXPECT_EQ(
      PrefixJournal::Open(Options()).status(),
      absl::InvalidArgumentError(journal_file().string() + ": not a regular file (a directory)"));
  fs::remove(journal_file());
  fs::create_symlink("/dev/zero", journal_file());
  EXPECT_EQ(PrefixJournal::Open(Options()).status(),
            absl::InvalidArgumentError(journal_file().string() +
                                       ": not a regular file (a character device)"));
  fs::remove(journal_file());
  Write(journal_file(), "");
  fs::resize_file(journal_file(), (int64_t{256} << 20) + 1);  // sparse
  EXPECT_EQ(PrefixJournal::Open(Options()).status(),
            absl::InvalidArgumentError(
                journal_file().string() +
                ": 268435457 bytes is more than the 268435456 bytes (256 MiB) allowed"));
  fs::remove(journal_file());
  fs::create_directories(legacy_file());
  EXPECT_EQ(
      PrefixJournal::Open(Options()).status(),
      absl::InvalidArgumentError(legacy_file().string() + ": not a regular file (a directory)"));
}

TEST_F(PrefixJournalTest, AStateDirThatCannotBeCreatedIsAnError) {
  Write(dir_, "a file, not a folder");
  absl::StatusOr<std::unique_ptr<PrefixJournal>> journal = PrefixJournal::Open(Options());
  EXPECT_EQ(journal.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(journal.status().message()),
              ::testing::StartsWith("--state-dir " + dir_.string() + ": cannot create ("));
}

// 3,000 registrations of which 150 stay live (the rest evicted) recover as 150, and the
// journal is cut back to them; written with compaction, it never grows far past them.
TEST_F(PrefixJournalTest, RecoveryIsProportionalToTheLivePrefixes) {
  constexpr int kPuts = 3000;
  std::vector<std::string> live;
  for (int i = 0; i < kPuts; i += 20) live.push_back(absl::StrFormat("p%04d", i));
  auto record_all = [&](PrefixJournal& journal) {
    for (int i = 0; i < kPuts; ++i) {
      journal.RecordPut(Text(absl::StrFormat("p%04d", i), "x"), Opts(false, 0, "static"), kStart,
                        nullptr);
    }
    for (int i = 0; i < kPuts; ++i) {
      if (i % 20 != 0) journal.RecordDelete(absl::StrFormat("p%04d", i), nullptr);
    }
    ASSERT_TRUE(journal.Flush().ok());
  };
  {
    PrefixJournalOptions uncompacted = Options();
    uncompacted.compact_min_records = 1'000'000;
    std::unique_ptr<PrefixJournal> journal = OpenOrDie(uncompacted);
    ASSERT_NE(journal, nullptr);
    record_all(*journal);
  }
  EXPECT_EQ(Lines().size(), 5850u);
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    EXPECT_THAT(Names(journal->recovered()), ElementsAreArray(live));
  }
  EXPECT_EQ(Lines().size(), 150u);

  fs::remove_all(dir_);
  {
    std::unique_ptr<PrefixJournal> journal = OpenOrDie();
    ASSERT_NE(journal, nullptr);
    record_all(*journal);
  }
  // Compacted whenever a batch took it past max(2 * live, 64) records.
  EXPECT_LE(Lines().size(), 2 * 150u);
  std::unique_ptr<PrefixJournal> journal = OpenOrDie();
  ASSERT_NE(journal, nullptr);
  EXPECT_THAT(Names(journal->recovered()), ElementsAreArray(live));
}

}  // namespace
}  // namespace kvserve::server
