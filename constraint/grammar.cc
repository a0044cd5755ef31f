// Grammar validation and the builder's expansions (repetition, UTF-8 code point ranges).
#include "constraint/grammar.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::constraint {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

// Reachable rules from the root, in discovery order.
std::vector<bool> Reachable(const Grammar& g) {
  std::vector<bool> seen(g.rules.size(), false);
  std::vector<int32_t> todo = {g.root};
  seen[g.root] = true;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    for (const auto& alt : g.rules[r].alternatives) {
      for (const Element& e : alt) {
        if (e.kind == Element::Kind::kRule && !seen[e.index]) {
          seen[e.index] = true;
          todo.push_back(e.index);
        }
      }
    }
  }
  return seen;
}

// Fixed point of "some alternative has every element satisfying `ok`".
template <typename ElementOk>
std::vector<bool> FixedPoint(const Grammar& g, ElementOk ok) {
  std::vector<bool> holds(g.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (holds[r]) continue;
      for (const auto& alt : g.rules[r].alternatives) {
        if (std::all_of(alt.begin(), alt.end(), [&](const Element& e) { return ok(e, holds); })) {
          holds[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  return holds;
}

}  // namespace

std::string EncodeUtf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

absl::Status ValidateGrammar(const Grammar& g, const GrammarLimits& limits) {
  const int64_t num_rules = static_cast<int64_t>(g.rules.size());
  if (num_rules == 0 || g.root < 0 || g.root >= num_rules) {
    return absl::InvalidArgumentError("grammar: has no root rule");
  }
  if (num_rules > limits.max_rules) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: ", num_rules, " rules, more than the limit of ", limits.max_rules));
  }
  int64_t num_elements = 0;
  for (const Rule& rule : g.rules) {
    for (const auto& alt : rule.alternatives) {
      num_elements += static_cast<int64_t>(alt.size());
      for (const Element& e : alt) {
        const size_t bound = e.kind == Element::Kind::kRule ? g.rules.size() : g.byte_sets.size();
        if (e.index < 0 || static_cast<size_t>(e.index) >= bound) {
          return absl::InvalidArgumentError(
              absl::StrCat("grammar: rule '", rule.name, "' refers to an undefined element"));
        }
      }
    }
  }
  if (num_elements > limits.max_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar: ", num_elements, " elements, more than the limit of ", limits.max_elements));
  }

  const std::vector<bool> reachable = Reachable(g);
  const std::vector<bool> productive =
      FixedPoint(g, [&](const Element& e, const std::vector<bool>& holds) {
        return e.kind == Element::Kind::kBytes ? !g.byte_sets[e.index].empty() : holds[e.index];
      });
  std::string barren;
  int num_barren = 0;
  for (int64_t r = 0; r < num_rules; ++r) {
    if (reachable[r] && !productive[r] && num_barren++ < 8) {
      absl::StrAppend(&barren, barren.empty() ? "" : ", ", "'", g.rules[r].name, "'");
    }
  }
  if (num_barren > 0) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: no finite string matches rule",
                                                   num_barren > 1 ? "s " : " ", barren,
                                                   num_barren > 8 ? ", ..." : ""));
  }
  const std::vector<bool> nullable =
      FixedPoint(g, [&](const Element& e, const std::vector<bool>& holds) {
        return e.kind == Element::Kind::kRule && holds[e.index];
      });

  // Left recursion: a cycle in "A can start with B" (B after only nullable elements of A)
  // through at least one reference that is not the last element of its alternative. A cycle of
  // last-element references only (a repetition of something that can be empty) is harmless:
  // the matcher continues a last reference at its caller's continuation, so it comes back to a
  // node it has already expanded.
  struct Edge {
    int32_t to;
    bool tail;
  };
  std::vector<std::vector<Edge>> starts(num_rules);
  for (int64_t r = 0; r < num_rules; ++r) {
    for (const auto& alt : g.rules[r].alternatives) {
      for (size_t i = 0; i < alt.size(); ++i) {
        const Element& e = alt[i];
        if (e.kind != Element::Kind::kRule) break;
        starts[r].push_back({e.index, i + 1 == alt.size()});
        if (!nullable[e.index]) break;
      }
    }
  }
  // Strongly connected components (Kosaraju, iterative): order by finish, then the reverse
  // graph.
  std::vector<int32_t> order;
  std::vector<bool> seen(num_rules, false);
  for (int64_t s = 0; s < num_rules; ++s) {
    if (seen[s]) continue;
    std::vector<std::pair<int32_t, size_t>> stack = {{static_cast<int32_t>(s), 0}};
    seen[s] = true;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == starts[r].size()) {
        order.push_back(r);
        stack.pop_back();
        continue;
      }
      const int32_t to = starts[r][next++].to;
      if (!seen[to]) {
        seen[to] = true;
        stack.push_back({to, 0});
      }
    }
  }
  std::vector<std::vector<int32_t>> reverse(num_rules);
  for (int64_t r = 0; r < num_rules; ++r) {
    for (const Edge& e : starts[r]) reverse[e.to].push_back(static_cast<int32_t>(r));
  }
  std::vector<int32_t> component(num_rules, -1);
  int32_t num_components = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (component[*it] >= 0) continue;
    std::vector<int32_t> todo = {*it};
    component[*it] = num_components;
    while (!todo.empty()) {
      const int32_t r = todo.back();
      todo.pop_back();
      for (int32_t from : reverse[r]) {
        if (component[from] < 0) {
          component[from] = num_components;
          todo.push_back(from);
        }
      }
    }
    ++num_components;
  }
  for (int64_t r = 0; r < num_rules; ++r) {
    if (!reachable[r]) continue;
    for (const Edge& e : starts[r]) {
      if (!e.tail && component[e.to] == component[r]) {
        return absl::InvalidArgumentError(
            absl::StrCat("grammar: rule '", g.rules[e.to].name,
                         "' is left-recursive (it can start with itself)"));
      }
    }
  }
  return absl::OkStatus();
}

