// Jinja filters, tests and methods (on strings, dicts and lists) of the chat-template subset.
#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja_meter.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer::jinja {
namespace {

// Byte offsets of each code point of `s`, plus s.size() at the end.
std::vector<size_t> CodePointOffsets(const std::string& s, RenderMeter& meter) {
  meter.ChargeBytes(static_cast<int64_t>(s.size()));
  std::vector<size_t> offsets;
  for (size_t pos = 0; pos < s.size();) {
    offsets.push_back(pos);
    pos += static_cast<size_t>(Utf8SequenceLength(static_cast<unsigned char>(s[pos])));
  }
  offsets.push_back(s.size());
  return offsets;
}

const Value* FindKwarg(const KwArgs& kwargs, std::string_view name) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

// Positional argument `i`, else keyword `name`, else null.
const Value* Arg(const std::vector<Value>& args, const KwArgs& kwargs, size_t i,
                 std::string_view name) {
  if (i < args.size()) return &args[i];
  return FindKwarg(kwargs, name);
}

const std::string& RequireString(const Value* v, const std::string& what) {
  if (v == nullptr || !v->is_string())
    throw JinjaError(absl::StrCat(what, " needs a string argument"));
  return v->as_string();
}

// Python str.strip/lstrip/rstrip with optional character set.
std::string StripChars(const std::string& s, const Value* chars, bool left, bool right,
                       RenderMeter& meter) {
  if (chars == nullptr || chars->is_none()) return std::string(StripWhitespace(s, left, right));
  const std::string& set = RequireString(chars, "strip");
  std::vector<size_t> offsets = CodePointOffsets(s, meter);
  auto in_set = [&](size_t i) {
    meter.ChargeBytes(static_cast<int64_t>(set.size()));
    return set.find(s.substr(offsets[i], offsets[i + 1] - offsets[i])) != std::string::npos;
  };
  size_t begin = 0, end = offsets.size() - 1;
  if (left) {
    while (begin < end && in_set(begin)) ++begin;
  }
  if (right) {
    while (end > begin && in_set(end - 1)) --end;
  }
  return s.substr(offsets[begin], offsets[end] - offsets[begin]);
}

Value Split(const std::string& s, const Value* sep, const Value* maxsplit_value,
            RenderMeter& meter) {
  meter.ChargeBytes(static_cast<int64_t>(s.size()));
  int64_t maxsplit = -1;
  if (maxsplit_value != nullptr && maxsplit_value->is_int()) maxsplit = maxsplit_value->as_int();
  Array parts;
  if (sep == nullptr || sep->is_none()) {
    size_t pos = 0;
    while (true) {
      std::string_view rest = StripWhitespace(std::string_view(s).substr(pos), true, false);
      pos = s.size() - rest.size();
      if (rest.empty()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.emplace_back(std::string(StripWhitespace(rest, false, true)));
        break;
      }
      size_t end = pos;
      while (end < s.size()) {
        size_t next = end;
        if (IsUnicodeWhitespace(DecodeUtf8(s, &next))) break;
        end = next;
      }
      meter.CheckList(static_cast<int64_t>(parts.size()) + 1);
      parts.emplace_back(s.substr(pos, end - pos));
      pos = end;
    }
    return Value(std::move(parts));
  }
  const std::string& delimiter = RequireString(sep, "split");
  if (delimiter.empty()) throw JinjaError("split: empty separator");
  size_t pos = 0;
  while (true) {
    const size_t found = s.find(delimiter, pos);
    if (found == std::string::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.emplace_back(s.substr(pos));
      break;
    }
    meter.CheckList(static_cast<int64_t>(parts.size()) + 2);
    parts.emplace_back(s.substr(pos, found - pos));
    pos = found + delimiter.size();
  }
  return Value(std::move(parts));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count, RenderMeter& meter) {
  if (from.empty()) throw JinjaError("replace: empty pattern is unsupported");
  meter.ChargeBytes(static_cast<int64_t>(s.size()));
  int64_t matches = 0;
  for (size_t pos = s.find(from); pos != std::string::npos && (count < 0 || matches < count);
       pos = s.find(from, pos + from.size())) {
    ++matches;
  }
  // Each term is at most max_output_bytes (16 MiB by default), so this cannot overflow.
  const int64_t size =
      static_cast<int64_t>(s.size()) +
      matches * (static_cast<int64_t>(to.size()) - static_cast<int64_t>(from.size()));
  meter.CheckString(size);
  meter.ChargeBytes(size);
  std::string out;
  out.reserve(static_cast<size_t>(size));
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t found = s.find(from, pos);
    if (found == std::string::npos) break;
    out.append(s, pos, found - pos).append(to);
    pos = found + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string MapAscii(const std::string& s, int (*f)(int)) {
  std::string out = s;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(c));
  }
  return out;
}

