// Tests for ChatTemplate: the Jinja subset chat templates use, and errors naming constructs
// outside it.
#include "tokenizer/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kvserve::tokenizer {
namespace {

using ::testing::HasSubstr;

// Renders `source` with `context` (a JSON object); fails the test on error.
std::string Render(const std::string& source,
                   const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  auto tmpl = ChatTemplate::Parse(source);
  EXPECT_TRUE(tmpl.ok()) << tmpl.status();
  if (!tmpl.ok()) return "<parse error>";
  auto out = (*tmpl)->RenderWithContext(context);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "<render error>";
}

// The error message of parsing or rendering `source`; fails the test if it succeeds.
std::string Error(const std::string& source,
                  const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  auto tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) {
    EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(tmpl.status().message());
  }
  auto out = (*tmpl)->RenderWithContext(context);
  EXPECT_FALSE(out.ok()) << "rendered: " << *out;
  return out.ok() ? "" : std::string(out.status().message());
}

TEST(ChatTemplateTest, RendersMessagesWithGenerationPrompt) {
  auto tmpl = ChatTemplate::Parse(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m['content'] }}{{ eos_token }}"
      "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  auto out = (*tmpl)->Render({{"user", "hi"}, {"assistant", "yo"}}, true, "<s>", "</s>");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<s>[user]hi</s>[assistant]yo</s>[assistant]");
  out = (*tmpl)->Render({{"user", "hi"}}, false, "<s>", "</s>");
  EXPECT_EQ(*out, "<s>[user]hi</s>");
}

TEST(ChatTemplateTest, WhitespaceControlTrimBlocksAndLstripBlocks) {
  EXPECT_EQ(Render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(Render("{% if true %}\n    x\n{% endif %}\ny"), "    x\ny");
  EXPECT_EQ(Render("  {% if true %}yes{% endif %}"), "yes");
  EXPECT_EQ(Render("keep\n"), "keep");  // the final newline is dropped
  EXPECT_EQ(Render("a{# comment #}b"), "ab");
}

TEST(ChatTemplateTest, LoopVariablesElseBreakContinueAndScoping) {
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.revindex }}|{% endfor %}"),
            "10TrueFalse3|21FalseFalse2|32FalseTrue1|");
  EXPECT_EQ(Render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "013");
  EXPECT_EQ(Render("{% for x in range(5) if x is odd %}{{ x }}{% endfor %}"), "13");
  // A set inside a loop does not leak out; a namespace attribute does.
  EXPECT_EQ(Render("{% set v = 0 %}{% set ns = namespace(v=0) %}{% for x in [1, 2] %}"
                   "{% set v = x %}{% set ns.v = ns.v + x %}{% endfor %}{{ v }} {{ ns.v }}"),
            "0 3");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  EXPECT_EQ(Render("{% for x in 'ab' %}{{ loop.previtem is defined }}{{ x }}{% endfor %}"),
            "FalseaTrueb");
}

TEST(ChatTemplateTest, IfElifElseAndOperators) {
  const std::string tmpl = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(Render(tmpl, {{"n", 3}}), "big");
  EXPECT_EQ(Render(tmpl, {{"n", 2}}), "two");
  EXPECT_EQ(Render(tmpl, {{"n", 1}}), "small");
  EXPECT_EQ(
      Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2 * 3 }}"),
      "3 -4 1 1024 3.5 7");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }} {{ 'x' * 3 }} {{ [1] + [2] }}"), "a1None xxx [1, 2]");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' not in {'k': 1} }}"),
            "True True False");
  EXPECT_EQ(Render("{{ not true or false and true }} {{ 'yes' if 0 else 'no' }}"), "False no");
  EXPECT_EQ(Render("{{ none or 'fallback' }} {{ '' and 'x' }}|"), "fallback |");
}

