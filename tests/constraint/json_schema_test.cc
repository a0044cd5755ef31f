// Tests of JsonSchemaGrammar: what each keyword accepts and refuses (checked on strings and on
// random samples parsed with nlohmann::json and checked arithmetically), and the refusals'
// JSON pointers.
#include "constraint/json_schema.h"

#include <random>
#include <string>

#include "constraint/matcher.h"
#include "constraint/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvserve::constraint {
namespace json_schema_test {

using ::testing::HasSubstr;

Matcher MatcherFor(const std::string& schema, const JsonSchemaOptions& options = {}) {
  auto grammar = JsonSchemaGrammar(schema, options);
  EXPECT_TRUE(grammar.ok()) << schema << ": " << grammar.status();
  auto compiled = CompiledGrammar::Create(*std::move(grammar));
  EXPECT_TRUE(compiled.ok()) << schema << ": " << compiled.status();
  return Matcher(*compiled);
}

// `count` random strings of the schema's grammar, each of which must parse as JSON.
std::vector<nlohmann::json> Samples(Matcher& m, int count, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<nlohmann::json> out;
  for (int i = 0; i < count * 4 && static_cast<int>(out.size()) < count; ++i) {
    std::optional<std::string> s = SampleString(m, rng);
    if (!s) continue;
    nlohmann::json parsed = nlohmann::json::parse(*s, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << "not JSON: " << *s;
    out.push_back(parsed);
  }
  EXPECT_EQ(static_cast<int>(out.size()), count);
  return out;
}

TEST(JsonSchemaTest, ObjectWithRequiredAndOptionalPropertiesInOrder) {
  Matcher m = MatcherFor(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array",
      "items": {"type": "string"}}}, "required": ["name"], "additionalProperties": false})");
  EXPECT_TRUE(m.Matches(R"({"name":"Ann"})"));
  EXPECT_TRUE(m.Matches(R"({"name":"Ann","age":31,"tags":["a","b"]})"));
  EXPECT_TRUE(m.Matches(R"({"name":"Ann","tags":[]})"));
  EXPECT_FALSE(m.Matches(R"({"age":31})"));                // name is required
  EXPECT_FALSE(m.Matches(R"({"name":"Ann","age":3.5})"));  // an integer
  EXPECT_FALSE(m.Matches(R"({"name":"Ann",})"));
  EXPECT_FALSE(m.Matches(R"({"name": "Ann"})"));  // compact by default
  for (const nlohmann::json& v : Samples(m, 200)) {
    ASSERT_TRUE(v.is_object());
    ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << v.dump();
    if (v.contains("age")) ASSERT_TRUE(v["age"].is_number_integer()) << v.dump();
    if (v.contains("tags")) {
      ASSERT_TRUE(v["tags"].is_array());
      for (const auto& t : v["tags"]) ASSERT_TRUE(t.is_string());
    }
    for (const auto& [key, value] : v.items()) {
      ASSERT_TRUE(key == "name" || key == "age" || key == "tags") << key;
    }
  }
}

TEST(JsonSchemaTest, WhitespaceIsBoundedWhenAllowed) {
  JsonSchemaOptions options;
  options.whitespace_bytes = 2;
  Matcher m = MatcherFor(R"({"type": "array", "items": {"type": "integer"}})", options);
  EXPECT_TRUE(m.Matches("[1, 2,\n 3]"));
  EXPECT_TRUE(m.Matches("[1,  2]"));
  EXPECT_FALSE(m.Matches("[1,   2]"));
}

TEST(JsonSchemaTest, IntegerBoundsAreExact) {
  struct Case {
    const char* bounds;
    int64_t lo, hi;
  };
  const Case cases[] = {
      {R"("minimum": 0, "maximum": 100)", 0, 100},
      {R"("minimum": -57, "maximum": 1234)", -57, 1234},
      {R"("exclusiveMinimum": -10, "exclusiveMaximum": -2)", -9, -3},
      {R"("minimum": 7)", 7, 3000},
      {R"("maximum": -13)", -3000, -13},
      {R"("minimum": 99, "maximum": 101)", 99, 101},
      {R"("minimum": 1.5, "maximum": 20.5)", 2, 20},
  };
  for (const Case& c : cases) {
    Matcher m = MatcherFor(std::string(R"({"type": "integer", )") + c.bounds + "}");
    for (int64_t x = -3000; x <= 3000; ++x) {
      ASSERT_EQ(m.Matches(std::to_string(x)), x >= c.lo && x <= c.hi) << c.bounds << " " << x;
    }
    EXPECT_FALSE(m.Matches("007"));
    EXPECT_FALSE(m.Matches("-0"));
  }
  Matcher big = MatcherFor(R"({"type": "integer", "minimum": 5})");
  EXPECT_TRUE(big.Matches("1234567890123456"));
  // At most 16 digits, so that every parser reads a finite number.
  EXPECT_FALSE(big.Matches("12345678901234567"));
}

