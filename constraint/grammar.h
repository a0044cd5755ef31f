// Grammar: the one form every constraint compiles to (GBNF, regex, choice, later JSON Schema):
// rules of alternatives of sequences whose terminals are sets of bytes, so that a matcher runs
// over the UTF-8 bytes tokens are made of.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::constraint {

// A set of byte values, 0..255.
class ByteSet {
 public:
  ByteSet() = default;
  static ByteSet Single(uint8_t b) {
    ByteSet s;
    s.Add(b);
    return s;
  }
  static ByteSet Range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.AddRange(lo, hi);
    return s;
  }
  void Add(uint8_t b) { bits_[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  bool Has(uint8_t b) const { return (bits_[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0; }
  bool operator==(const ByteSet& other) const { return bits_ == other.bits_; }
  ByteSet& operator|=(const ByteSet& other) {
    for (int i = 0; i < 4; ++i) bits_[i] |= other.bits_[i];
    return *this;
  }

 private:
  std::array<uint64_t, 4> bits_{};
};

// One element of an alternative: a byte of a set, or a whole rule.
struct Element {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  int32_t index = 0;  // into Grammar::byte_sets or Grammar::rules
};

struct Rule {
  std::string name;  // for errors; generated rules have names like "value_star_3"
  std::vector<std::vector<Element>> alternatives;  // an empty sequence matches nothing (ε)
};

// A context-free grammar over bytes; `root` is the rule a whole output must match.
struct Grammar {
  std::vector<ByteSet> byte_sets;
  std::vector<Rule> rules;
  int32_t root = 0;
};

// Limits a compiled constraint must stay within (the server's flags set them).
struct GrammarLimits {
  int64_t max_rules = 10000;
  int64_t max_elements = 200000;  // elements of every alternative together
};

// Checks what the matcher relies on: every reference in range, every rule able to derive a
// finite string (else no finite string matches it), the root able to, and no left recursion (a rule
// that can start with itself, directly or through rules that can be empty). InvalidArgument
// naming the rule otherwise, or naming the limit exceeded.
absl::Status ValidateGrammar(const Grammar& grammar, const GrammarLimits& limits = {});

// Builds grammars: interns byte sets, adds rules, and expands repetition into helper rules.
class GrammarBuilder {
 public:
  // A new rule with no alternatives yet (forward references need its index first).
  int32_t AddRule(std::string name);
  void AddAlternative(int32_t rule, std::vector<Element> sequence);
  Element Bytes(const ByteSet& set);
  Element RuleRef(int32_t rule) const { return {Element::Kind::kRule, rule}; }
  // The bytes of `text`, one element each.
  std::vector<Element> Literal(std::string_view text);
  // A rule matching `body` repeated min..max times (max < 0: unbounded). Bounded repeats
  // expand into nested optional rules, so {0,n} costs n rules of one or two alternatives.
  int32_t Repeat(const std::string& name, std::vector<Element> body, int64_t min, int64_t max);
  // A rule matching any code point in [lo, hi] (inclusive, surrogates excluded) as UTF-8.
  int32_t CodePointRange(const std::string& name, uint32_t lo, uint32_t hi);
  // A rule matching any one code point of `ranges` (pairs lo, hi), or of their complement.
  int32_t CodePointClass(const std::string& name, std::vector<std::pair<uint32_t, uint32_t>> ranges,
                         bool negated);
  // One element matching a code point of `ranges` (or of their complement): a byte set when
  // they are ASCII and not negated, else a reference to a new CodePointClass rule `name`.
  Element CodePoints(const std::string& name, std::vector<std::pair<uint32_t, uint32_t>> ranges,
                     bool negated);
  int64_t num_rules() const { return static_cast<int64_t>(grammar_.rules.size()); }
  Grammar Build(int32_t root) &&;

 private:
  // Adds to `rule` the alternatives matching the UTF-8 encodings of [lo, hi], where lo and hi
  // encode with the same length.
  void AddUtf8Range(int32_t rule, uint32_t lo, uint32_t hi);
  Grammar grammar_;
};

// The UTF-8 encoding of code point `cp` (<= 0x10FFFF).
std::string EncodeUtf8(uint32_t cp);

}  // namespace kvserve::constraint