std::string Upper(const std::string& s) {
  return MapAscii(s, [](int c) { return std::toupper(c); });
}
std::string Lower(const std::string& s) { return LowercaseUnicode(s); }
std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(out[0]));
  return out;
}
std::string Title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (alpha) c = static_cast<char>(start ? std::toupper(c) : std::tolower(c));
    start = !alpha;
  }
  return out;
}

bool MatchesAffix(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& v) {
    const std::string& a = RequireString(&v, prefix ? "startswith" : "endswith");
    return prefix ? s.starts_with(a) : s.ends_with(a);
  };
  if (affix.is_array()) {
    for (const Value& v : affix.as_array()) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(affix);
}

int64_t Length(const Value& v, RenderMeter& meter) {
  if (v.is_string()) {
    meter.ChargeBytes(static_cast<int64_t>(v.as_string().size()));
    return CountCodePoints(v.as_string());
  }
  if (v.is_array()) return static_cast<int64_t>(v.as_array().size());
  if (v.is_object()) return static_cast<int64_t>(v.as_object().items.size());
  throw JinjaError(absl::StrCat("length of ", v.TypeName(), " is undefined"));
}

// The arguments of Transformers' tojson filter, `tojson(ensure_ascii=False, indent=None,
// separators=None, sort_keys=False)`, as json.dumps reads them.
JsonFormat ToJsonFormat(const std::vector<Value>& args, const KwArgs& kwargs, RenderMeter& meter) {
  JsonFormat format;
  if (const Value* ascii = Arg(args, kwargs, 0, "ensure_ascii"))
    format.ensure_ascii = ascii->Truthy();
  const Value* indent = Arg(args, kwargs, 1, "indent");
  if (indent != nullptr && indent->is_int()) {
    const int64_t spaces = std::max<int64_t>(indent->as_int(), 0);  // ' ' * -1 is ''
    meter.CheckString(spaces);
    format.indent = std::string(static_cast<size_t>(spaces), ' ');
  } else if (indent != nullptr && indent->is_string()) {
    format.indent = indent->as_string();
  } else if (indent != nullptr && !indent->is_none() && !indent->is_undefined()) {
    throw JinjaError(
        absl::StrCat("tojson: indent must be an integer or a string, not ", indent->TypeName()));
  }
  if (format.indent.has_value()) format.item_separator = ",";
  const Value* separators = Arg(args, kwargs, 2, "separators");
  if (separators != nullptr && !separators->is_none() && !separators->is_undefined()) {
    if (!separators->is_array() || separators->as_array().size() != 2 ||
        !separators->as_array()[0].is_string() || !separators->as_array()[1].is_string()) {
      throw JinjaError("tojson: separators must be a pair of strings");
    }
    format.item_separator = separators->as_array()[0].as_string();
    format.key_separator = separators->as_array()[1].as_string();
  }
  if (const Value* sort = Arg(args, kwargs, 3, "sort_keys")) format.sort_keys = sort->Truthy();
  return format;
}

Value Items(const Value& v, RenderMeter& meter) {
  if (!v.is_object()) throw JinjaError(absl::StrCat("items of ", v.TypeName(), " is unsupported"));
  meter.ChargeItems(static_cast<int64_t>(v.as_object().items.size()));
  Array items;
  for (const auto& [k, x] : v.as_object().items) items.emplace_back(Array{Value(k), x});
  return Value(std::move(items));
}

