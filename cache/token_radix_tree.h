// TokenRadixTree: a compressed trie over token id sequences for longest-prefix lookup.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/types/span.h"

namespace kvserve::cache {

// Maps token sequences to the ids of the entries that hold them (several entries may hold
// the same sequence). Edges carry runs of tokens; a node exists where a stored sequence ends
// or where stored sequences branch, and removal merges nodes back, so the tree's size is
// linear in the number of entries and a lookup costs O(tokens matched). Deterministic: ties
// are broken by token order, never by hashing. Not thread-safe (the PrefixStore locks it).
class TokenRadixTree {
 public:
  using EntryId = uint64_t;

  // The result of a lookup: `ids` are the entries whose sequences end at one node and cover
  // the first `length` tokens of the query (empty ids and length 0 when nothing matches).
  struct Match {
    int64_t length = 0;
    std::vector<EntryId> ids;  // in insertion order
  };

  TokenRadixTree();
  ~TokenRadixTree();
  TokenRadixTree(const TokenRadixTree&) = delete;
  TokenRadixTree& operator=(const TokenRadixTree&) = delete;

  // Records that entry `id` holds `tokens` (non-empty; an empty sequence is ignored).
  void Insert(absl::Span<const int32_t> tokens, EntryId id);
  // Forgets what Insert(tokens, id) recorded; false when it is not there.
  bool Erase(absl::Span<const int32_t> tokens, EntryId id);

  // Length of the longest common prefix of `tokens` and any stored sequence.
  int64_t CommonPrefixLength(absl::Span<const int32_t> tokens) const;
  // Partial matching: length = min(CommonPrefixLength(tokens), max_length); ids are the
  // entries that end exactly there if any, else those ending at the nearest node below it
  // (following the smallest next token), whose sequences are longer than `length`.
  Match LongestPrefix(absl::Span<const int32_t> tokens, int64_t max_length) const;
  // Boundary matching: the longest stored sequence that is a prefix of `tokens` and at most
  // `max_length` long, with the entries that hold it.
  Match LongestStoredPrefix(absl::Span<const int32_t> tokens, int64_t max_length) const;

  bool empty() const;
  // Nodes other than the root (tests check that removal merges and prunes).
  int64_t num_nodes() const;

 private:
  struct Node;

  // Where a walk along a query stopped: the deepest node whose whole path matched, the
  // query tokens matched (`depth`), and, if the walk went part-way into a child's edge,
  // that child. `deepest_terminal`/`terminal_depth` track the deepest node with ids.
  struct Walk {
    const Node* node = nullptr;
    int64_t depth = 0;
    const Node* partial_child = nullptr;
    const Node* deepest_terminal = nullptr;
    int64_t terminal_depth = 0;
  };
  Walk Follow(absl::Span<const int32_t> tokens, int64_t max_length) const;

  std::unique_ptr<Node> root_;
};

}  // namespace kvserve::cache
