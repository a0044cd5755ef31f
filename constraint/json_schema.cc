// The JSON Schema compiler: each subschema becomes a rule (memoised by JSON pointer, so that
// $ref recursion is a rule referring to itself), built from shared rules for JSON's tokens.
#include "constraint/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kvserve::constraint {
namespace {

// Ordered, so that properties are written in the schema's order.
using Json = nlohmann::ordered_json;

// The most digits of an integer part written: every parser reads such a number as a finite
// double (exponents have at most two digits).
constexpr int64_t kMaxDigits = 16;

// The formats, as regexes of the plain forms this compiler writes (see json_schema.h).
const std::map<std::string, std::string>& FormatPatterns() {
  static const auto* formats = [] {
    const std::string day31 = "(0[1-9]|[12][0-9]|3[01])";
    const std::string date = "[0-9]{4}-((0[13578]|1[02])-" + day31 +
                             "|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))";
    const std::string time =
        "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-"
        "9])";
    const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    const std::string label = "[a-z0-9]{1,63}";
    return new std::map<std::string, std::string>{
        {"date", date},
        {"time", time},
        {"date-time", date + "T" + time},
        {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
        {"email", "[a-z0-9]{1,32}(\\.[a-z0-9]{1,32}){0,3}@" + label + "(\\." + label + "){1,4}"},
        {"ipv4", octet + "(\\." + octet + "){3}"},
        {"ipv6", "[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}"},
        {"uri", "[a-z][a-z0-9+.-]{0,15}://" + label + "(\\." + label +
                    "){0,4}(/[A-Za-z0-9._~!$&'()*+,;=:@-]{0,32}){0,8}"},
    };
  }();
  return *formats;
}

const std::set<std::string>& Annotations() {
  static const auto* names =
      new std::set<std::string>{"title", "description", "default",    "examples", "$schema",
                                "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
  return *names;
}

std::string EscapePointerToken(const std::string& token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options) {
    ws_ = b_.Repeat("ws", {b_.Bytes(WhitespaceSet())}, 0, options.whitespace_bytes);
  }

  absl::StatusOr<Grammar> Compile() {
    absl::StatusOr<int32_t> rule = SchemaRule(root_, "", 0);
    if (!rule.ok()) return rule.status();
    // The whole output: the value, then optional whitespace before the end.
    const int32_t top = b_.AddRule("json");
    b_.AddAlternative(top, {b_.RuleRef(*rule)});
    return std::move(b_).Build(top);
  }

 private:
  int32_t AnyObject() {
    if (!any_object_) any_object_ = BuildGenericObject();
    return *any_object_;
  }

  static ByteSet WhitespaceSet() {
    ByteSet s;
    s.Add(' ');
    s.Add('\t');
    s.Add('\n');
    return s;
  }

  absl::Status Refuse(const std::string& pointer, const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("at ", pointer.empty() ? "/" : pointer, ": ", message));
  }

  // `text` as literal bytes, then the optional whitespace that may follow any token.
  std::vector<Element> Punct(std::string_view text) {
    std::vector<Element> seq = b_.Literal(text);
    seq.push_back(b_.RuleRef(ws_));
    return seq;
  }

  static void Append(std::vector<Element>& seq, const std::vector<Element>& more) {
    seq.insert(seq.end(), more.begin(), more.end());
  }

  // --- JSON's generic values ---------------------------------------------------------------

  int32_t StringChar() {
    if (string_char_) return *string_char_;
    const int32_t rule = b_.AddRule("string_char");
    // Any code point but '"', '\' and controls, or an escape.
    const int32_t plain =
        b_.CodePointClass("string_plain", {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    b_.AddAlternative(rule, {b_.RuleRef(plain)});
    ByteSet simple;
    for (char c : std::string("\"\\/bfnrt")) simple.Add(static_cast<uint8_t>(c));
    b_.AddAlternative(rule, {b_.Bytes(ByteSet::Single('\\')), b_.Bytes(simple)});
    ByteSet hex = ByteSet::Range('0', '9');
    hex.AddRange('a', 'f');
    hex.AddRange('A', 'F');
    const Element h = b_.Bytes(hex);
    // \uXXXX without lone surrogates: D800-DFFF only as a high + low pair.
    ByteSet not_d = ByteSet::Range('0', '9');
    not_d.AddRange('a', 'c');
    not_d.AddRange('A', 'C');
    not_d.AddRange('e', 'f');
    not_d.AddRange('E', 'F');
    ByteSet low_half = ByteSet::Range('0', '7');
    ByteSet high_89ab = ByteSet::Range('8', '9');
    high_89ab.AddRange('a', 'b');
    high_89ab.AddRange('A', 'B');
    ByteSet high_cdef = ByteSet::Range('c', 'f');
    high_cdef.AddRange('C', 'F');
    ByteSet d = ByteSet::Single('d');
    d.Add('D');
    const std::vector<Element> bs_u = b_.Literal("\\u");
    std::vector<Element> seq = bs_u;  // not starting with d: any
    Append(seq, {b_.Bytes(not_d), h, h, h});
    b_.AddAlternative(rule, seq);
    seq = bs_u;  // d0-d7: not a surrogate
    Append(seq, {b_.Bytes(d), b_.Bytes(low_half), h, h});
    b_.AddAlternative(rule, seq);
    seq = bs_u;  // a high surrogate then a low one
    Append(seq, {b_.Bytes(d), b_.Bytes(high_89ab), h, h});
    Append(seq, bs_u);
    Append(seq, {b_.Bytes(d), b_.Bytes(high_cdef), h, h});
    b_.AddAlternative(rule, seq);
    string_char_ = rule;
    return rule;
  }

  // A string of min..max characters (max < 0: any length).
  int32_t StringRule(int64_t min, int64_t max) {
    const int32_t chars = b_.Repeat("string_chars", {b_.RuleRef(StringChar())}, min, max);
    const int32_t rule = b_.AddRule("string");
    std::vector<Element> seq = b_.Literal("\"");
    seq.push_back(b_.RuleRef(chars));
    Append(seq, Punct("\""));
    b_.AddAlternative(rule, seq);
    return rule;
  }

  int32_t AnyString() {
    if (!any_string_) any_string_ = StringRule(0, -1);
    return *any_string_;
  }

  // Digits of the integer part: 0, or a non-zero digit then digits.
  std::vector<Element> NaturalDigits() {
    const int32_t rest =
        b_.Repeat("digits", {b_.Bytes(ByteSet::Range('0', '9'))}, 0, kMaxDigits - 1);
    const int32_t natural = b_.AddRule("natural");
    b_.AddAlternative(natural, b_.Literal("0"));
    b_.AddAlternative(natural, {b_.Bytes(ByteSet::Range('1', '9')), b_.RuleRef(rest)});
    return {b_.RuleRef(natural)};
  }

  std::vector<Element> Fraction() {
    const int32_t digits = b_.Repeat("fraction", {b_.Bytes(ByteSet::Range('0', '9'))}, 1, -1);
    const int32_t frac = b_.AddRule("fraction_opt");
    std::vector<Element> seq = b_.Literal(".");
    seq.push_back(b_.RuleRef(digits));
    b_.AddAlternative(frac, seq);
    b_.AddAlternative(frac, {});
    return {b_.RuleRef(frac)};
  }

  int32_t AnyNumber(bool integer) {
    std::optional<int32_t>& memo = integer ? any_integer_ : any_number_;
    if (memo) return *memo;
    const int32_t rule = b_.AddRule(integer ? "integer" : "number");
    const int32_t sign = b_.Repeat("minus", b_.Literal("-"), 0, 1);
    std::vector<Element> seq = {b_.RuleRef(sign)};
    Append(seq, NaturalDigits());
    if (!integer) {
      Append(seq, Fraction());
      const int32_t exp = b_.AddRule("exponent_opt");
      ByteSet e = ByteSet::Single('e');
      e.Add('E');
      ByteSet pm = ByteSet::Single('+');
      pm.Add('-');
      const int32_t pm_opt = b_.Repeat("exponent_sign", {b_.Bytes(pm)}, 0, 1);
      const int32_t exp_digits =
          b_.Repeat("exponent_digits", {b_.Bytes(ByteSet::Range('0', '9'))}, 1, 2);
      b_.AddAlternative(exp, {b_.Bytes(e), b_.RuleRef(pm_opt), b_.RuleRef(exp_digits)});
      b_.AddAlternative(exp, {});
      seq.push_back(b_.RuleRef(exp));
    }
    seq.push_back(b_.RuleRef(ws_));
    b_.AddAlternative(rule, seq);
    memo = rule;
    return rule;
  }

  int32_t AnyValue() {
    if (any_value_) return *any_value_;
    any_value_ = b_.AddRule("value");
    const int32_t object = AnyObject();
    const int32_t array = b_.AddRule("array");
    {
      const int32_t more_items = b_.AddRule("array_more");
      std::vector<Element> more = Punct(",");
      more.push_back(b_.RuleRef(*any_value_));
      const int32_t more_star = b_.Repeat("array_more_star", {b_.RuleRef(more_items)}, 0, -1);
      b_.AddAlternative(more_items, more);
      std::vector<Element> seq = Punct("[");
      seq.push_back(b_.RuleRef(*any_value_));
      seq.push_back(b_.RuleRef(more_star));
      Append(seq, Punct("]"));
      b_.AddAlternative(array, seq);
      b_.AddAlternative(array, [&] {
        std::vector<Element> empty = Punct("[");
        Append(empty, Punct("]"));
        return empty;
      }());
    }
    for (int32_t r : {object, array, AnyString(), AnyNumber(false)}) {
      b_.AddAlternative(*any_value_, {b_.RuleRef(r)});
    }
    for (const char* word : {"true", "false", "null"}) b_.AddAlternative(*any_value_, Punct(word));
    return *any_value_;
  }

  int32_t BuildGenericObject() {
    const int32_t rule = b_.AddRule("object");
    // Reserved before AnyValue (which refers back to it) builds its members.
    const int32_t member = b_.AddRule("member");
    const int32_t more = b_.AddRule("member_more");
    const int32_t more_star = b_.Repeat("members", {b_.RuleRef(more)}, 0, -1);
    std::vector<Element> open = Punct("{");
    std::vector<Element> seq = open;
    seq.push_back(b_.RuleRef(member));
    seq.push_back(b_.RuleRef(more_star));
    Append(seq, Punct("}"));
    b_.AddAlternative(rule, seq);
    std::vector<Element> empty = open;
    Append(empty, Punct("}"));
    b_.AddAlternative(rule, empty);
    any_object_ = rule;
    const int32_t value = AnyValue();
    std::vector<Element> m = {b_.RuleRef(AnyString())};
    Append(m, Punct(":"));
    m.push_back(b_.RuleRef(value));
    b_.AddAlternative(member, m);
    std::vector<Element> again = Punct(",");
    again.push_back(b_.RuleRef(member));
    b_.AddAlternative(more, again);
    return rule;
  }

  // --- integer ranges ------------------------------------------------------------------------

  // Alternatives of `rule` for the decimal writings of [lo, hi], 0 <= lo <= hi, same digit count.
  void DigitsRange(int32_t rule, std::vector<Element> prefix, const std::string& lo,
                   const std::string& hi) {
    const size_t n = lo.size();
    const auto digit = [](char c) { return static_cast<uint8_t>(c); };
    if (n == 1) {
      prefix.push_back(b_.Bytes(ByteSet::Range(digit(lo[0]), digit(hi[0]))));
      b_.AddAlternative(rule, std::move(prefix));
      return;
    }
    if (lo[0] == hi[0]) {
      prefix.push_back(b_.Bytes(ByteSet::Single(digit(lo[0]))));
      DigitsRange(rule, std::move(prefix), lo.substr(1), hi.substr(1));
      return;
    }
    const std::string zeros(n - 1, '0');
    const std::string nines(n - 1, '9');
    uint8_t mid_lo = digit(lo[0]);
    uint8_t mid_hi = digit(hi[0]);
    if (lo.substr(1) != zeros) {
      std::vector<Element> p = prefix;
      p.push_back(b_.Bytes(ByteSet::Single(digit(lo[0]))));
      DigitsRange(rule, std::move(p), lo.substr(1), nines);
      ++mid_lo;
    }
    if (hi.substr(1) != nines) {
      std::vector<Element> p = prefix;
      p.push_back(b_.Bytes(ByteSet::Single(digit(hi[0]))));
      DigitsRange(rule, std::move(p), zeros, hi.substr(1));
      --mid_hi;
    }
    if (mid_lo <= mid_hi) {
      std::vector<Element> p = prefix;
      p.push_back(b_.Bytes(ByteSet::Range(mid_lo, mid_hi)));
      for (size_t i = 1; i < n; ++i) p.push_back(b_.Bytes(ByteSet::Range('0', '9')));
      b_.AddAlternative(rule, std::move(p));
    }
  }

  // Alternatives of `rule` (each after `prefix`) for the naturals in [lo, hi]; hi unset: no
  // upper bound. Written without leading zeros.
  void NaturalRange(int32_t rule, const std::vector<Element>& prefix, uint64_t lo,
                    std::optional<uint64_t> hi) {
    std::string a = std::to_string(lo);
    for (size_t digits = a.size();; ++digits) {
      const std::string top(digits, '9');
      const std::string from = digits == a.size() ? a : "1" + std::string(digits - 1, '0');
      if (hi && std::to_string(*hi).size() == digits) {
        DigitsRange(rule, prefix, from, std::to_string(*hi));
        return;
      }
      DigitsRange(rule, prefix, from, top);
      if (!hi && digits >= static_cast<size_t>(kMaxDigits)) return;
    }
  }

  // An integer in [lo, hi] (unset: unbounded on that side); lo <= hi.
  int32_t IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    const int32_t rule = b_.AddRule("integer_range");
    const std::vector<Element> minus = b_.Literal("-");
    // Non-negative part: [max(lo, 0), hi].
    if (!hi || *hi >= 0) {
      const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
      std::optional<uint64_t> to;
      if (hi) to = static_cast<uint64_t>(*hi);
      NaturalRange(rule, {}, from, to);
    }
    // Negative part: -[max(-hi, 1), -lo].
    if (!lo || *lo < 0) {
      const uint64_t from = hi && *hi < 0 ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 1;
      std::optional<uint64_t> to;
      if (lo) to = static_cast<uint64_t>(-(*lo + 1)) + 1;
      NaturalRange(rule, minus, from, to);
    }
    const int32_t with_ws = b_.AddRule("integer_bounded");
    b_.AddAlternative(with_ws, {b_.RuleRef(rule), b_.RuleRef(ws_)});
    return with_ws;
  }

  // --- schemas -------------------------------------------------------------------------------

  absl::StatusOr<int32_t> SchemaRule(const Json& schema, const std::string& pointer, int depth) {
    if (auto it = memo_.find(pointer); it != memo_.end()) return it->second;
    if (depth > options_.max_depth) {
      return Refuse(pointer, absl::StrCat("nested deeper than the limit of ", options_.max_depth));
    }
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) return Refuse(pointer, "the schema false accepts nothing");
      return AnyValue();
    }
    if (!schema.is_object()) return Refuse(pointer, "a schema must be an object or a boolean");
    // Reserve the rule first, so that a $ref back to this pointer refers to it.
    const int32_t rule = b_.AddRule(pointer.empty() ? "schema" : pointer);
    memo_[pointer] = rule;
    absl::Status s = FillSchema(rule, schema, pointer, depth);
    if (!s.ok()) return s;
    return rule;
  }