TEST(ChatTemplateTest, FiltersAndTests) {
  EXPECT_EQ(Render("{{ '  x  ' | trim }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}"), "x|ABab");
  EXPECT_EQ(Render("{{ [1, 2, 3] | length }} {{ 'héllo' | length }} {{ {'a': 1} | length }}"),
            "3 5 1");
  EXPECT_EQ(
      Render("{{ missing | default('d') }} {{ '' | default('e', true) }} {{ 'x' | default('y') }}"),
      "d e x");
  EXPECT_EQ(Render("{{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }}"), "a, b 12");
  EXPECT_EQ(Render("{{ {'a': [1, 'x'], 'b': none, 'c': true} | tojson }}"),
            "{\"a\": [1, \"x\"], \"b\": null, \"c\": true}");
  EXPECT_EQ(Render("{{ {'a': 1} | tojson(indent=2) }}"), "{\n  \"a\": 1\n}");
  EXPECT_EQ(Render("{{ 'é\"\n' | tojson }}"), "\"é\\\"\\n\"");
  EXPECT_EQ(Render("{% for k, v in {'x': 1} | items %}{{ k }}{{ v }}{% endfor %}"), "x1");
  EXPECT_EQ(Render("{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ [1, 2] | reverse | join }}"),
            "3221");
  EXPECT_EQ(Render("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='c') | join }}",
                   {{"msgs",
                     {{{"role", "user"}, {"c", "a"}},
                      {{"role", "bot"}, {"c", "b"}},
                      {{"role", "user"}, {"c", "c"}}}}}),
            "ac");
  EXPECT_EQ(Render("{{ x is defined }}{{ y is defined }}{{ x is string }}{{ n is none }}"
                   "{{ f is false }}{{ 3 is number }}{{ {} is mapping }}{{ x is not none }}",
                   {{"x", "s"}, {"n", nullptr}, {"f", false}}),
            "TrueFalseTrueTrueTrueTrueTrueTrue");
}

TEST(ChatTemplateTest, SlicingAndStringMethods) {
  EXPECT_EQ(
      Render("{{ [1, 2, 3, 4][::-1] }} {{ [1, 2, 3, 4][1:3] }} {{ 'héllo'[1:] }} {{ 'abc'[-1] }}"),
      "[4, 3, 2, 1] [2, 3] éllo c");
  EXPECT_EQ(
      Render("{{ 'a<b>c'.split('<b>')[-1] }} {{ ' x y '.split() }} {{ 'a,b,c'.split(',', 1) }}"),
      "c ['x', 'y'] ['a', 'b,c']");
  EXPECT_EQ(Render("[{{ '\\n\\nx\\n'.lstrip('\\n') }}] [{{ '  x  '.strip() }}] [{{ "
                   "'xxhixx'.rstrip('x') }}]"),
            "[x\n] [x] [xxhi]");
  // Python's lstrip with an argument strips only those characters.
  EXPECT_EQ(Render("[{{ '  x'.lstrip('\\n') }}]"), "[  x]");
  EXPECT_EQ(Render("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}"
                   "{{ 'a-b-c'.replace('-', '+') }}{{ 'ab'.upper() }}{{ 'hi there'.title() }}"),
            "TrueTruea+b+cABHi There");
  EXPECT_EQ(Render("{{ d.get('a') }} {{ d.get('z', 'none') }} {{ d.keys() | list }}",
                   {{"d", {{"a", 1}}}}),
            "1 none ['a']");
}