TEST(JsonSchemaTest, NumberBounds) {
  Matcher m = MatcherFor(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* ok : {"0", "0.5", "0.999", "1", "0.0"}) EXPECT_TRUE(m.Matches(ok)) << ok;
  for (const char* bad : {"1.5", "-0.5", "2", "1e0"}) EXPECT_FALSE(m.Matches(bad)) << bad;
  Matcher open = MatcherFor(R"({"type": "number", "exclusiveMinimum": 2, "exclusiveMaximum": 4})");
  for (const char* ok : {"2.5", "3", "3.99", "2.001"}) EXPECT_TRUE(open.Matches(ok)) << ok;
  for (const char* bad : {"2", "2.0", "4", "4.5", "1.9"}) EXPECT_FALSE(open.Matches(bad)) << bad;
  for (const nlohmann::json& v : Samples(open, 100)) {
    ASSERT_TRUE(v.is_number());
    ASSERT_GT(v.get<double>(), 2.0);
    ASSERT_LT(v.get<double>(), 4.0);
  }
}

TEST(JsonSchemaTest, StringsLengthsFormatsAndPatterns) {
  Matcher len = MatcherFor(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(len.Matches(R"("a")"));
  EXPECT_TRUE(len.Matches(R"("ab")"));
  EXPECT_TRUE(len.Matches(R"("a\nb")"));  // an escape is one character
  EXPECT_TRUE(len.Matches(R"("éàü")"));
  EXPECT_FALSE(len.Matches(R"("abcd")"));
  Matcher date = MatcherFor(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(date.Matches(R"("2026-12-07")"));
  EXPECT_FALSE(date.Matches(R"("2026-02-30")"));
  EXPECT_FALSE(date.Matches(R"("2026-13-01")"));
  Matcher uuid = MatcherFor(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(uuid.Matches(R"("123e4567-e89b-12d3-a456-426614174000")"));
  Matcher pattern = MatcherFor(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d+$"})");
  EXPECT_TRUE(pattern.Matches(R"("AB-12")"));
  EXPECT_FALSE(pattern.Matches(R"("AB-")"));
  // An unanchored pattern matches anywhere in the string.
  Matcher search = MatcherFor(R"({"type": "string", "pattern": "cat"})");
  EXPECT_TRUE(search.Matches(R"("concatenate")"));
  EXPECT_FALSE(search.Matches(R"("dog")"));
  Matcher escape = MatcherFor(R"({"type": "string"})");
  EXPECT_TRUE(escape.Matches(R"("a\"b\\c\u00e9\ud83d\ude00")"));
  EXPECT_FALSE(escape.Matches(R"("\ud83d")"));  // a lone surrogate
  EXPECT_FALSE(escape.Matches("\"a\x01\""));
}

TEST(JsonSchemaTest, EnumConstAnyOfAndTypeArrays) {
  Matcher e = MatcherFor(R"({"enum": ["red", 3, null, {"a": [1]}]})");
  EXPECT_TRUE(e.Matches(R"("red")"));
  EXPECT_TRUE(e.Matches("3"));
  EXPECT_TRUE(e.Matches("null"));
  EXPECT_TRUE(e.Matches(R"({"a":[1]})"));
  EXPECT_FALSE(e.Matches(R"("blue")"));
  Matcher c = MatcherFor(R"({"const": "only"})");
  EXPECT_TRUE(c.Matches(R"("only")"));
  EXPECT_FALSE(c.Matches(R"("other")"));
  Matcher any =
      MatcherFor(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})");
  EXPECT_TRUE(any.Matches("12"));
  EXPECT_TRUE(any.Matches(R"("x")"));
  EXPECT_FALSE(any.Matches(R"("xy")"));
  Matcher types = MatcherFor(R"({"type": ["string", "null"]})");
  EXPECT_TRUE(types.Matches("null"));
  EXPECT_TRUE(types.Matches(R"("s")"));
  EXPECT_FALSE(types.Matches("1"));
}

TEST(JsonSchemaTest, ArraysPrefixItemsAndBounds) {
  Matcher m = MatcherFor(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2,
                              "maxItems": 3})");
  EXPECT_FALSE(m.Matches("[1]"));
  EXPECT_TRUE(m.Matches("[1,2]"));
  EXPECT_TRUE(m.Matches("[1,2,3]"));
  EXPECT_FALSE(m.Matches("[1,2,3,4]"));
  Matcher tuple = MatcherFor(R"({"type": "array", "prefixItems": [{"type": "string"},
      {"type": "integer"}], "items": false})");
  EXPECT_TRUE(tuple.Matches(R"(["a",1])"));
  EXPECT_TRUE(tuple.Matches(R"(["a"])"));
  EXPECT_TRUE(tuple.Matches("[]"));
  EXPECT_FALSE(tuple.Matches(R"(["a",1,2])"));
  EXPECT_FALSE(tuple.Matches(R"([1,"a"])"));
  Matcher bounded_tuple = MatcherFor(R"({"type": "array", "prefixItems": [{"type": "string"},
      {"type": "integer"}, {"type": "null"}], "maxItems": 2, "minItems": 1})");
  EXPECT_TRUE(bounded_tuple.Matches(R"(["a",1])"));
  EXPECT_FALSE(bounded_tuple.Matches(R"(["a",1,null])"));
  EXPECT_FALSE(bounded_tuple.Matches("[]"));
  for (const nlohmann::json& v : Samples(m, 100)) {
    ASSERT_TRUE(v.is_array());
    ASSERT_GE(v.size(), 2u);
    ASSERT_LE(v.size(), 3u);
  }
}

