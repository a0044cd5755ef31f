// Tests for ChatTemplate: the Jinja subset chat templates use, and errors naming constructs
// outside it.
#include "tokenizer/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvserve::model {
namespace {

using ::testing::HasSubstr;

// Renders `source` with `context` (a JSON object); fails the test on error.
std::string Render(const std::string& source,
                   const nlohmann::json& context = nlohmann::json::object()) {
  auto tmpl = ChatTemplate::Parse(source);
  EXPECT_TRUE(tmpl.ok()) << tmpl.status();
  if (!tmpl.ok()) return "<parse error>";
  auto out = (*tmpl)->RenderWithContext(context);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "<render error>";
}

// The error message of parsing or rendering `source`; fails the test if it succeeds.
std::string Error(const std::string& source,
                  const nlohmann::json& context = nlohmann::json::object()) {
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
}  // namespace kvserve::model