Value Attribute(const Value& item, const std::string& path, RenderMeter& meter) {
  Value current = item;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = std::min(path.find('.', pos), path.size());
    const std::string key = path.substr(pos, dot - pos);
    if (current.is_object()) {
      meter.ChargeItems(static_cast<int64_t>(current.as_object().items.size()));
      const Value* v = current.as_object().Find(key);
      current = v != nullptr ? *v : Value::MakeUndefined(key);
    } else if (current.is_array() && !key.empty() &&
               std::isdigit(static_cast<unsigned char>(key[0]))) {
      const size_t i = std::strtoul(key.c_str(), nullptr, 10);
      current = i < current.as_array().size() ? current.as_array()[i] : Value::MakeUndefined(key);
    } else {
      current = Value::MakeUndefined(key);
    }
    pos = dot + 1;
  }
  return current;
}

Array RequireIterable(const Value& v, const std::string& filter, RenderMeter& meter) {
  if (v.is_array()) {
    meter.ChargeItems(static_cast<int64_t>(v.as_array().size()));
    return v.as_array();
  }
  if (v.is_object()) {
    meter.ChargeItems(static_cast<int64_t>(v.as_object().items.size()));
    Array keys;
    for (const auto& [k, x] : v.as_object().items) keys.emplace_back(k);
    return keys;
  }
  if (v.is_string()) {
    meter.CheckList(CountCodePoints(v.as_string()));
    Array chars;
    const std::vector<size_t> offsets = CodePointOffsets(v.as_string(), meter);
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      chars.emplace_back(v.as_string().substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
    return chars;
  }
  throw JinjaError(absl::StrCat(filter, ": ", v.TypeName(), " is not iterable"));
}

// selectattr/rejectattr/select/reject: the test named by args[first_test] (default: truthy).
Value FilterByTest(const Value& value, std::vector<Value>& args, bool by_attribute, bool keep,
                   const std::string& filter, RenderMeter& meter) {
  Array out;
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    attribute = RequireString(next < args.size() ? &args[next] : nullptr, filter);
    ++next;
  }
  std::string test;
  if (next < args.size()) test = RequireString(&args[next++], filter);
  const std::vector<Value> test_args(args.begin() + static_cast<std::ptrdiff_t>(next), args.end());
  for (const Value& item : RequireIterable(value, filter, meter)) {
    const Value subject = by_attribute ? Attribute(item, attribute, meter) : item;
    const bool passed =
        test.empty() ? subject.Truthy() : ApplyTest(test, subject, test_args, meter);
    if (passed == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

double ToNumber(const Value& v, const std::string& filter) {
  if (v.is_number()) return v.as_number();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  if (v.is_string()) {
    char* end = nullptr;
    const double d = std::strtod(v.as_string().c_str(), &end);
    if (end != v.as_string().c_str()) return d;
  }
  throw JinjaError(absl::StrCat(filter, ": cannot convert ", v.TypeName(), " to a number"));
}

}  // namespace

int64_t CountCodePoints(const std::string& s) {
  int64_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) {
    pos += static_cast<size_t>(Utf8SequenceLength(static_cast<unsigned char>(s[pos])));
  }
  return n;
}

Value SliceValue(const Value& value, const Value* start_v, const Value* stop_v, const Value* step_v,
                 RenderMeter& meter) {
  auto as_opt_int = [](const Value* v) -> std::optional<int64_t> {
    if (v == nullptr || v->is_none()) return std::nullopt;
    if (!v->is_int()) throw JinjaError("slice indices must be integers");
    return v->as_int();
  };
  const int64_t step = as_opt_int(step_v).value_or(1);
  if (step == 0) throw JinjaError("slice step cannot be zero");
  std::vector<size_t> offsets;
  int64_t n;
  if (value.is_string()) {
    offsets = CodePointOffsets(value.as_string(), meter);
    n = static_cast<int64_t>(offsets.size()) - 1;
  } else if (value.is_array()) {
    n = static_cast<int64_t>(value.as_array().size());
  } else {
    throw JinjaError(absl::StrCat("cannot slice ", value.TypeName()));
  }
  auto clamp = [&](std::optional<int64_t> i, int64_t default_value) {
    if (!i) return default_value;
    int64_t x = *i < 0 ? *i + n : *i;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(as_opt_int(start_v), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(as_opt_int(stop_v), step > 0 ? n : -1);
  // Calls `visit` with each index of the slice; `i += step` must not overflow near INT64_MAX.
  auto for_each_index = [&](auto visit) {
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      visit(i);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
  };
  if (value.is_string()) {
    std::string out;
    for_each_index([&](int64_t i) {
      out.append(value.as_string(), offsets[static_cast<size_t>(i)],
                 offsets[static_cast<size_t>(i + 1)] - offsets[static_cast<size_t>(i)]);
    });
    return Value(std::move(out));
  }
  meter.ChargeItems(n);
  Array out;
  for_each_index([&](int64_t i) { out.push_back(value.as_array()[static_cast<size_t>(i)]); });
  return Value(std::move(out));
}

Value ApplyFilter(const std::string& name, const Value& value, std::vector<Value>& args,
                  KwArgs& kwargs, RenderMeter& meter) {
  if (name == "default" || name == "d") {
    const Value* fallback = Arg(args, kwargs, 0, "default_value");
    const Value* boolean = Arg(args, kwargs, 1, "boolean");
    const bool use_fallback =
        value.is_undefined() || (boolean != nullptr && boolean->Truthy() && !value.Truthy());
    if (use_fallback) return fallback != nullptr ? *fallback : Value(std::string());
    return value;
  }
  if (value.is_undefined() && name != "tojson" && name != "string") {
    throw JinjaError(
        absl::StrCat("'", value.undefined_name(), "' is undefined (filter '", name, "')"));
  }
  if (name == "trim") {
    return Value(StripChars(RequireString(&value, "trim"), Arg(args, kwargs, 0, "chars"), true,
                            true, meter));
  }
  if (name == "upper") return Value(Upper(RequireString(&value, "upper")));
  if (name == "lower") return Value(Lower(RequireString(&value, "lower")));
  if (name == "capitalize") return Value(Capitalize(RequireString(&value, "capitalize")));
  if (name == "title") return Value(Title(RequireString(&value, "title")));
  if (name == "length" || name == "count") return Value(Length(value, meter));
  if (name == "string") return Value(value.ToString(meter));
  if (name == "safe") return value;
  if (name == "tojson") return Value(value.ToJson(ToJsonFormat(args, kwargs, meter), meter));
  if (name == "items") return Items(value, meter);
  if (name == "list") return Value(RequireIterable(value, "list", meter));
  if (name == "first" || name == "last") {
    const Array items = RequireIterable(value, name, meter);
    if (items.empty()) return Value::MakeUndefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (value.is_string()) {
      const Value step(static_cast<int64_t>(-1));
      return SliceValue(value, nullptr, nullptr, &step, meter);
    }
    Array items = RequireIterable(value, "reverse", meter);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "join") {
    const Value* sep = Arg(args, kwargs, 0, "d");
    const Value* attribute = Arg(args, kwargs, 1, "attribute");
    const std::string separator = sep != nullptr ? sep->ToString(meter) : std::string();
    std::string out;
    bool first = true;
    for (const Value& item : RequireIterable(value, "join", meter)) {
      const std::string text =
          (attribute != nullptr ? Attribute(item, attribute->ToString(meter), meter) : item)
              .ToString(meter);
      const size_t added = text.size() + (first ? 0 : separator.size());
      meter.CheckString(static_cast<int64_t>(out.size() + added));
      meter.ChargeBytes(static_cast<int64_t>(added));
      if (!first) out.append(separator);
      first = false;
      out.append(text);
    }
    return Value(std::move(out));
  }
  if (name == "int") {
    if (value.is_string())
      return Value(static_cast<int64_t>(std::strtoll(value.as_string().c_str(), nullptr, 10)));
    if (value.is_int()) return value;
    const double d = std::trunc(ToNumber(value, "int"));
    // 2^63 is the first double past INT64_MAX; NaN fails both comparisons.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
      throw JinjaError("int: float out of the integer range");
    return Value(static_cast<int64_t>(d));
  }
  if (name == "float") return Value(ToNumber(value, "float"));
  if (name == "abs") {
    if (value.is_int()) {
      if (value.as_int() == std::numeric_limits<int64_t>::min())
        throw JinjaError("integer overflow in 'abs'");
      return Value(value.as_int() < 0 ? -value.as_int() : value.as_int());
    }
    return Value(std::fabs(ToNumber(value, "abs")));
  }
  if (name == "replace") {
    const Value* count = Arg(args, kwargs, 2, "count");
    return Value(Replace(RequireString(&value, "replace"),
                         RequireString(Arg(args, kwargs, 0, "old"), "replace"),
                         RequireString(Arg(args, kwargs, 1, "new"), "replace"),
                         count != nullptr && count->is_int() ? count->as_int() : -1, meter));
  }
  if (name == "map") {
    const Value* attribute = FindKwarg(kwargs, "attribute");
    Array out;
    for (const Value& item : RequireIterable(value, "map", meter)) {
      if (attribute != nullptr) {
        Value v = Attribute(item, attribute->ToString(meter), meter);
        if (v.is_undefined()) {
          if (const Value* d = FindKwarg(kwargs, "default")) v = *d;
        }
        out.push_back(std::move(v));
      } else {
        if (args.empty()) throw JinjaError("map needs a filter name or attribute=");
        std::vector<Value> rest(args.begin() + 1, args.end());
        KwArgs none;
        out.push_back(ApplyFilter(RequireString(&args[0], "map"), item, rest, none, meter));
      }
    }
    return Value(std::move(out));
  }
  if (name == "selectattr") return FilterByTest(value, args, true, true, name, meter);
  if (name == "rejectattr") return FilterByTest(value, args, true, false, name, meter);
  if (name == "select") return FilterByTest(value, args, false, true, name, meter);
  if (name == "reject") return FilterByTest(value, args, false, false, name, meter);
  if (name == "unique") {
    Array out;
    for (const Value& item : RequireIterable(value, "unique", meter)) {
      bool seen = false;
      for (const Value& o : out) seen = seen || o.Equals(item, meter);
      if (!seen) out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "indent") {
    const Value* width_v = Arg(args, kwargs, 0, "width");
    const Value* first_v = Arg(args, kwargs, 1, "first");
    const int64_t width = width_v != nullptr && width_v->is_int() ? width_v->as_int() : 4;
    if (width < 0) throw JinjaError("indent: width must not be negative");
    meter.CheckString(width);
    const std::string& s = RequireString(&value, "indent");
    const bool indent_first = first_v != nullptr && first_v->Truthy();
    int64_t pads = indent_first ? 1 : 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) pads += s[i] == '\n' && s[i + 1] != '\n';
    // width and pads are at most max_output_bytes each, so the product fits in 64 bits.
    const int64_t size = static_cast<int64_t>(s.size()) + pads * width;
    meter.CheckString(size);
    meter.ChargeBytes(size);
    const std::string pad(static_cast<size_t>(width), ' ');
    std::string out = indent_first ? pad : "";
    out.reserve(static_cast<size_t>(size));
    for (size_t i = 0; i < s.size(); ++i) {
      out.push_back(s[i]);
      if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') out.append(pad);
    }
    return Value(std::move(out));
  }
  throw JinjaError(absl::StrCat("unsupported filter '", name, "'"));
}

bool ApplyTest(const std::string& name, const Value& value, const std::vector<Value>& args,
               RenderMeter& meter) {
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "string") return value.is_string();
  if (name == "number") return value.is_number();
  if (name == "integer") return value.is_int();
  if (name == "float") return value.is_float();
  if (name == "boolean") return value.is_bool();
  if (name == "true") return value.is_bool() && value.as_bool();
  if (name == "false") return value.is_bool() && !value.as_bool();
  if (name == "mapping") return value.is_object();
  if (name == "sequence") return value.is_array() || value.is_string() || value.is_object();
  if (name == "iterable") return value.is_array() || value.is_string() || value.is_object();
  if (name == "callable") return value.is_callable();
  if (name == "odd" || name == "even") {
    if (!value.is_int()) throw JinjaError(absl::StrCat("test '", name, "' needs an integer"));
    return (value.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (!value.is_int() || args.empty() || !args[0].is_int() || args[0].as_int() == 0) {
      throw JinjaError("test 'divisibleby' needs integers");
    }
    // INT64_MIN % -1 traps on x86; every integer is divisible by -1.
    return args[0].as_int() == -1 || value.as_int() % args[0].as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=" ||
      name == "sameas") {
    if (args.empty()) throw JinjaError(absl::StrCat("test '", name, "' needs an argument"));
    const bool equal = value.Equals(args[0], meter);
    return (name == "ne" || name == "!=") ? !equal : equal;
  }
  if (name == "in") {
    if (args.empty()) throw JinjaError("test 'in' needs an argument");
    if (args[0].is_string() && value.is_string()) {
      meter.ChargeBytes(static_cast<int64_t>(args[0].as_string().size()));
      return args[0].as_string().find(value.as_string()) != std::string::npos;
    }
    if (args[0].is_object() && value.is_string()) {
      meter.ChargeItems(static_cast<int64_t>(args[0].as_object().items.size()));
      return args[0].as_object().Find(value.as_string()) != nullptr;
    }
    for (const Value& v : RequireIterable(args[0], "in", meter)) {
      if (v.Equals(value, meter)) return true;
    }
    return false;
  }
  throw JinjaError(absl::StrCat("unsupported test '", name, "'"));
}

Value CallMethod(const Value& object, const std::string& name, std::vector<Value>& args,
                 KwArgs& kwargs, RenderMeter& meter) {
  if (object.is_string()) {
    const std::string& s = object.as_string();
    if (name == "strip")
      return Value(StripChars(s, Arg(args, kwargs, 0, "chars"), true, true, meter));
    if (name == "lstrip")
      return Value(StripChars(s, Arg(args, kwargs, 0, "chars"), true, false, meter));
    if (name == "rstrip")
      return Value(StripChars(s, Arg(args, kwargs, 0, "chars"), false, true, meter));
    if (name == "split")
      return Split(s, Arg(args, kwargs, 0, "sep"), Arg(args, kwargs, 1, "maxsplit"), meter);
    if (name == "startswith" || name == "endswith") {
      const Value* affix = Arg(args, kwargs, 0, "prefix");
      if (affix == nullptr) throw JinjaError(absl::StrCat(name, " needs an argument"));
      if (affix->is_array()) meter.ChargeItems(static_cast<int64_t>(affix->as_array().size()));
      return Value(MatchesAffix(s, *affix, name == "startswith"));
    }
    if (name == "replace") {
      const Value* count = Arg(args, kwargs, 2, "count");
      return Value(Replace(s, RequireString(Arg(args, kwargs, 0, "old"), "replace"),
                           RequireString(Arg(args, kwargs, 1, "new"), "replace"),
                           count != nullptr && count->is_int() ? count->as_int() : -1, meter));
    }
    if (name == "upper") return Value(Upper(s));
    if (name == "lower") return Value(Lower(s));
    if (name == "title") return Value(Title(s));
    if (name == "capitalize") return Value(Capitalize(s));
    if (name == "find") {
      meter.ChargeBytes(static_cast<int64_t>(s.size()));
      const size_t found = s.find(RequireString(Arg(args, kwargs, 0, "sub"), "find"));
      if (found == std::string::npos) return Value(static_cast<int64_t>(-1));
      return Value(CountCodePoints(s.substr(0, found)));
    }
    if (name == "join") {
      std::string out;
      const Value* items = Arg(args, kwargs, 0, "iterable");
      if (items == nullptr) throw JinjaError("join needs an argument");
      bool first = true;
      for (const Value& item : RequireIterable(*items, "join", meter)) {
        const std::string text = item.ToString(meter);
        const size_t added = text.size() + (first ? 0 : s.size());
        meter.CheckString(static_cast<int64_t>(out.size() + added));
        meter.ChargeBytes(static_cast<int64_t>(added));
        if (!first) out.append(s);
        first = false;
        out.append(text);
      }
      return Value(std::move(out));
    }
  } else if (object.is_object() && !object.as_object().is_namespace) {
    if (name == "items") return Items(object, meter);
    if (name == "keys" || name == "values") {
      meter.ChargeItems(static_cast<int64_t>(object.as_object().items.size()));
      Array out;
      for (const auto& [k, v] : object.as_object().items)
        out.push_back(name == "keys" ? Value(k) : v);
      return Value(std::move(out));
    }
    if (name == "get") {
      const Value* key = Arg(args, kwargs, 0, "key");
      meter.ChargeItems(static_cast<int64_t>(object.as_object().items.size()));
      const Value* v = object.as_object().Find(RequireString(key, "get"));
      if (v != nullptr) return *v;
      const Value* fallback = Arg(args, kwargs, 1, "default");
      return fallback != nullptr ? *fallback : Value::None();
    }
  }
  throw JinjaError(absl::StrCat("unsupported method '", name, "' on ", object.TypeName()));
}

}  // namespace kvserve::tokenizer::jinja