TEST(ChatTemplateTest, MacrosSetBlocksAndRaiseException) {
  EXPECT_EQ(Render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Bob') }} {{ greet('Al', punct='?') }}"),
            "Hi Bob! Hi Al?");
  EXPECT_EQ(Render("{% set block %}in {{ 1 + 1 }}{% endset %}[{{ block }}]"), "[in 2]");
  EXPECT_EQ(Render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_THAT(Error("{{ raise_exception('Only user and assistant roles!') }}"),
              HasSubstr("Only user and assistant roles!"));
}

TEST(ChatTemplateTest, ConstructsOutsideTheSubsetAreNamed) {
  EXPECT_THAT(Error("{% include 'x' %}"), HasSubstr("unsupported statement 'include'"));
  EXPECT_THAT(Error("{% extends 'base' %}"), HasSubstr("unsupported statement 'extends'"));
  EXPECT_THAT(Error("{{ 'x' | wordwrap }}"), HasSubstr("unsupported filter 'wordwrap'"));
  EXPECT_THAT(Error("{{ 'x' is lower }}"), HasSubstr("unsupported test 'lower'"));
  EXPECT_THAT(Error("{{ 'x'.format(1) }}"), HasSubstr("unsupported method 'format' on string"));
  EXPECT_THAT(Error("{{ cycler(1, 2) }}"), HasSubstr("unsupported function 'cycler'"));
  EXPECT_THAT(Error("{% for x in y recursive %}{% endfor %}"), HasSubstr("'recursive'"));
  EXPECT_THAT(Error("{% if true %}unclosed"), HasSubstr("missing '{% endif %}'"));
  EXPECT_THAT(Error("line1\n{{ 1 + }}"), HasSubstr("line 2"));
  EXPECT_THAT(Error("{{ 1 + 'a' }}"), HasSubstr("unsupported operand types for +"));
  EXPECT_THAT(Error("{{ nothing.attr }}"), HasSubstr("'nothing' is undefined"));
}

TEST(ChatTemplateTest, ToJsonIsPythonJsonDumps) {
  // Transformers' tojson is json.dumps(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False): floats as Python's repr, dicts in insertion order.
  const nlohmann::ordered_json numbers = {
      {"x", {1.0, 0.5, 1e16, 1e15, 0.0001, 0.00001, 2.5e-7, -0.0, 123456789.0, 1e22, -3, 0}}};
  EXPECT_EQ(Render("{{ x | tojson }}", numbers),
            "[1.0, 0.5, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 2.5e-07, -0.0, 123456789.0, "
            "1e+22, -3, 0]");
  EXPECT_EQ(Render("{{ x }}", numbers),
            "[1.0, 0.5, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 2.5e-07, -0.0, 123456789.0, "
            "1e+22, -3, 0]");
  const nlohmann::ordered_json d = {
      {"d", {{"b", {1, nlohmann::ordered_json::object()}}, {"a", {}}}}};
  EXPECT_EQ(Render("{{ d | tojson }}", d), R"({"b": [1, {}], "a": null})");
  EXPECT_EQ(Render("{{ d | tojson(indent=2) }}", d),
            "{\n  \"b\": [\n    1,\n    {}\n  ],\n  \"a\": null\n}");
  // indent=0 and negative indents put items on their own lines, unindented; a string indents.
  EXPECT_EQ(Render("{{ d | tojson(indent=0) }}", d), "{\n\"b\": [\n1,\n{}\n],\n\"a\": null\n}");
  EXPECT_EQ(Render("{{ d | tojson(indent=-1) }}", d), "{\n\"b\": [\n1,\n{}\n],\n\"a\": null\n}");
  EXPECT_EQ(Render("{{ d | tojson(indent='\\t') }}", d),
            "{\n\t\"b\": [\n\t\t1,\n\t\t{}\n\t],\n\t\"a\": null\n}");
  EXPECT_EQ(Render("{{ d | tojson(separators=(',', ':')) }}", d), R"({"b":[1,{}],"a":null})");
  EXPECT_EQ(Render("{{ d | tojson(indent=1, separators=[';', '=']) }}", d),
            "{\n \"b\"=[\n  1;\n  {}\n ];\n \"a\"=null\n}");
  // Code point order, as Python sorts str keys; nested dicts too.
  const nlohmann::ordered_json keys = {
      {"k", {{"b", 1}, {"B", 2}, {"é", {{"z", 1}, {"y", 2}}}, {"_", 4}, {"a", 5}}}};
  EXPECT_EQ(Render("{{ k | tojson(sort_keys=true) }}", keys),
            R"({"B": 2, "_": 4, "a": 5, "b": 1, "é": {"y": 2, "z": 1}})");
  EXPECT_EQ(Render("{{ k | tojson }}", keys),
            R"({"b": 1, "B": 2, "é": {"z": 1, "y": 2}, "_": 4, "a": 5})");
  const nlohmann::ordered_json text = {{"s", "é\x7f😀\u2028\"\\\n\t\b\f\r\x01<&>'"}};
  EXPECT_EQ(Render("{{ s | tojson }}", text), "\"é\x7f😀\u2028\\\"\\\\\\n\\t\\b\\f\\r\\u0001<&>'\"");
  EXPECT_EQ(Render("{{ s | tojson(ensure_ascii=true) }}", text),
            "\"\\u00e9\\u007f\\ud83d\\ude00\\u2028\\\"\\\\\\n\\t\\b\\f\\r\\u0001<&>'\"");
  // The first positional argument is ensure_ascii, as in Transformers' signature.
  EXPECT_EQ(Render("{{ 'é' | tojson(true) }}{{ 'é' | tojson(false, 1) }}"), "\"\\u00e9\"\"é\"");
  EXPECT_EQ(Render("{{ true | tojson }}{{ none | tojson }}{{ [] | tojson(indent=2) }}"),
            "truenull[]");
  EXPECT_THAT(Error("{{ 1 | tojson(indent=[2]) }}"),
              HasSubstr("tojson: indent must be an integer or a string, not list"));
  EXPECT_THAT(Error("{{ 1 | tojson(separators=(',',)) }}"),
              HasSubstr("tojson: separators must be a pair of strings"));
}

TEST(ChatTemplateTest, ContextAndMessageFieldsKeepTheirOrder) {
  const nlohmann::ordered_json context = nlohmann::ordered_json::parse(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"zeta": 1, "alpha": 2}}}]})");
  EXPECT_EQ(
      Render("{{ tools[0] | tojson }}", context),
      R"({"type": "function", "function": {"name": "f", "parameters": {"zeta": 1, "alpha": 2}}})");

  auto tmpl = ChatTemplate::Parse(
      "{% for m in messages %}{% for k, v in m.items() %}{{ k }}={{ v | tojson }};{% endfor %}"
      "{% endfor %}|{{ tools | tojson }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  const auto messages = nlohmann::ordered_json::parse(
      R"([{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
          "arguments": {"zeta": "z", "alpha": "a"}}}]}])");
  auto out = (*tmpl)->RenderJson(messages, false, "", "", R"({"tools": [{"z": 1, "a": 2}]})",
                                 RenderBudget());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            R"(role="assistant";content="";tool_calls=[{"function": {"name": "f", "arguments": )"
            R"({"zeta": "z", "alpha": "a"}}}];|[{"z": 1, "a": 2}])");
}