  absl::StatusOr<const Json*> Resolve(const std::string& ref, const std::string& pointer,
                                      std::string* target) {
    if (ref == "#") {
      *target = "";
      return &root_;
    }
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p(prefix);
      if (ref.compare(0, p.size(), p) == 0) {
        const std::string section = p.substr(2, p.size() - 3);
        const std::string name = ref.substr(p.size());
        if (!root_.contains(section) || !root_[section].is_object() ||
            !root_[section].contains(name)) {
          return Refuse(pointer + "/$ref", absl::StrCat("'", ref, "' names no definition"));
        }
        *target = absl::StrCat("/", section, "/", name);
        return &root_[section][name];
      }
    }
    return Refuse(pointer + "/$ref",
                  absl::StrCat("'", ref, "': only '#', '#/$defs/NAME' and '#/definitions/NAME'"));
  }

  absl::Status FillSchema(int32_t rule, const Json& schema, const std::string& pointer, int depth) {
    static const std::set<std::string> kKnown = {"type",
                                                 "properties",
                                                 "required",
                                                 "additionalProperties",
                                                 "items",
                                                 "prefixItems",
                                                 "minItems",
                                                 "maxItems",
                                                 "enum",
                                                 "const",
                                                 "anyOf",
                                                 "oneOf",
                                                 "allOf",
                                                 "$ref",
                                                 "$defs",
                                                 "definitions",
                                                 "minLength",
                                                 "maxLength",
                                                 "pattern",
                                                 "format",
                                                 "minimum",
                                                 "maximum",
                                                 "exclusiveMinimum",
                                                 "exclusiveMaximum"};
    for (const auto& [key, value] : schema.items()) {
      if (!kKnown.count(key) && !Annotations().count(key)) {
        return Refuse(pointer + "/" + EscapePointerToken(key),
                      absl::StrCat("the keyword '", key, "' is not supported"));
      }
    }
    if (schema.contains("$ref")) {
      if (!schema["$ref"].is_string()) return Refuse(pointer + "/$ref", "must be a string");
      for (const auto& [key, value] : schema.items()) {
        if (key != "$ref" && key != "$defs" && key != "definitions" && !Annotations().count(key)) {
          return Refuse(pointer + "/" + EscapePointerToken(key),
                        "keywords beside $ref are not supported");
        }
      }
      std::string target;
      absl::StatusOr<const Json*> resolved = Resolve(schema["$ref"], pointer, &target);
      if (!resolved.ok()) return resolved.status();
      absl::StatusOr<int32_t> to = SchemaRule(**resolved, target, depth + 1);
      if (!to.ok()) return to.status();
      b_.AddAlternative(rule, {b_.RuleRef(*to)});
      return absl::OkStatus();
    }
    if (schema.contains("const") || schema.contains("enum")) {
      std::vector<Json> values;
      if (schema.contains("const")) values.push_back(schema["const"]);
      if (schema.contains("enum")) {
        if (!schema["enum"].is_array() || schema["enum"].empty()) {
          return Refuse(pointer + "/enum", "must be a non-empty array");
        }
        for (const Json& v : schema["enum"]) {
          if (!schema.contains("const") || v == schema["const"]) values.push_back(v);
        }
        if (schema.contains("const")) values.erase(values.begin());
      }
      if (values.empty()) return Refuse(pointer, "const and enum leave no value");
      for (const auto& [key, value] : schema.items()) {
        if (key != "const" && key != "enum" && key != "type" && !Annotations().count(key)) {
          return Refuse(pointer + "/" + EscapePointerToken(key),
                        "keywords beside enum or const are not supported (but type)");
        }
      }
      int added = 0;
      for (const Json& v : values) {
        if (schema.contains("type") && !MatchesType(v, schema["type"])) continue;
        b_.AddAlternative(rule, Punct(v.dump(-1, ' ', false, Json::error_handler_t::replace)));
        ++added;
      }
      if (added == 0) return Refuse(pointer + "/type", "no value of enum or const has this type");
      return absl::OkStatus();
    }
    for (const char* combinator : {"anyOf", "oneOf"}) {
      if (!schema.contains(combinator)) continue;
      const Json& branches = schema[combinator];
      const std::string where = pointer + "/" + combinator;
      if (!branches.is_array() || branches.empty())
        return Refuse(where, "must be a non-empty array");
      for (const auto& [key, value] : schema.items()) {
        if (key != combinator && key != "$defs" && key != "definitions" &&
            !Annotations().count(key)) {
          return Refuse(pointer + "/" + EscapePointerToken(key),
                        absl::StrCat("keywords beside ", combinator, " are not supported"));
        }
      }
      for (size_t i = 0; i < branches.size(); ++i) {
        absl::StatusOr<int32_t> branch =
            SchemaRule(branches[i], absl::StrCat(where, "/", i), depth + 1);
        if (!branch.ok()) return branch.status();
        b_.AddAlternative(rule, {b_.RuleRef(*branch)});
      }
      return absl::OkStatus();
    }
    if (schema.contains("allOf")) {
      absl::StatusOr<Json> merged = MergeAllOf(schema, pointer);
      if (!merged.ok()) return merged.status();
      merged_.push_back(std::make_unique<Json>(*std::move(merged)));
      return FillSchema(rule, *merged_.back(), pointer, depth);
    }
    // Types: the listed ones, or every type the keywords present allow.
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t);
      } else if (t.is_array() && !t.empty()) {
        for (const Json& name : t) {
          if (!name.is_string()) return Refuse(pointer + "/type", "must name types");
          types.push_back(name);
        }
      } else {
        return Refuse(pointer + "/type", "must be a type name or an array of them");
      }
    } else {
      types = {"object", "array", "string", "number", "boolean", "null"};
    }
    for (const std::string& type : types) {
      absl::StatusOr<int32_t> r = TypedRule(type, schema, pointer, depth);
      if (!r.ok()) return r.status();
      b_.AddAlternative(rule, {b_.RuleRef(*r)});
    }
    return absl::OkStatus();
  }

  static bool MatchesType(const Json& v, const Json& type) {
    std::vector<std::string> names;
    if (type.is_string()) names.push_back(type);
    if (type.is_array()) {
      for (const Json& n : type) {
        if (n.is_string()) names.push_back(n);
      }
    }
    for (const std::string& n : names) {
      if ((n == "string" && v.is_string()) || (n == "boolean" && v.is_boolean()) ||
          (n == "null" && v.is_null()) || (n == "object" && v.is_object()) ||
          (n == "array" && v.is_array()) || (n == "number" && v.is_number()) ||
          (n == "integer" &&
           (v.is_number_integer() ||
            (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())))) {
        return true;
      }
    }
    return false;
  }

  absl::StatusOr<Json> MergeAllOf(const Json& schema, const std::string& pointer) {
    const Json& branches = schema["allOf"];
    const std::string where = pointer + "/allOf";
    if (!branches.is_array() || branches.empty()) return Refuse(where, "must be a non-empty array");
    Json merged = schema;
    merged.erase("allOf");
    // additionalProperties: false in any part allows only that part's own properties, so the
    // merged object may hold only the properties every such part lists.
    std::optional<std::set<std::string>> allowed;
    const auto restrict = [&](const Json& part, const std::string& where) -> absl::Status {
      if (!part.contains("additionalProperties") || part["additionalProperties"] == Json(true)) {
        return absl::OkStatus();
      }
      if (part["additionalProperties"] != Json(false)) {
        return Refuse(where + "/additionalProperties", "inside allOf, only true or false");
      }
      std::set<std::string> names;
      if (part.contains("properties") && part["properties"].is_object()) {
        for (const auto& [name, sub] : part["properties"].items()) names.insert(name);
      }
      if (allowed) {
        std::set<std::string> both;
        for (const std::string& n : names) {
          if (allowed->count(n)) both.insert(n);
        }
        names = std::move(both);
      }
      allowed = std::move(names);
      return absl::OkStatus();
    };
    if (absl::Status s = restrict(schema, pointer); !s.ok()) return s;
    merged.erase("additionalProperties");
    for (size_t i = 0; i < branches.size(); ++i) {
      Json branch = branches[i];
      if (branch.is_object() && branch.contains("$ref") && branch["$ref"].is_string()) {
        std::string target;
        absl::StatusOr<const Json*> resolved =
            Resolve(branch["$ref"], absl::StrCat(where, "/", i), &target);
        if (!resolved.ok()) return resolved.status();
        branch = **resolved;
      }
      if (!branch.is_object()) return Refuse(absl::StrCat(where, "/", i), "must be an object");
      if (absl::Status s = restrict(branch, absl::StrCat(where, "/", i)); !s.ok()) return s;
      for (const auto& [key, value] : branch.items()) {
        if (Annotations().count(key) || key == "additionalProperties") continue;
        if (key == "properties") {
          for (const auto& [name, sub] : value.items()) {
            if (merged["properties"].contains(name) && merged["properties"][name] != sub) {
              return Refuse(absl::StrCat(where, "/", i, "/properties/", EscapePointerToken(name)),
                            "allOf branches give this property different schemas");
            }
            merged["properties"][name] = sub;
          }
        } else if (key == "required") {
          for (const Json& name : value) merged["required"].push_back(name);
        } else if (!merged.contains(key) || merged[key] == value) {
          merged[key] = value;
        } else {
          return Refuse(absl::StrCat(where, "/", i, "/", EscapePointerToken(key)),
                        "allOf branches that disagree on this keyword do not reduce");
        }
      }
    }
    if (allowed) {
      if (merged.contains("properties")) {
        Json kept = Json::object();
        for (const auto& [name, sub] : merged["properties"].items()) {
          if (allowed->count(name)) kept[name] = sub;
        }
        merged["properties"] = kept;
      }
      if (merged.contains("required")) {
        for (const Json& name : merged["required"]) {
          if (name.is_string() && !allowed->count(name.get<std::string>())) {
            return Refuse(where, absl::StrCat("the required property '", name.get<std::string>(),
                                              "' is excluded by additionalProperties: false"));
          }
        }
      }
      merged["additionalProperties"] = false;
    }
    return merged;
  }

  // The rule of one type; keywords of other types do not constrain it.
  absl::StatusOr<int32_t> TypedRule(const std::string& type, const Json& schema,
                                    const std::string& pointer, int depth) {
    if (type == "null") return Literal("null");
    if (type == "boolean") {
      const int32_t rule = b_.AddRule("boolean");
      b_.AddAlternative(rule, Punct("true"));
      b_.AddAlternative(rule, Punct("false"));
      return rule;
    }
    if (type == "string") return StringSchema(schema, pointer);
    if (type == "integer" || type == "number")
      return NumberSchema(type == "integer", schema, pointer);
    if (type == "array") return ArraySchema(schema, pointer, depth);
    if (type == "object") return ObjectSchema(schema, pointer, depth);
    return Refuse(pointer + "/type", absl::StrCat("unknown type '", type, "'"));
  }

  int32_t Literal(const std::string& text) {
    const int32_t rule = b_.AddRule(text);
    b_.AddAlternative(rule, Punct(text));
    return rule;
  }

  absl::StatusOr<int64_t> Count(const Json& schema, const char* key, const std::string& pointer) {
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Refuse(pointer + "/" + key, "must be a non-negative integer");
    }
    return v.get<int64_t>();
  }

  absl::StatusOr<int32_t> StringSchema(const Json& schema, const std::string& pointer) {
    int64_t min = 0;
    int64_t max = -1;
    if (schema.contains("minLength")) {
      absl::StatusOr<int64_t> v = Count(schema, "minLength", pointer);
      if (!v.ok()) return v.status();
      min = *v;
    }
    if (schema.contains("maxLength")) {
      absl::StatusOr<int64_t> v = Count(schema, "maxLength", pointer);
      if (!v.ok()) return v.status();
      max = *v;
    }
    if (max >= 0 && max < min) return Refuse(pointer + "/maxLength", "is below minLength");
    if (std::max(min, max) > options_.regex.max_repeat) {
      return Refuse(pointer + (max > min ? "/maxLength" : "/minLength"),
                    absl::StrCat("above the limit of ", options_.regex.max_repeat));
    }
    const bool has_pattern = schema.contains("pattern");
    const bool has_format = schema.contains("format");
    if (!has_pattern && !has_format) {
      return min == 0 && max < 0 ? AnyString() : StringRule(min, max);
    }
    if (has_pattern && has_format) {
      return Refuse(pointer + "/format", "format together with pattern is not supported");
    }
    if (schema.contains("minLength") || schema.contains("maxLength")) {
      return Refuse(pointer + (schema.contains("minLength") ? "/minLength" : "/maxLength"),
                    absl::StrCat("length bounds together with ", has_pattern ? "pattern" : "format",
                                 " are not supported"));
    }
    std::string pattern;
    RegexMode mode;
    mode.json_string = true;
    std::string where = pointer + "/pattern";
    if (has_pattern) {
      if (!schema["pattern"].is_string()) return Refuse(where, "must be a string");
      pattern = schema["pattern"];
      mode.search = true;
    } else {
      where = pointer + "/format";
      if (!schema["format"].is_string()) return Refuse(where, "must be a string");
      auto it = FormatPatterns().find(schema["format"].get<std::string>());
      if (it == FormatPatterns().end()) {
        return Refuse(where, absl::StrCat("the format '", schema["format"].get<std::string>(),
                                          "' is not supported"));
      }
      pattern = it->second;
    }
    absl::StatusOr<int32_t> body = AddRegexRule(b_, pattern, options_.regex, mode);
    if (!body.ok()) return Refuse(where, std::string(body.status().message()));
    const int32_t rule = b_.AddRule("string_pattern");
    std::vector<Element> seq = b_.Literal("\"");
    seq.push_back(b_.RuleRef(*body));
    Append(seq, Punct("\""));
    b_.AddAlternative(rule, seq);
    return rule;
  }

  absl::StatusOr<int32_t> NumberSchema(bool integer, const Json& schema,
                                       const std::string& pointer) {
    std::optional<double> lo;
    std::optional<double> hi;
    bool lo_exclusive = false;
    bool hi_exclusive = false;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!schema.contains(key)) continue;
      const Json& v = schema[key];
      if (!v.is_number()) return Refuse(pointer + "/" + key, "must be a number");
      const double x = v.get<double>();
      if (std::abs(x) > 9e15) return Refuse(pointer + "/" + key, "beyond +-9e15");
      const std::string k(key);
      if (k == "minimum" || k == "exclusiveMinimum") {
        const bool exclusive = k == "exclusiveMinimum";
        if (!lo || x > *lo || (x == *lo && exclusive)) {
          lo = x;
          lo_exclusive = exclusive;
        }
      } else {
        const bool exclusive = k == "exclusiveMaximum";
        if (!hi || x < *hi || (x == *hi && exclusive)) {
          hi = x;
          hi_exclusive = exclusive;
        }
      }
    }
    if (!lo && !hi) return AnyNumber(integer);
    const std::string bound_key = lo ? (lo_exclusive ? "/exclusiveMinimum" : "/minimum")
                                     : (hi_exclusive ? "/exclusiveMaximum" : "/maximum");
    if (integer) {
      std::optional<int64_t> ilo;
      std::optional<int64_t> ihi;
      if (lo) ilo = static_cast<int64_t>(lo_exclusive ? std::floor(*lo) + 1 : std::ceil(*lo));
      if (hi) ihi = static_cast<int64_t>(hi_exclusive ? std::ceil(*hi) - 1 : std::floor(*hi));
      if (ilo && ihi && *ilo > *ihi) return Refuse(pointer + bound_key, "no integer is in bounds");
      return IntegerRange(ilo, ihi);
    }
    // Numbers: integer-valued bounds >= 0 only; the integer part in range, a fraction where it
    // stays below the upper bound.
    for (const auto& [bound, key] : {std::pair{lo, "minimum"}, std::pair{hi, "maximum"}}) {
      if (bound && (*bound < 0 || std::floor(*bound) != *bound)) {
        return Refuse(pointer + "/" + key,
                      "bounds on a number must be integers >= 0 (use type integer otherwise)");
      }
    }
    const int64_t from = lo ? static_cast<int64_t>(*lo) : 0;
    const int32_t rule = b_.AddRule("number_range");
    // n.fraction with lo <= n (exclusive lo: a fraction > 0 at n == lo, or n > lo) and n < hi.
    const std::optional<int64_t> to =
        hi ? std::optional<int64_t>(static_cast<int64_t>(*hi)) : std::nullopt;
    if (!to || *to - 1 >= from) {
      const int32_t ints = IntegerRangeBare(from + (lo_exclusive ? 1 : 0),
                                            to ? std::optional<int64_t>(*to - 1) : std::nullopt);
      if (!lo_exclusive || !to || *to - 1 >= from + 1) {
        std::vector<Element> seq = {b_.RuleRef(ints)};
        Append(seq, Fraction());
        seq.push_back(b_.RuleRef(ws_));
        b_.AddAlternative(rule, seq);
      }
    }
    if (lo_exclusive && (!to || from < *to)) {
      // lo itself with a fraction that is not all zeros.
      const int32_t nonzero = b_.AddRule("fraction_nonzero");
      const int32_t zeros = b_.Repeat("zeros", b_.Literal("0"), 0, -1);
      const int32_t any_digits = b_.Repeat("digits", {b_.Bytes(ByteSet::Range('0', '9'))}, 0, -1);
      b_.AddAlternative(
          nonzero, {b_.RuleRef(zeros), b_.Bytes(ByteSet::Range('1', '9')), b_.RuleRef(any_digits)});
      std::vector<Element> seq = b_.Literal(std::to_string(from) + ".");
      seq.push_back(b_.RuleRef(nonzero));
      seq.push_back(b_.RuleRef(ws_));
      b_.AddAlternative(rule, seq);
    }
    if (to && !hi_exclusive && (*to > from || (*to == from && !lo_exclusive))) {
      b_.AddAlternative(rule, Punct(std::to_string(*to)));
    }
    return rule;
  }

  int32_t IntegerRangeBare(int64_t lo, std::optional<int64_t> hi) {
    const int32_t rule = b_.AddRule("natural_range");
    std::optional<uint64_t> to;
    if (hi) to = static_cast<uint64_t>(*hi);
    NaturalRange(rule, {}, static_cast<uint64_t>(lo), to);
    return rule;
  }

  absl::StatusOr<int32_t> ArraySchema(const Json& schema, const std::string& pointer, int depth) {
    int64_t min = 0;
    int64_t max = -1;
    if (schema.contains("minItems")) {
      absl::StatusOr<int64_t> v = Count(schema, "minItems", pointer);
      if (!v.ok()) return v.status();
      min = *v;
    }
    if (schema.contains("maxItems")) {
      absl::StatusOr<int64_t> v = Count(schema, "maxItems", pointer);
      if (!v.ok()) return v.status();
      max = *v;
    }
    if (max >= 0 && max < min) return Refuse(pointer + "/maxItems", "is below minItems");
    if (std::max(min, max) > options_.regex.max_repeat) {
      return Refuse(pointer + (max > min ? "/maxItems" : "/minItems"),
                    absl::StrCat("above the limit of ", options_.regex.max_repeat));
    }
    std::vector<int32_t> prefix;
    if (schema.contains("prefixItems")) {
      const Json& items = schema["prefixItems"];
      if (!items.is_array()) return Refuse(pointer + "/prefixItems", "must be an array");
      for (size_t i = 0; i < items.size(); ++i) {
        absl::StatusOr<int32_t> r =
            SchemaRule(items[i], absl::StrCat(pointer, "/prefixItems/", i), depth + 1);
        if (!r.ok()) return r.status();
        prefix.push_back(*r);
      }
    }
    std::optional<int32_t> item;
    if (!schema.contains("items") || schema["items"].is_object() || schema["items"] == Json(true)) {
      absl::StatusOr<int32_t> r = schema.contains("items")
                                      ? SchemaRule(schema["items"], pointer + "/items", depth + 1)
                                      : absl::StatusOr<int32_t>(AnyValue());
      if (!r.ok()) return r.status();
      item = *r;
    } else if (schema["items"] != Json(false)) {
      return Refuse(pointer + "/items", "must be a schema or false");
    }
    // Items at index i: prefix[i] while i < prefix.size(), then `item` (none: the array ends).
    const int64_t num_prefix = static_cast<int64_t>(prefix.size());
    const int64_t most = item ? max : (max < 0 ? num_prefix : std::min(max, num_prefix));
    if (min > (item ? min : num_prefix) || (most >= 0 && min > most)) {
      return Refuse(pointer + "/minItems", "more items than the array can hold");
    }
    const int32_t rule = b_.AddRule("array");
    // tail(i): the items from index i on, i >= 1, each after a comma.
    std::vector<Element> open = Punct("[");
    std::vector<Element> close = Punct("]");
    if (min == 0) {
      std::vector<Element> empty = open;
      Append(empty, close);
      b_.AddAlternative(rule, empty);
    }
    if (most == 0) return rule;
    const auto item_at = [&](int64_t i) { return i < num_prefix ? prefix[i] : *item; };
    // Positions 1 .. k-1 are written one by one (prefix items, as far as the bound allows);
    // from k on, repeated `item`s; position 0 opens the array.
    const int64_t k = std::max<int64_t>(1, most >= 0 ? std::min(num_prefix, most) : num_prefix);
    int32_t tail = -1;
    if (item && k >= num_prefix && (most < 0 || most > k)) {
      std::vector<Element> after = Punct(",");
      after.push_back(b_.RuleRef(*item));
      tail =
          b_.Repeat("array_items", after, std::max<int64_t>(min - k, 0), most < 0 ? -1 : most - k);
    } else {
      tail = b_.AddRule("array_end");
      b_.AddAlternative(tail, {});
    }
    for (int64_t i = k - 1; i >= 1; --i) {
      const int32_t at = b_.AddRule("array_at");
      std::vector<Element> seq = Punct(",");
      seq.push_back(b_.RuleRef(item_at(i)));
      seq.push_back(b_.RuleRef(tail));
      b_.AddAlternative(at, seq);
      if (i >= min) b_.AddAlternative(at, {});
      tail = at;
    }
    std::vector<Element> seq = open;
    seq.push_back(b_.RuleRef(item_at(0)));
    seq.push_back(b_.RuleRef(tail));
    Append(seq, close);
    b_.AddAlternative(rule, seq);
    return rule;
  }

  absl::StatusOr<int32_t> ObjectSchema(const Json& schema, const std::string& pointer, int depth) {
    std::vector<std::pair<std::string, int32_t>> props;  // in the schema's order
    if (schema.contains("properties")) {
      const Json& p = schema["properties"];
      if (!p.is_object()) return Refuse(pointer + "/properties", "must be an object");
      // nlohmann's json sorts keys; the schema's own order comes from the ordered parse.
      for (const auto& [name, sub] : p.items()) {
        absl::StatusOr<int32_t> r =
            SchemaRule(sub, pointer + "/properties/" + EscapePointerToken(name), depth + 1);
        if (!r.ok()) return r.status();
        props.push_back({name, *r});
      }
    }
    std::set<std::string> required;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) return Refuse(pointer + "/required", "must be an array of names");
      for (const Json& name : r) {
        if (!name.is_string()) return Refuse(pointer + "/required", "must be an array of names");
        required.insert(name.get<std::string>());
      }
    }
    for (const std::string& name : required) {
      bool listed = false;
      for (const auto& p : props) listed = listed || p.first == name;
      if (!listed) {
        // A required property the schema does not describe: any value, unless none may be added.
        if (schema.contains("additionalProperties") &&
            schema["additionalProperties"] == Json(false)) {
          return Refuse(pointer + "/required",
                        absl::StrCat("'", name, "' is required but additionalProperties is false"));
        }
        int32_t value = AnyValue();
        if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
          absl::StatusOr<int32_t> r = SchemaRule(schema["additionalProperties"],
                                                 pointer + "/additionalProperties", depth + 1);
          if (!r.ok()) return r.status();
          value = *r;
        }
        props.push_back({name, value});
      }
    }
    std::optional<int32_t> additional;
    if (props.empty()) {
      if (!schema.contains("additionalProperties") ||
          schema["additionalProperties"] == Json(true)) {
        additional = AnyValue();
      } else if (schema["additionalProperties"].is_object()) {
        absl::StatusOr<int32_t> r = SchemaRule(schema["additionalProperties"],
                                               pointer + "/additionalProperties", depth + 1);
        if (!r.ok()) return r.status();
        additional = *r;
      } else if (schema["additionalProperties"] != Json(false)) {
        return Refuse(pointer + "/additionalProperties", "must be a boolean or a schema");
      }
    } else if (schema.contains("additionalProperties") &&
               !schema["additionalProperties"].is_boolean() &&
               !schema["additionalProperties"].is_object()) {
      return Refuse(pointer + "/additionalProperties", "must be a boolean or a schema");
    } else if (schema.contains("additionalProperties") &&
               schema["additionalProperties"].is_object()) {
      // Checked for errors even though listed objects never get additional members.
      absl::StatusOr<int32_t> r =
          SchemaRule(schema["additionalProperties"], pointer + "/additionalProperties", depth + 1);
      if (!r.ok()) return r.status();
    }
    const int32_t rule = b_.AddRule("object");
    std::vector<Element> open = Punct("{");
    std::vector<Element> close = Punct("}");
    if (additional) {
      // A map: any number of string keys with values of the schema.
      const int32_t member = b_.AddRule("map_member");
      std::vector<Element> m = {b_.RuleRef(AnyString())};
      Append(m, Punct(":"));
      m.push_back(b_.RuleRef(*additional));
      b_.AddAlternative(member, m);
      std::vector<Element> again = Punct(",");
      again.push_back(b_.RuleRef(member));
      const int32_t more = b_.Repeat("map_more", again, 0, -1);
      std::vector<Element> seq = open;
      seq.push_back(b_.RuleRef(member));
      seq.push_back(b_.RuleRef(more));
      Append(seq, close);
      b_.AddAlternative(rule, seq);
      std::vector<Element> empty = open;
      Append(empty, close);
      b_.AddAlternative(rule, empty);
      return rule;
    }
    // Listed properties in order; rest(i, first): members from i on, `first` when none was
    // written yet (no comma before the next).
    const int64_t n = static_cast<int64_t>(props.size());
    std::vector<int32_t> rest_first(n + 1);
    std::vector<int32_t> rest_after(n + 1);
    rest_first[n] = b_.AddRule("members_end");
    b_.AddAlternative(rest_first[n], {});
    rest_after[n] = rest_first[n];
    for (int64_t i = n - 1; i >= 0; --i) {
      const auto& [name, value] = props[i];
      std::vector<Element> member = Punct(Json(name).dump());
      Append(member, Punct(":"));
      member.push_back(b_.RuleRef(value));
      const bool optional = !required.count(name);
      rest_first[i] = b_.AddRule("members_first");
      rest_after[i] = b_.AddRule("members_after");
      std::vector<Element> first = member;
      first.push_back(b_.RuleRef(rest_after[i + 1]));
      b_.AddAlternative(rest_first[i], first);
      std::vector<Element> after = Punct(",");
      Append(after, member);
      after.push_back(b_.RuleRef(rest_after[i + 1]));
      b_.AddAlternative(rest_after[i], after);
      if (optional) {
        b_.AddAlternative(rest_first[i], {b_.RuleRef(rest_first[i + 1])});
        b_.AddAlternative(rest_after[i], {b_.RuleRef(rest_after[i + 1])});
      }
    }
    std::vector<Element> seq = open;
    seq.push_back(b_.RuleRef(rest_first[0]));
    Append(seq, close);
    b_.AddAlternative(rule, seq);
    return rule;
  }

  const Json& root_;
  JsonSchemaOptions options_;
  GrammarBuilder b_;
  int32_t ws_ = 0;
  std::map<std::string, int32_t> memo_;
  std::vector<std::unique_ptr<Json>> merged_;
  std::optional<int32_t> string_char_, any_string_, any_number_, any_integer_, any_value_,
      any_object_;
};

}  // namespace

absl::StatusOr<Grammar> JsonSchemaGrammar(std::string_view schema_json,
                                          const JsonSchemaOptions& options) {
  if (static_cast<int64_t>(schema_json.size()) > options.max_schema_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("schema of ", schema_json.size(),
                                                   " bytes, more than the limit of ",
                                                   options.max_schema_bytes));
  }
  Json schema = Json::parse(schema_json.begin(), schema_json.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("the schema is not valid JSON");
  return SchemaCompiler(schema, options).Compile();
}

Grammar JsonObjectGrammar(const JsonSchemaOptions& options) {
  const Json schema = {{"type", "object"}};
  absl::StatusOr<Grammar> grammar = SchemaCompiler(schema, options).Compile();
  return *std::move(grammar);  // this schema uses no keyword that can be refused
}

}  // namespace kvserve::constraint
