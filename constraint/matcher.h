// Matcher: a byte-level recognizer of a validated Grammar (a pushdown automaton run over every
// parse at once), with immutable states so that a token mask can explore and drop them freely.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "constraint/grammar.h"

namespace kvserve::constraint {

// A grammar flattened for matching: every alternative's elements in one array, each
// alternative closed by an end marker; rule references point at their alternatives' starts.
class CompiledGrammar {
 public:
  // Validates (ValidateGrammar) and flattens; its errors are ValidateGrammar's.
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Create(
      Grammar grammar, const GrammarLimits& limits = {});

  struct Slot {
    enum class Kind : uint8_t { kBytes, kRule, kEnd };
    Kind kind = Kind::kEnd;
    int32_t index = 0;  // kBytes: into byte_sets(); kRule: into rule_starts()
  };
  const std::vector<Slot>& slots() const { return slots_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  // Per rule: the slot positions where its alternatives start.
  const std::vector<std::vector<int32_t>>& rule_starts() const { return rule_starts_; }
  int32_t root() const { return root_; }

 private:
  CompiledGrammar() = default;
  std::vector<Slot> slots_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<int32_t>> rule_starts_;
  int32_t root_ = 0;
};

// The set of parses alive after some bytes: each a stack whose top waits at a byte slot.
// Nodes are indices into the Matcher's arena. Cheap to copy.
struct MatchState {
  std::vector<int32_t> stacks;  // sorted, unique
  bool accepting = false;       // the bytes so far are a whole string of the language
  bool dead() const { return stacks.empty() && !accepting; }
  // No byte can follow (only the end of the string).
  bool finished() const { return stacks.empty(); }
  bool operator==(const MatchState& other) const = default;
};

// One matcher per constrained sequence (or shared by the rows of one request: states are
// values). Not thread-safe: its arena grows as states are made. A stack node is interned, so
// equal parses share one node and a state's size is bounded by the grammar's positions times
// the distinct stacks below them.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // The state before any byte.
  const MatchState& initial() const { return initial_; }
  // The state after `byte`; dead() when the byte cannot follow.
  MatchState Advance(const MatchState& state, uint8_t byte);
  // Advance over every byte (stops early once dead).
  MatchState AdvanceAll(MatchState state, std::string_view bytes);
  // Whether `bytes` alone can follow `state` (a prefix of some continuation), without keeping
  // the result.
  bool Allows(const MatchState& state, std::string_view bytes);
  // The bytes the state allows next.
  ByteSet NextBytes(const MatchState& state) const;
  // Whether `text` is a whole string of the language.
  bool Matches(std::string_view text);

  int64_t arena_size() const { return static_cast<int64_t>(nodes_.size()); }
  const CompiledGrammar& grammar() const { return *grammar_; }

  // Low-level stepping for walks that keep their own state buffers (ComputeTokenMask):
  // a stack node of a state waits at one byte slot; these answer for one such node.
  // The bytes `node` accepts next.
  const ByteSet& WaitingBytes(int32_t node) const {
    return grammar_->byte_sets()[grammar_->slots()[nodes_[node].slot].index];
  }
  // The byte-waiting nodes (unsorted, unique) after `node` consumes a byte of WaitingBytes,
  // and via `accepting` whether the whole string may end there. Computed once per node and
  // memoised (no allocation after the first call); the span is valid until the next call.
  absl::Span<const int32_t> Successors(int32_t node, bool* accepting);

 private:
  struct Node {
    int32_t slot;    // a slot of the grammar
    int32_t parent;  // the node to continue at when this frame ends; -1: the root's end
  };
  int32_t Intern(int32_t slot, int32_t parent);
  // Adds the byte-waiting nodes reachable from `node` without consuming input.
  void Close(int32_t node, std::vector<int32_t>* out, bool* accepting);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> index_;
  // Per Close pass: nodes already expanded (epoch-stamped to avoid clearing).
  std::vector<uint32_t> visited_;
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_;  // Close's worklist, kept to avoid an allocation per byte
  // Successors' memo: per node, [begin, end) into succ_nodes_ (begin < 0: not computed yet)
  // and whether its closure reaches the root's end.
  struct Succ {
    int32_t begin = -1;
    int32_t end = -1;
    bool accepting = false;
  };
  std::vector<Succ> succ_;
  std::vector<int32_t> succ_nodes_;
  std::vector<int32_t> scratch_;
  MatchState initial_;
};

}  // namespace kvserve::constraint