// Renders `source` over one user message with `template_kwargs_json`.
absl::StatusOr<std::string> RenderWithKwargs(const std::string& source,
                                             std::string_view template_kwargs_json,
                                             const RenderBudget& budget = RenderBudget()) {
  auto tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  return (*tmpl)->Render({{"user", "hi"}}, true, "<s>", "</s>", template_kwargs_json, budget);
}

TEST(ChatTemplateKwargsTest, MembersBecomeVariablesKeepingKeyOrder) {
  // With sorted keys (nlohmann::json's std::map) "alpha" would come before "zeta".
  auto out = RenderWithKwargs(
      "{{ schema | tojson }}|{% for k, v in schema.items() %}{{ k }}={{ v }};{% endfor %}|"
      "{{ schema }}|{{ schema.keys() | list }}|{{ messages[0].content }}{{ bos_token }}"
      "{{ add_generation_prompt }}",
      R"({"schema": {"zeta": 1, "alpha": {"y": true, "b": null}, "mid": [0.5, "s"]}})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, R"({"zeta": 1, "alpha": {"y": true, "b": null}, "mid": [0.5, "s"]}|)"
                  R"(zeta=1;alpha={'y': True, 'b': None};mid=[0.5, 's'];|)"
                  R"({'zeta': 1, 'alpha': {'y': True, 'b': None}, 'mid': [0.5, 's']}|)"
                  R"(['zeta', 'alpha', 'mid']|hi<s>True)");

  const std::string thinking =
      "{% if enable_thinking is defined and enable_thinking is false %}off{% else %}on"
      "{% endif %}";
  EXPECT_EQ(*RenderWithKwargs(thinking, R"({"enable_thinking": false})"), "off");
  EXPECT_EQ(*RenderWithKwargs(thinking, R"({"enable_thinking": true})"), "on");
  EXPECT_EQ(*RenderWithKwargs(thinking, "{}"), "on");
  EXPECT_EQ(*RenderWithKwargs(thinking, ""), "on");
  // A repeated key keeps its last value, as Python's json.loads.
  EXPECT_EQ(*RenderWithKwargs(thinking, R"({"enable_thinking": true, "enable_thinking": false})"),
            "off");
}

