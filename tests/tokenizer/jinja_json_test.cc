// Tests for ParseJsonValue: JSON text read into template values in the order the text writes
// object members, with nesting and error messages bounded.
#include "tokenizer/jinja_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja_meter.h"
#include "tokenizer/render_budget.h"

namespace kvserve::tokenizer::jinja {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The value of `text` printed as Python's json.dumps would; fails the test on error.
std::string Dumped(const std::string& text, int max_depth = 100) {
  absl::StatusOr<Value> value = ParseJsonValue(text, max_depth);
  EXPECT_TRUE(value.ok()) << value.status();
  if (!value.ok()) return "<error>";
  RenderBudget budget;
  RenderMeter meter(budget);
  return value->ToJson(JsonFormat(), meter);
}

std::string ErrorOf(const std::string& text, int max_depth = 100) {
  absl::StatusOr<Value> value = ParseJsonValue(text, max_depth);
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(value.status().message());
}

TEST(JinjaJsonTest, ObjectsKeepTheOrderOfTheText) {
  EXPECT_EQ(Dumped(R"({"zeta": 1, "alpha": {"z": [], "a": {}}, "mid": null})"),
            R"({"zeta": 1, "alpha": {"z": [], "a": {}}, "mid": null})");
  // As Python's json.loads and JavaScript's JSON.parse: first position, last value.
  EXPECT_EQ(Dumped(R"({"b": 1, "a": 2, "b": 3})"), R"({"b": 3, "a": 2})");
}

TEST(JinjaJsonTest, LargeObjectsWithRepeatedKeysKeepOrder) {
  // Past the size where repeated keys are found through an index.
  std::string text = "{";
  std::string expected = "{";
  for (int i = 0; i < 1000; ++i) {
    absl::StrAppend(&text, i > 0 ? ", " : "", "\"k", 999 - i, "\": ", i);
    absl::StrAppend(&expected, i > 0 ? ", " : "", "\"k", 999 - i, "\": ", i == 500 ? -1 : i);
  }
  absl::StrAppend(&text, ", \"k499\": -1}");
  absl::StrAppend(&expected, "}");
  EXPECT_EQ(Dumped(text), expected);
}

TEST(JinjaJsonTest, ScalarsAndStrings) {
  EXPECT_EQ(Dumped(R"([1, -7, 0.5, 1.0, 1e21, 1e-7, 9223372036854775807,
                       18446744073709551615, true, false, null])"),
            "[1, -7, 0.5, 1.0, 1e+21, 1e-07, 9223372036854775807, 1.8446744073709552e+19, true, "
            "false, null]");
  EXPECT_EQ(Dumped(R"("\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t \u0001")"),
            "\"é 😀 \\\"q\\\" \\\\ / \\b\\f\\n\\r\\t \\u0001\"");
  EXPECT_EQ(Dumped("  {}  "), "{}");
}

TEST(JinjaJsonTest, NestingDeeperThanMaxDepthIsRefused) {
  EXPECT_EQ(Dumped("[[[1]]]", /*max_depth=*/3), "[[[1]]]");
  EXPECT_EQ(Dumped(R"({"a": {"b": 1}})", /*max_depth=*/2), R"({"a": {"b": 1}})");
  EXPECT_EQ(ErrorOf("[[[[1]]]]", /*max_depth=*/3), "nested deeper than 3 levels");
  EXPECT_EQ(ErrorOf(R"({"a": {"b": {}}})", /*max_depth=*/2), "nested deeper than 2 levels");
  // Far deeper than any stack could recurse: refused without recursing.
  EXPECT_EQ(ErrorOf(std::string(1'000'000, '['), /*max_depth=*/1000),
            "nested deeper than 1000 levels");
}

TEST(JinjaJsonTest, InvalidJsonNamesTheReasonButNotTheText) {
  EXPECT_EQ(ErrorOf(R"({"a": tru})"),
            "not valid JSON: parse error at line 1, column 10: syntax error while parsing value - "
            "invalid literal");
  EXPECT_EQ(ErrorOf(""),
            "not valid JSON: parse error at line 1, column 1: syntax error while parsing value - "
            "unexpected end of input; expected '[', '{', or a literal");
  EXPECT_EQ(ErrorOf("{} x"),
            "not valid JSON: parse error at line 1, column 4: syntax error while parsing value - "
            "invalid literal; expected end of input");
  EXPECT_EQ(ErrorOf("\"bad \xff byte\""),
            "not valid JSON: parse error at line 1, column 6: syntax error while parsing value - "
            "invalid string: ill-formed UTF-8 byte");
  // The input is not quoted back, however long.
  const std::string secret = "\"" + std::string(100'000, 's');
  EXPECT_THAT(ErrorOf(secret), Not(HasSubstr("sss")));
  EXPECT_THAT(ErrorOf("[1e999]"), HasSubstr("not valid JSON: "));
}

}  // namespace
}  // namespace kvserve::tokenizer::jinja