TEST(JsonSchemaTest, RecursiveRefsAndDefs) {
  Matcher m = MatcherFor(R"({"$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"], "additionalProperties": false}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(m.Matches(R"({"value":1,"children":[{"value":2},{"value":3,"children":[]}]})"));
  EXPECT_FALSE(m.Matches(R"({"value":1,"children":[{"children":[]}]})"));
  Matcher root = MatcherFor(R"({"type": "object", "properties": {"next": {"$ref": "#"}},
      "additionalProperties": false})");
  EXPECT_TRUE(root.Matches(R"({"next":{"next":{}}})"));
}

TEST(JsonSchemaTest, AllOfOfObjectsMerges) {
  auto refused = JsonSchemaGrammar(R"({"allOf": [{"type": "object", "properties": {"a": {"type":
      "integer"}}, "required": ["a"]}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}],
      "additionalProperties": false})");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("excluded by additionalProperties: false"));
  EXPECT_TRUE(MatcherFor(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["a"]}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})")
                  .Matches(R"({"a":1,"b":"x"})"));
  // additionalProperties: false in one part keeps only the properties that part lists.
  Matcher closed =
      MatcherFor(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "c": {}},
      "additionalProperties": false}, {"properties": {"a": {"type": "integer"}, "b": {}}}]})");
  EXPECT_TRUE(closed.Matches(R"({"a":1})"));
  EXPECT_FALSE(closed.Matches(R"({"a":1,"b":2})"));
}

TEST(JsonSchemaTest, MapsAndAnyObjects) {
  Matcher map = MatcherFor(R"({"type": "object", "additionalProperties": {"type": "boolean"}})");
  EXPECT_TRUE(map.Matches(R"({"x":true,"y":false})"));
  EXPECT_TRUE(map.Matches("{}"));
  EXPECT_FALSE(map.Matches(R"({"x":1})"));
  auto compiled = CompiledGrammar::Create(JsonObjectGrammar());
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  Matcher object(*compiled);
  EXPECT_TRUE(object.Matches(R"({"a":[1,{"b":null}],"c":-2.5e3,"d":"\n"})"));
  EXPECT_FALSE(object.Matches("[1]"));
  EXPECT_FALSE(object.Matches(R"("x")"));
  for (const nlohmann::json& v : Samples(object, 200, 5)) ASSERT_TRUE(v.is_object());
}

TEST(JsonSchemaTest, RefusalsNameTheJsonPointer) {
  struct Case {
    const char* schema;
    const char* message;
  };
  const Case cases[] = {
      {R"({"type": "object", "properties": {"a": {"type": "string", "foo": 1}}})",
       "at /properties/a/foo: the keyword 'foo' is not supported"},
      {R"({"type": "number", "multipleOf": 3})", "at /multipleOf"},
      {R"({"not": {"type": "string"}})", "at /not"},
      {R"({"$ref": "#/$defs/missing"})", "at /$ref: '#/$defs/missing' names no definition"},
      {R"({"$ref": "http://example.com/schema"})", "at /$ref"},
      {R"({"type": "strange"})", "at /type: unknown type 'strange'"},
      {R"({"type": "string", "format": "hostname"})", "at /format: the format 'hostname'"},
      {R"({"type": "string", "pattern": "(a"})", "at /pattern"},
      {R"({"type": "string", "pattern": "a\"b"})", "must escape"},
      {R"({"type": "integer", "minimum": 5, "maximum": 2})", "no integer is in bounds"},
      {R"({"type": "number", "minimum": 0.5})", "at /minimum"},
      {R"({"type": "array", "minItems": 3, "maxItems": 1})", "at /maxItems"},
      {R"({"items": [{"type": "string"}]})", "at /items"},
      {R"({"enum": []})", "at /enum"},
      {R"({"type": "object", "required": ["x"], "properties": {}, "additionalProperties": false})",
       "at /required"},
      {R"(false)", "accepts nothing"},
      {R"({"type": )", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto grammar = JsonSchemaGrammar(c.schema);
    ASSERT_FALSE(grammar.ok()) << c.schema;
    EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(grammar.status().message(), HasSubstr(c.message)) << c.schema;
  }
}

TEST(JsonSchemaTest, AnnotationsAreIgnored) {
  Matcher m = MatcherFor(R"({"$schema": "https://json-schema.org/draft/2020-12/schema",
      "title": "T", "description": "d", "type": "boolean", "default": true, "examples": [false]})");
  EXPECT_TRUE(m.Matches("true"));
  EXPECT_FALSE(m.Matches("1"));
}

}  // namespace json_schema_test
}  // namespace kvserve::constraint
