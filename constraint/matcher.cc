// The grammar's flattening and the pushdown recognizer's closure and advance.
#include "constraint/matcher.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace kvserve::constraint {

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Create(
    Grammar grammar, const GrammarLimits& limits) {
  if (absl::Status s = ValidateGrammar(grammar, limits); !s.ok()) return s;
  std::shared_ptr<CompiledGrammar> out(new CompiledGrammar());
  out->byte_sets_ = std::move(grammar.byte_sets);
  out->root_ = grammar.root;
  out->rule_starts_.resize(grammar.rules.size());
  for (size_t r = 0; r < grammar.rules.size(); ++r) {
    for (const auto& alt : grammar.rules[r].alternatives) {
      out->rule_starts_[r].push_back(static_cast<int32_t>(out->slots_.size()));
      for (const Element& e : alt) {
        out->slots_.push_back(
            {e.kind == Element::Kind::kBytes ? Slot::Kind::kBytes : Slot::Kind::kRule, e.index});
      }
      out->slots_.push_back({Slot::Kind::kEnd, 0});
    }
  }
  return std::shared_ptr<const CompiledGrammar>(std::move(out));
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  ++epoch_;
  for (int32_t start : grammar_->rule_starts()[grammar_->root()]) {
    Close(Intern(start, -1), &initial_.stacks, &initial_.accepting);
  }
  std::sort(initial_.stacks.begin(), initial_.stacks.end());
  initial_.stacks.erase(std::unique(initial_.stacks.begin(), initial_.stacks.end()),
                        initial_.stacks.end());
}

int32_t Matcher::Intern(int32_t slot, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(slot) << 32) | static_cast<uint32_t>(parent + 1);
  auto [it, inserted] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) {
    nodes_.push_back({slot, parent});
    visited_.push_back(0);
    succ_.emplace_back();
  }
  return it->second;
}

void Matcher::Close(int32_t start, std::vector<int32_t>* out, bool* accepting) {
  const auto& slots = grammar_->slots();
  std::vector<int32_t>& work = work_;
  work.clear();
  work.push_back(start);
  while (!work.empty()) {
    const int32_t n = work.back();
    work.pop_back();
    if (n < 0) {
      *accepting = true;
      continue;
    }
    if (visited_[n] == epoch_) continue;
    visited_[n] = epoch_;
    const Node node = nodes_[n];
    const CompiledGrammar::Slot& slot = slots[node.slot];
    switch (slot.kind) {
      case CompiledGrammar::Slot::Kind::kBytes:
        // A stack waiting on an empty set has no continuation: it is not kept.
        if (!grammar_->byte_sets()[slot.index].empty()) out->push_back(n);
        break;
      case CompiledGrammar::Slot::Kind::kEnd:
        work.push_back(node.parent);
        break;
      case CompiledGrammar::Slot::Kind::kRule: {
        // A reference in tail position continues straight at the parent, so that right
        // recursion (repetition) does not deepen the stack.
        const bool tail = slots[node.slot + 1].kind == CompiledGrammar::Slot::Kind::kEnd;
        const int32_t cont = tail ? node.parent : Intern(node.slot + 1, node.parent);
        for (int32_t s : grammar_->rule_starts()[slot.index]) work.push_back(Intern(s, cont));
        break;
      }
    }
  }
}

absl::Span<const int32_t> Matcher::Successors(int32_t n, bool* accepting) {
  if (succ_[n].begin < 0) {
    const auto& slots = grammar_->slots();
    const Node node = nodes_[n];
    const bool ends = slots[node.slot + 1].kind == CompiledGrammar::Slot::Kind::kEnd;
    const int32_t next = ends ? node.parent : Intern(node.slot + 1, node.parent);
    scratch_.clear();
    bool acc = false;
    ++epoch_;
    Close(next, &scratch_, &acc);
    // Close may have interned nodes (succ_ grew): index afresh.
    Succ& s = succ_[n];
    s.begin = static_cast<int32_t>(succ_nodes_.size());
    succ_nodes_.insert(succ_nodes_.end(), scratch_.begin(), scratch_.end());
    s.end = static_cast<int32_t>(succ_nodes_.size());
    s.accepting = acc;
  }
  const Succ& s = succ_[n];
  *accepting = s.accepting;
  return absl::Span<const int32_t>(succ_nodes_.data() + s.begin,
                                   static_cast<size_t>(s.end - s.begin));
}

MatchState Matcher::Advance(const MatchState& state, uint8_t byte) {
  MatchState next;
  for (int32_t n : state.stacks) {
    if (!WaitingBytes(n).Has(byte)) continue;
    bool acc = false;
    absl::Span<const int32_t> succ = Successors(n, &acc);
    next.accepting |= acc;
    next.stacks.insert(next.stacks.end(), succ.begin(), succ.end());
  }
  std::sort(next.stacks.begin(), next.stacks.end());
  next.stacks.erase(std::unique(next.stacks.begin(), next.stacks.end()), next.stacks.end());
  return next;
}

MatchState Matcher::AdvanceAll(MatchState state, std::string_view bytes) {
  for (char c : bytes) {
    if (state.dead()) break;
    state = Advance(state, static_cast<uint8_t>(c));
  }
  return state;
}

bool Matcher::Allows(const MatchState& state, std::string_view bytes) {
  return !AdvanceAll(state, bytes).dead();
}

ByteSet Matcher::NextBytes(const MatchState& state) const {
  ByteSet out;
  const auto& slots = grammar_->slots();
  const auto& sets = grammar_->byte_sets();
  for (int32_t n : state.stacks) {
    out |= sets[slots[nodes_[n].slot].index];
  }
  return out;
}

bool Matcher::Matches(std::string_view text) { return AdvanceAll(initial_, text).accepting; }

}  // namespace kvserve::constraint