int32_t GrammarBuilder::AddRule(std::string name) {
  grammar_.rules.push_back({std::move(name), {}});
  return static_cast<int32_t>(grammar_.rules.size() - 1);
}

void GrammarBuilder::AddAlternative(int32_t rule, std::vector<Element> sequence) {
  grammar_.rules[rule].alternatives.push_back(std::move(sequence));
}

Element GrammarBuilder::Bytes(const ByteSet& set) {
  for (size_t i = 0; i < grammar_.byte_sets.size(); ++i) {
    if (grammar_.byte_sets[i] == set) return {Element::Kind::kBytes, static_cast<int32_t>(i)};
  }
  grammar_.byte_sets.push_back(set);
  return {Element::Kind::kBytes, static_cast<int32_t>(grammar_.byte_sets.size() - 1)};
}

std::vector<Element> GrammarBuilder::Literal(std::string_view text) {
  std::vector<Element> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(Bytes(ByteSet::Single(static_cast<uint8_t>(c))));
  return out;
}

int32_t GrammarBuilder::Repeat(const std::string& name, std::vector<Element> body, int64_t min,
                               int64_t max) {
  // The tail after the `min` required copies: a star, or nested optionals for a bound.
  std::optional<int32_t> tail;
  if (max < 0) {
    const int32_t star = AddRule(absl::StrCat(name, "_star"));
    std::vector<Element> again = body;
    again.push_back(RuleRef(star));
    AddAlternative(star, std::move(again));
    AddAlternative(star, {});
    tail = star;
  } else {
    for (int64_t k = 0; k < max - min; ++k) {
      const int32_t opt = AddRule(absl::StrCat(name, "_opt", k));
      std::vector<Element> seq = body;
      if (tail) seq.push_back(RuleRef(*tail));
      AddAlternative(opt, std::move(seq));
      AddAlternative(opt, {});
      tail = opt;
    }
  }
  const int32_t rule = AddRule(name);
  std::vector<Element> seq;
  for (int64_t k = 0; k < min; ++k) seq.insert(seq.end(), body.begin(), body.end());
  if (tail) seq.push_back(RuleRef(*tail));
  AddAlternative(rule, std::move(seq));
  return rule;
}

