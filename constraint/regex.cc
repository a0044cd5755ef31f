// The regex parser: alternation, sequences, quantified atoms and classes, compiled as it reads.
#include "constraint/regex.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "constraint/text_cursor.h"

namespace kvserve::constraint {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

const Ranges& DigitRanges() {
  static const Ranges r = {{'0', '9'}};
  return r;
}
const Ranges& WordRanges() {
  static const Ranges r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
const Ranges& SpaceRanges() {
  static const Ranges r = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                           {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                           {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  return r;
}
const Ranges& LineTerminators() {
  static const Ranges r = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};
  return r;
}

Ranges Complement(Ranges ranges) {
  std::sort(ranges.begin(), ranges.end());
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.push_back({next, lo - 1});
    next = std::max(next, hi + 1);
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

bool IsSyntaxChar(char c) {
  return std::string_view("^$\\.*+?()[]{}|/-").find(c) != std::string_view::npos;
}

class RegexParser {
 public:
  RegexParser(GrammarBuilder& builder, std::string_view pattern, const RegexLimits& limits,
              const RegexMode& mode)
      : builder_(builder), in_(pattern), limits_(limits), mode_(mode) {}

  absl::StatusOr<int32_t> Parse() {
    const bool anchored_start = in_.Consume('^');
    absl::StatusOr<int32_t> rule = ParseAlternation();
    if (!rule.ok()) return rule.status();
    if (!in_.done()) {
      if (in_.peek() == ')') return in_.Error("unbalanced ')'");
      return in_.Error(absl::StrCat("unexpected '", std::string(1, in_.peek()), "'"));
    }
    if (!mode_.search || (anchored_start && anchored_end_)) return rule;
    // Search: any characters where an end is not anchored.
    std::vector<Element> any = FromRanges(Complement({}));
    const int32_t anything = builder_.Repeat(NextName("any"), std::move(any), 0, -1);
    const int32_t searched = builder_.AddRule(NextName("search"));
    std::vector<Element> seq;
    if (!anchored_start) seq.push_back(builder_.RuleRef(anything));
    seq.push_back(builder_.RuleRef(*rule));
    if (!anchored_end_) seq.push_back(builder_.RuleRef(anything));
    builder_.AddAlternative(searched, std::move(seq));
    return searched;
  }

 private:
  absl::StatusOr<int32_t> ParseAlternation() {
    const int32_t rule = builder_.AddRule(NextName("alt"));
    for (;;) {
      absl::StatusOr<std::vector<Element>> seq = ParseSequence();
      if (!seq.ok()) return seq.status();
      builder_.AddAlternative(rule, *std::move(seq));
      if (!in_.Consume('|')) return rule;
    }
  }

  absl::StatusOr<std::vector<Element>> ParseSequence() {
    std::vector<Element> seq;
    for (;;) {
      const char c = in_.peek();
      if (in_.done() || c == '|' || c == ')') return seq;
      if (c == '$') {
        in_.Consume('$');
        if (!in_.done() && in_.peek() != ')' && in_.peek() != '|') {
          return in_.Error("'$' is only supported at the end of the pattern");
        }
        if (depth_ > 0 || in_.peek() == '|') {
          return in_.Error("'$' is only supported at the end of the pattern");
        }
        anchored_end_ = true;
        return seq;
      }
      if (c == '^') return in_.Error("'^' is only supported at the start of the pattern");
      absl::StatusOr<std::vector<Element>> atom = ParseAtom();
      if (!atom.ok()) return atom.status();
      absl::StatusOr<std::vector<Element>> item = ParseQuantifier(*std::move(atom));
      if (!item.ok()) return item.status();
      seq.insert(seq.end(), item->begin(), item->end());
    }
  }

  absl::StatusOr<std::vector<Element>> ParseAtom() {
    const char c = in_.peek();
    if (c == '(') {
      in_.Consume('(');
      if (in_.Consume('?')) {
        if (in_.Consume(':')) {
        } else if (in_.peek() == '<' && in_.peek(1) != '=' && in_.peek(1) != '!') {
          in_.Consume('<');
          while (!in_.done() && in_.peek() != '>') in_.Consume(in_.peek());
          if (!in_.Consume('>')) return in_.Error("unterminated group name");
        } else {
          return in_.Error("lookaround assertions are not supported");
        }
      }
      ++depth_;
      absl::StatusOr<int32_t> inner = ParseAlternation();
      --depth_;
      if (!inner.ok()) return inner.status();
      if (!in_.Consume(')')) return in_.Error("expected ')'");
      return std::vector<Element>{builder_.RuleRef(*inner)};
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      in_.Consume('.');
      return FromRanges(Complement(LineTerminators()));
    }
    if (c == '*' || c == '+' || c == '?') return in_.Error("quantifier without an atom");
    if (c == '{' && (in_.peek(1) >= '0' && in_.peek(1) <= '9')) {
      return in_.Error("quantifier without an atom");
    }
    if (c == '\\') {
      in_.Consume('\\');
      absl::StatusOr<Ranges> escaped = ReadEscape(/*in_class=*/false);
      if (!escaped.ok()) return escaped.status();
      if (mode_.json_string && escaped->size() == 1 &&
          (*escaped)[0].first == (*escaped)[0].second && NeedsJsonEscape((*escaped)[0].first)) {
        return in_.Error("the pattern needs a character a JSON string must escape");
      }
      return FromRanges(*std::move(escaped));
    }
    bool ok = true;
    const uint32_t cp = in_.NextCodePoint(&ok);
    if (!ok) return in_.Error("malformed UTF-8");
    if (mode_.json_string && NeedsJsonEscape(cp)) {
      return in_.Error("the pattern needs a character a JSON string must escape");
    }
    return builder_.Literal(EncodeUtf8(cp));
  }

  static bool NeedsJsonEscape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

  // After a backslash: the code points the escape stands for.
  absl::StatusOr<Ranges> ReadEscape(bool in_class) {
    const char e = in_.peek();
    switch (e) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S': {
        in_.Consume(e);
        const char lower = static_cast<char>(e | 0x20);
        const Ranges& base = lower == 'd'   ? DigitRanges()
                             : lower == 'w' ? WordRanges()
                                            : SpaceRanges();
        return e == lower ? base : Complement(base);
      }
      case 'b':
        if (in_class) {
          in_.Consume('b');
          return Ranges{{0x08, 0x08}};
        }
        return in_.Error("word boundaries (\\b) are not supported");
      case 'B':
        return in_.Error("word boundaries (\\B) are not supported");
      default:
        break;
    }
    if (e >= '1' && e <= '9') return in_.Error("backreferences are not supported");
    if (e == 'k') return in_.Error("backreferences are not supported");
    absl::StatusOr<std::optional<uint32_t>> common = in_.ReadCommonEscape();
    if (!common.ok()) return common.status();
    if (*common) return Ranges{{**common, **common}};
    if (IsSyntaxChar(e) || e == '"' || e == '\'' || e == ' ' || e == ',' || e == ':' || e == '=' ||
        e == '!' || e == '<' || e == '>' || e == '#' || e == '&' || e == '~' || e == '@' ||
        e == '%' || e == '`' || e == ';') {
      in_.Consume(e);
      return Ranges{{static_cast<uint32_t>(e), static_cast<uint32_t>(e)}};
    }
    return in_.Error(absl::StrCat("unsupported escape '\\", std::string(1, e), "'"));
  }

  absl::StatusOr<std::vector<Element>> ParseClass() {
    in_.Consume('[');
    const bool negated = in_.Consume('^');
    Ranges ranges;
    while (!in_.Consume(']')) {
      if (in_.done()) return in_.Error("unterminated character class");
      absl::StatusOr<Ranges> lo = ReadClassAtom();
      if (!lo.ok()) return lo.status();
      if (lo->size() == 1 && (*lo)[0].first == (*lo)[0].second && in_.peek() == '-' &&
          in_.peek(1) != ']' && in_.peek(1) != '\0') {
        in_.Consume('-');
        absl::StatusOr<Ranges> hi = ReadClassAtom();
        if (!hi.ok()) return hi.status();
        if (hi->size() != 1 || (*hi)[0].first != (*hi)[0].second) {
          return in_.Error("a class escape cannot end a range");
        }
        if ((*hi)[0].first < (*lo)[0].first) return in_.Error("character range out of order");
        ranges.push_back({(*lo)[0].first, (*hi)[0].first});
        continue;
      }
      ranges.insert(ranges.end(), lo->begin(), lo->end());
    }
    if (negated) ranges = Complement(std::move(ranges));
    if (ranges.empty()) return in_.Error("the character class matches nothing");
    return FromRanges(std::move(ranges));
  }

  absl::StatusOr<Ranges> ReadClassAtom() {
    if (in_.Consume('\\')) return ReadEscape(/*in_class=*/true);
    bool ok = true;
    const uint32_t cp = in_.NextCodePoint(&ok);
    if (!ok) return in_.Error("malformed UTF-8");
    return Ranges{{cp, cp}};
  }

  // One element for the code points of `ranges`; in a JSON string, the characters it must
  // escape are left out.
  std::vector<Element> FromRanges(Ranges ranges) {
    if (mode_.json_string) {
      Ranges kept;
      for (auto [lo, hi] : ranges) {
        for (uint32_t cut : {uint32_t{'"'}, uint32_t{'\\'}}) {
          if (lo <= cut && cut <= hi) {
            if (lo < cut) kept.push_back({std::max<uint32_t>(lo, 0x20), cut - 1});
            lo = cut + 1;
          }
        }
        lo = std::max<uint32_t>(lo, 0x20);
        if (lo <= hi) kept.push_back({lo, hi});
      }
      kept.erase(std::remove_if(kept.begin(), kept.end(),
                                [](const auto& r) { return r.first > r.second; }),
                 kept.end());
      ranges = std::move(kept);
    }
    return {builder_.CodePoints(NextName("class"), std::move(ranges), false)};
  }

  absl::StatusOr<std::vector<Element>> ParseQuantifier(std::vector<Element> atom) {
    absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> bounds =
        in_.ReadQuantifier(limits_.max_repeat);
    if (!bounds.ok()) return bounds.status();
    if (!*bounds) return atom;
    in_.Consume('?');  // lazy: the same language
    const char next = in_.peek();
    if (next == '*' || next == '+' || next == '?' ||
        (next == '{' && in_.peek(1) >= '0' && in_.peek(1) <= '9')) {
      return in_.Error("nothing to repeat");
    }
    return std::vector<Element>{builder_.RuleRef(
        builder_.Repeat(NextName("repeat"), std::move(atom), (*bounds)->first, (*bounds)->second))};
  }

  std::string NextName(std::string_view kind) {
    return absl::StrCat("_regex_", std::string(kind), ++generated_);
  }

  GrammarBuilder& builder_;
  TextCursor in_;
  RegexLimits limits_;
  RegexMode mode_;
  bool anchored_end_ = false;
  int depth_ = 0;
  int generated_ = 0;
};

}  // namespace

absl::StatusOr<int32_t> AddRegexRule(GrammarBuilder& builder, std::string_view pattern,
                                     const RegexLimits& limits, const RegexMode& mode) {
  if (static_cast<int64_t>(pattern.size()) > limits.max_pattern_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("pattern of ", pattern.size(),
                                                   " bytes, more than the limit of ",
                                                   limits.max_pattern_bytes));
  }
  return RegexParser(builder, pattern, limits, mode).Parse();
}

absl::StatusOr<Grammar> ParseRegex(std::string_view pattern, const RegexLimits& limits) {
  GrammarBuilder builder;
  absl::StatusOr<int32_t> root = AddRegexRule(builder, pattern, limits);
  if (!root.ok()) return root.status();
  return std::move(builder).Build(*root);
}

}  // namespace kvserve::constraint
