// Tests of KVSERVE_CHECK and KVSERVE_DCHECK: a false condition prints file:line, the
// condition and the message and aborts; a true one evaluates its condition once and its
// message never; KVSERVE_DCHECK is compiled away (condition unevaluated) under NDEBUG.
#include "base/check.h"

#include <gtest/gtest.h>

#include <string>

namespace kvserve::base {
namespace {

TEST(CheckDeathTest, FailureNamesFileLineConditionAndMessageThenAborts) {
  const int layer = 7;
  const int layers = 4;
  EXPECT_DEATH(KVSERVE_CHECK(layer < layers) << "layer " << layer << " of " << layers,
               "check_test\\.cc:[0-9]+: KVSERVE_CHECK failed: layer < layers: layer 7 of 4");
}

TEST(CheckDeathTest, FailureWithoutMessage) {
  const bool ready = false;
  EXPECT_DEATH(KVSERVE_CHECK(ready), "check_test\\.cc:[0-9]+: KVSERVE_CHECK failed: ready\n");
}

TEST(CheckTest, PassingCheckEvaluatesTheConditionOnceAndNotTheMessage) {
  int conditions = 0;
  int messages = 0;
  KVSERVE_CHECK(++conditions == 1) << "message " << ++messages;
  EXPECT_EQ(conditions, 1);
  EXPECT_EQ(messages, 0);
}

TEST(CheckTest, IsOneStatementInsideIfElse) {
  int branch = 0;
  if (branch == 0)
    KVSERVE_CHECK(true) << "then";
  else
    branch = 2;
  if (branch == 1)
    KVSERVE_DCHECK(true) << "then";
  else
    branch = 3;
  EXPECT_EQ(branch, 3);
}

#ifdef NDEBUG
TEST(CheckTest, DcheckIsCompiledAwayInReleaseBuilds) {
  int conditions = 0;
  int messages = 0;
  KVSERVE_DCHECK(++conditions == 0) << "message " << ++messages;  // false, but never evaluated
  EXPECT_EQ(conditions, 0);
  EXPECT_EQ(messages, 0);
}
#else
TEST(CheckDeathTest, DcheckFailsInDebugBuilds) {
  const int id = 3;
  EXPECT_DEATH(KVSERVE_DCHECK(id == 4) << "request " << id,
               "check_test\\.cc:[0-9]+: KVSERVE_CHECK failed: id == 4: request 3");
}

TEST(CheckTest, PassingDcheckEvaluatesTheConditionOnce) {
  int conditions = 0;
  KVSERVE_DCHECK(++conditions == 1);
  EXPECT_EQ(conditions, 1);
}
#endif

}  // namespace
}  // namespace kvserve::base