void GrammarBuilder::AddUtf8Range(int32_t rule, uint32_t lo, uint32_t hi) {
  const std::string a = EncodeUtf8(lo);
  const std::string b = EncodeUtf8(hi);
  // Recursive split over the byte strings a..b (same length): a shared head, then the first
  // differing byte's low edge, middle and high edge.
  struct Splitter {
    GrammarBuilder* builder;
    int32_t rule;
    void Split(std::vector<Element> prefix, std::string_view lo, std::string_view hi) {
      const size_t n = lo.size();
      const auto byte = [](char c) { return static_cast<uint8_t>(c); };
      if (n == 1) {
        prefix.push_back(builder->Bytes(ByteSet::Range(byte(lo[0]), byte(hi[0]))));
        builder->AddAlternative(rule, std::move(prefix));
        return;
      }
      if (lo[0] == hi[0]) {
        prefix.push_back(builder->Bytes(ByteSet::Single(byte(lo[0]))));
        Split(std::move(prefix), lo.substr(1), hi.substr(1));
        return;
      }
      const std::string all_lo(n - 1, static_cast<char>(0x80));
      const std::string all_hi(n - 1, static_cast<char>(0xBF));
      uint8_t mid_lo = byte(lo[0]);
      uint8_t mid_hi = byte(hi[0]);
      if (lo.substr(1) != all_lo) {
        std::vector<Element> p = prefix;
        p.push_back(builder->Bytes(ByteSet::Single(byte(lo[0]))));
        Split(std::move(p), lo.substr(1), all_hi);
        ++mid_lo;
      }
      if (hi.substr(1) != all_hi) {
        std::vector<Element> p = prefix;
        p.push_back(builder->Bytes(ByteSet::Single(byte(hi[0]))));
        Split(std::move(p), all_lo, hi.substr(1));
        --mid_hi;
      }
      if (mid_lo <= mid_hi) {
        std::vector<Element> p = prefix;
        p.push_back(builder->Bytes(ByteSet::Range(mid_lo, mid_hi)));
        for (size_t i = 1; i < n; ++i) p.push_back(builder->Bytes(ByteSet::Range(0x80, 0xBF)));
        builder->AddAlternative(rule, std::move(p));
      }
    }
  };
  Splitter{this, rule}.Split({}, a, b);
}

int32_t GrammarBuilder::CodePointRange(const std::string& name, uint32_t lo, uint32_t hi) {
  return CodePointClass(name, {{lo, hi}}, false);
}

int32_t GrammarBuilder::CodePointClass(const std::string& name,
                                       std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                       bool negated) {
  // Normalise: clip, sort, merge, complement if negated, then cut out the surrogates.
  for (auto& [lo, hi] : ranges) hi = std::min(hi, kMaxCodePoint);
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                              [](const auto& r) { return r.first > r.second; }),
               ranges.end());
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> complement;
    uint32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) complement.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
    merged = std::move(complement);
  }
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  for (const auto& [lo, hi] : merged) {
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      pieces.push_back({lo, hi});
      continue;
    }
    if (lo < kSurrogateLo) pieces.push_back({lo, kSurrogateLo - 1});
    if (hi > kSurrogateHi) pieces.push_back({kSurrogateHi + 1, hi});
  }
  const int32_t rule = AddRule(name);
  // Split each piece at the encoding-length boundaries.
  constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (auto [lo, hi] : pieces) {
    for (uint32_t end : kLengthEnds) {
      if (lo > end) continue;
      const uint32_t top = std::min(hi, end);
      AddUtf8Range(rule, lo, top);
      if (top == hi) break;
      lo = top + 1;
    }
  }
  return rule;
}

Element GrammarBuilder::CodePoints(const std::string& name,
                                   std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                   bool negated) {
  bool ascii = !negated;
  for (const auto& r : ranges) ascii = ascii && r.second < 0x80;
  if (!ascii) return RuleRef(CodePointClass(name, std::move(ranges), negated));
  ByteSet set;
  for (const auto& [lo, hi] : ranges) {
    if (lo <= hi) set.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
  }
  return Bytes(set);
}

Grammar GrammarBuilder::Build(int32_t root) && {
  grammar_.root = root;
  return std::move(grammar_);
}

}  // namespace kvserve::constraint