TEST(ChatTemplateKwargsTest, ErrorsNameTemplateKwargs) {
  auto error = [](std::string_view kwargs, const RenderBudget& budget = RenderBudget()) {
    absl::StatusOr<std::string> out = RenderWithKwargs("{{ messages | length }}", kwargs, budget);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << kwargs;
    return std::string(out.status().message());
  };
  EXPECT_EQ(error("{enable_thinking: false}"),
            "template_kwargs: not valid JSON: parse error at line 1, column 2: syntax error while "
            "parsing object key - invalid literal; expected string literal");
  EXPECT_EQ(error(" "),
            "template_kwargs: not valid JSON: parse error at line 1, column 2: syntax error while "
            "parsing value - unexpected end of input; expected '[', '{', or a literal");
  EXPECT_EQ(error("[1]"), "template_kwargs: must be a JSON object");
  EXPECT_EQ(error("null"), "template_kwargs: must be a JSON object");
  EXPECT_EQ(error("\"enable_thinking\""), "template_kwargs: must be a JSON object");
  RenderBudget shallow;
  shallow.max_depth = 3;
  EXPECT_EQ(error(R"({"a": {"b": {"c": {}}}})", shallow),
            "template_kwargs: nested deeper than 3 levels");
  EXPECT_TRUE(RenderWithKwargs("{{ a.b }}", R"({"a": {"b": {"c": 1}}})", shallow).ok());
  for (const char* name : {"messages", "add_generation_prompt", "bos_token", "eos_token"}) {
    EXPECT_EQ(
        error(absl::StrCat(R"({"tools": [], ")", name, R"(": 1})")),
        absl::StrCat("template_kwargs.", name, ": is set by the request, not by template_kwargs"));
  }
  // The budget is checked first.
  RenderBudget invalid;
  invalid.max_depth = 0;
  EXPECT_EQ(error("[", invalid), "render budget: max_depth must be in (0, 1000]");
}

TEST(ChatTemplateTest, MetaLlama2ChatTemplate) {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) +
                   "/tests/tokenizer_reference/llama2_chat_template.jinja");
  ASSERT_TRUE(in.good());
  std::stringstream source;
  source << in.rdbuf();
  auto tmpl = ChatTemplate::Parse(source.str());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  auto out = (*tmpl)->Render(
      {{"system", "Be nice."}, {"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}}, false,
      "<s>", "</s>");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<s>[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\n Hi [/INST] Hello </s><s>[INST] Bye [/INST]");
  auto bad = (*tmpl)->Render({{"user", "a"}, {"user", "b"}}, false, "<s>", "</s>");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("roles must alternate"));
}

}  // namespace
}  // namespace kvserve::tokenizer
