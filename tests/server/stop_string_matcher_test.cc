// Tests of StopStringMatcher: matches across deltas, minimal hold-back, no output after a match.
#include "server/stop_string_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvserve::server {
namespace {

// Feeds `deltas` in order and returns everything returned, Flush included unless matched.
std::string FeedAll(StopStringMatcher& m, const std::vector<std::string>& deltas) {
  std::string out;
  for (const std::string& d : deltas) out += m.Feed(d);
  out += m.Flush();
  return out;
}

TEST(StopStringMatcherTest, WithoutStopStringsEverythingPassesAtOnce) {
  StopStringMatcher m;
  EXPECT_EQ(m.Feed("ab"), "ab");
  EXPECT_EQ(m.Feed("c"), "c");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.matched());
}

TEST(StopStringMatcherTest, MatchInsideOneDeltaCutsThere) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Feed("abcENDxyz"), "abc");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.Feed("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, MatchAcrossDeltasHoldsBackOnlyAPossibleStart) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Feed("abE"), "ab");  // "E" may start END
  EXPECT_EQ(m.Feed("N"), "");      // "EN" still may
  EXPECT_EQ(m.Feed("D!"), "");
  EXPECT_TRUE(m.matched());
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Feed("abEN"), "ab");
  EXPECT_EQ(m.Feed("x"), "ENx");
  EXPECT_FALSE(m.matched());
}

TEST(StopStringMatcherTest, EarliestOfSeveralStopStringsWins) {
  StopStringMatcher m({"world", "lo"});
  EXPECT_EQ(FeedAll(m, {"hel", "lo world"}), "hel");
  EXPECT_TRUE(m.matched());
}

TEST(StopStringMatcherTest, FlushReturnsTheHeldTailAtTheEnd) {
  StopStringMatcher m({"stop"});
  EXPECT_EQ(m.Feed("a st"), "a ");
  EXPECT_EQ(m.Flush(), "st");
  EXPECT_FALSE(m.matched());
}

TEST(StopStringMatcherTest, ConcatenationEqualsTheTextCutAtTheFirstStop) {
  // Every split of the same text gives the same result.
  const std::string text = "one two THREE four";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StopStringMatcher m({"THREE", "TWO"});
    EXPECT_EQ(FeedAll(m, {text.substr(0, cut), text.substr(cut)}), "one two ") << cut;
  }
}

}  // namespace
}  // namespace kvserve::server
