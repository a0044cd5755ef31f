// The retention priority: weight(class) x (1 + hits) x 2^(-age / half-life).
#include "cache/retention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "absl/time/time.h"

namespace kvserve::cache {
namespace retention_test {

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);
const absl::Duration kHalfLife = absl::Seconds(100);

TEST(RetentionTest, NamesRoundTripAndUnknownNamesAreRefused) {
  for (RetentionClass c : {RetentionClass::kLow, RetentionClass::kNormal, RetentionClass::kHigh}) {
    ASSERT_EQ(ParseRetentionClass(RetentionClassName(c)), c);
  }
  EXPECT_EQ(RetentionClassName(RetentionClass::kHigh), "high");
  EXPECT_FALSE(ParseRetentionClass("pinned").has_value());  // a pin is not a class
  EXPECT_FALSE(ParseRetentionClass("HIGH").has_value());
  EXPECT_FALSE(ParseRetentionClass("").has_value());
}

TEST(RetentionTest, WeightsOrderTheClasses) {
  EXPECT_LT(RetentionWeight(RetentionClass::kLow), RetentionWeight(RetentionClass::kNormal));
  EXPECT_LT(RetentionWeight(RetentionClass::kNormal), RetentionWeight(RetentionClass::kHigh));
  EXPECT_DOUBLE_EQ(RetentionWeight(RetentionClass::kNormal), 1.0);
}

TEST(RetentionTest, PriorityHalvesPerHalfLifeAndGrowsWithHits) {
  const double fresh = RetentionPriority(RetentionClass::kNormal, 0, kNow, kNow, kHalfLife);
  EXPECT_DOUBLE_EQ(fresh, 1.0);
  EXPECT_DOUBLE_EQ(RetentionPriority(RetentionClass::kNormal, 0, kNow - kHalfLife, kNow, kHalfLife),
                   0.5);
  EXPECT_DOUBLE_EQ(
      RetentionPriority(RetentionClass::kNormal, 0, kNow - 3 * kHalfLife, kNow, kHalfLife), 0.125);
  EXPECT_DOUBLE_EQ(RetentionPriority(RetentionClass::kNormal, 3, kNow, kNow, kHalfLife), 4.0);
  EXPECT_DOUBLE_EQ(RetentionPriority(RetentionClass::kHigh, 1, kNow, kNow, kHalfLife),
                   2.0 * RetentionWeight(RetentionClass::kHigh));
}

TEST(RetentionTest, AnOftenUsedOldEntryOutranksANewUnusedOne) {
  // Seven hits two half-lives ago: 8 / 4 = 2 > a fresh entry's 1.
  const double old_used =
      RetentionPriority(RetentionClass::kNormal, 7, kNow - 2 * kHalfLife, kNow, kHalfLife);
  const double new_unused = RetentionPriority(RetentionClass::kNormal, 0, kNow, kNow, kHalfLife);
  EXPECT_GT(old_used, new_unused);
  // A low-class entry needs four times the hits of a normal one to rank the same.
  EXPECT_DOUBLE_EQ(RetentionPriority(RetentionClass::kLow, 7, kNow, kNow, kHalfLife),
                   RetentionPriority(RetentionClass::kNormal, 1, kNow, kNow, kHalfLife));
}

TEST(RetentionTest, UseInTheFutureCountsAsNowAndNegativeHitsAsNone) {
  EXPECT_DOUBLE_EQ(
      RetentionPriority(RetentionClass::kNormal, 0, kNow + absl::Hours(1), kNow, kHalfLife), 1.0);
  EXPECT_DOUBLE_EQ(RetentionPriority(RetentionClass::kNormal, -5, kNow, kNow, kHalfLife), 1.0);
}

}  // namespace retention_test
}  // namespace kvserve::cache
