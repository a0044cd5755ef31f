// The GBNF parser: a recursive descent over rules, alternatives, sequences and postfixes.
#include "constraint/gbnf.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "constraint/text_cursor.h"

namespace kvserve::constraint {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GbnfLimits& limits) : in_(text), limits_(limits) {}

  absl::StatusOr<Grammar> Parse() {
    SkipSpace();
    while (!in_.done()) {
      absl::Status s = ParseRule();
      if (!s.ok()) return s;
      SkipSpace();
    }
    for (const auto& [name, rule] : rules_) {
      if (!defined_[rule]) {
        return absl::InvalidArgumentError(
            absl::StrCat(first_use_.at(name), ": rule '", name, "' is used but never defined"));
      }
    }
    auto root = rules_.find("root");
    if (root == rules_.end()) return absl::InvalidArgumentError("grammar: no rule named 'root'");
    return std::move(builder_).Build(root->second);
  }

 private:
  // Whitespace and comments, newlines included.
  void SkipSpace() {
    for (;;) {
      const char c = in_.peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        in_.Consume(c);
      } else if (c == '#') {
        while (!in_.done() && in_.peek() != '\n') in_.Consume(in_.peek());
      } else {
        return;
      }
    }
  }

  std::string ReadName() {
    std::string name;
    while (IsNameChar(in_.peek())) {
      name.push_back(in_.peek());
      in_.Consume(in_.peek());
    }
    return name;
  }

  // Whether a rule definition (`name ::=`) starts here.
  bool AtDefinition() const {
    size_t i = 0;
    while (IsNameChar(in_.peek(i))) ++i;
    if (i == 0) return false;
    while (in_.peek(i) == ' ' || in_.peek(i) == '\t') ++i;
    return in_.peek(i) == ':' && in_.peek(i + 1) == ':' && in_.peek(i + 2) == '=';
  }

  // The rule `name`, added at its first mention (`where`: that mention's position).
  int32_t RuleNamed(const std::string& name, std::string where) {
    auto [it, inserted] = rules_.try_emplace(name, 0);
    if (inserted) {
      it->second = builder_.AddRule(name);
      defined_.resize(builder_.num_rules(), false);
      first_use_[name] = std::move(where);
    }
    return it->second;
  }

  // "line L, column C" of the current position.
  std::string Position() const {
    std::string where(in_.Error("").message());
    where.resize(where.size() - 2);  // drop ": "
    return where;
  }

  absl::Status ParseRule() {
    std::string where = Position();
    const std::string name = ReadName();
    if (name.empty()) return in_.Error("expected a rule name");
    SkipSpace();
    if (!in_.ConsumeText("::="))
      return in_.Error(absl::StrCat("expected '::=' after '", name, "'"));
    const int32_t rule = RuleNamed(name, std::move(where));
    defined_.resize(builder_.num_rules(), false);
    if (defined_[rule]) return in_.Error(absl::StrCat("rule '", name, "' is defined twice"));
    defined_[rule] = true;
    return ParseAlternatives(rule, /*nested=*/false);
  }

  // Alternatives into `rule`, up to ')' when nested, else up to the next definition or the end.
  absl::Status ParseAlternatives(int32_t rule, bool nested) {
    for (;;) {
      absl::StatusOr<std::vector<Element>> seq = ParseSequence(nested);
      if (!seq.ok()) return seq.status();
      builder_.AddAlternative(rule, *std::move(seq));
      SkipSpace();
      if (!in_.Consume('|')) return absl::OkStatus();
      SkipSpace();
    }
  }

  absl::StatusOr<std::vector<Element>> ParseSequence(bool nested) {
    std::vector<Element> seq;
    for (;;) {
      SkipSpace();
      const char c = in_.peek();
      if (in_.done() || c == '|' || (nested && c == ')') || (!nested && AtDefinition())) {
        return seq;
      }
      if (c == ')') return in_.Error("unbalanced ')'");
      absl::StatusOr<std::vector<Element>> atom = ParseAtom();
      if (!atom.ok()) return atom.status();
      absl::StatusOr<std::vector<Element>> item = ParsePostfix(*std::move(atom));
      if (!item.ok()) return item.status();
      seq.insert(seq.end(), item->begin(), item->end());
    }
  }

  absl::StatusOr<std::vector<Element>> ParseAtom() {
    const char c = in_.peek();
    if (c == '"') {
      in_.Consume('"');
      std::string bytes;
      while (!in_.Consume('"')) {
        if (in_.done() || in_.peek() == '\n') return in_.Error("unterminated string literal");
        absl::StatusOr<uint32_t> cp = ReadChar();
        if (!cp.ok()) return cp.status();
        bytes += EncodeUtf8(*cp);
      }
      return builder_.Literal(bytes);
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      in_.Consume('.');
      return std::vector<Element>{
          builder_.RuleRef(builder_.CodePointClass(NextName("any"), {}, /*negated=*/true))};
    }
    if (c == '(') {
      in_.Consume('(');
      const int32_t group = builder_.AddRule(NextName("group"));
      defined_.resize(builder_.num_rules(), true);
      if (absl::Status s = ParseAlternatives(group, /*nested=*/true); !s.ok()) return s;
      if (!in_.Consume(')')) return in_.Error("expected ')'");
      return std::vector<Element>{builder_.RuleRef(group)};
    }
    if (c == '<') return in_.Error("token references <...> are not supported");
    if (IsNameChar(c)) {
      std::string where = Position();
      const std::string name = ReadName();
      return std::vector<Element>{builder_.RuleRef(RuleNamed(name, std::move(where)))};
    }
    return in_.Error(absl::StrCat("unexpected '", std::string(1, c), "'"));
  }

  // One character of a literal or class, escapes decoded.
  absl::StatusOr<uint32_t> ReadChar() {
    if (in_.Consume('\\')) {
      absl::StatusOr<std::optional<uint32_t>> common = in_.ReadCommonEscape();
      if (!common.ok()) return common.status();
      if (*common) return **common;
      const char e = in_.peek();
      if (e == '\\' || e == '"' || e == '\'' || e == '[' || e == ']' || e == '-' || e == '^') {
        in_.Consume(e);
        return static_cast<uint32_t>(e);
      }
      return in_.Error(absl::StrCat("unknown escape '\\", std::string(1, e), "'"));
    }
    bool ok = true;
    const uint32_t cp = in_.NextCodePoint(&ok);
    if (!ok) return in_.Error("malformed UTF-8");
    return cp;
  }

  absl::StatusOr<std::vector<Element>> ParseClass() {
    in_.Consume('[');
    const bool negated = in_.Consume('^');
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (!in_.Consume(']')) {
      if (in_.done()) return in_.Error("unterminated character class");
      absl::StatusOr<uint32_t> lo = ReadChar();
      if (!lo.ok()) return lo.status();
      uint32_t hi = *lo;
      if (in_.peek() == '-' && in_.peek(1) != ']' && in_.peek(1) != '\0') {
        in_.Consume('-');
        absl::StatusOr<uint32_t> h = ReadChar();
        if (!h.ok()) return h.status();
        if (*h < *lo) return in_.Error("character range out of order");
        hi = *h;
      }
      ranges.push_back({*lo, hi});
    }
    if (!negated && ranges.empty()) return in_.Error("empty character class");
    return std::vector<Element>{builder_.CodePoints(NextName("class"), std::move(ranges), negated)};
  }

  absl::StatusOr<std::vector<Element>> ParsePostfix(std::vector<Element> atom) {
    for (;;) {
      absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> bounds =
          in_.ReadQuantifier(limits_.max_repeat);
      if (!bounds.ok()) return bounds.status();
      if (!*bounds) return atom;
      atom = {builder_.RuleRef(builder_.Repeat(NextName("repeat"), std::move(atom),
                                               (*bounds)->first, (*bounds)->second))};
    }
  }

  std::string NextName(std::string_view kind) {
    return absl::StrCat("_", std::string(kind), ++generated_);
  }

  TextCursor in_;
  GbnfLimits limits_;
  GrammarBuilder builder_;
  std::map<std::string, int32_t> rules_;
  std::map<std::string, std::string> first_use_;
  std::vector<bool> defined_;
  int generated_ = 0;
};

}  // namespace

absl::StatusOr<Grammar> ParseGbnf(std::string_view text, const GbnfLimits& limits) {
  if (static_cast<int64_t>(text.size()) > limits.max_text_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar: ", text.size(), " bytes, more than the limit of ", limits.max_text_bytes));
  }
  return GbnfParser(text, limits).Parse();
}

}  // namespace kvserve::constraint
