// The vocabulary trie's construction and the masked walk.
#include "constraint/token_mask.h"

#include <algorithm>
#include <numeric>

namespace kvserve::constraint {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes)
    : vocab_size_(static_cast<int64_t>(token_bytes.size())) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (!token_bytes[id].empty()) order.push_back(static_cast<int32_t>(id));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[a] != token_bytes[b] ? token_bytes[a] < token_bytes[b] : a < b;
  });
  // Sorted strings give the depth-first order directly: each token shares with the previous
  // one its common prefix's nodes, and opens new nodes for the rest. `path[d]` is the open
  // node at depth d + 1.
  std::vector<int32_t> path;
  std::string previous;
  for (int32_t id : order) {
    const std::string& s = token_bytes[id];
    size_t common = 0;
    while (common < previous.size() && common < s.size() && previous[common] == s[common]) {
      ++common;
    }
    common = std::min(common, path.size());
    for (size_t d = path.size(); d > common; --d) {
      nodes_[path[d - 1]].subtree_end = static_cast<int32_t>(nodes_.size());
    }
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      Node node;
      node.byte = static_cast<uint8_t>(s[d]);
      node.depth = static_cast<int32_t>(d + 1);
      node.tokens_begin = node.tokens_end = static_cast<int32_t>(token_ids_.size());
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(node);
    }
    // Tokens sharing these bytes end at the same node: sorted, they come one after another.
    Node& end = nodes_[path.back()];
    if (end.tokens_end != static_cast<int32_t>(token_ids_.size())) {
      end.tokens_begin = static_cast<int32_t>(token_ids_.size());
    }
    token_ids_.push_back(id);
    end.tokens_end = static_cast<int32_t>(token_ids_.size());
    previous = s;
  }
  for (int32_t n : path) nodes_[n].subtree_end = static_cast<int32_t>(nodes_.size());
}

TokenBitmask ComputeTokenMask(Matcher& matcher, const MatchState& state, const TokenTrie& trie,
                              absl::Span<const int32_t> end_tokens) {
  TokenBitmask mask((static_cast<size_t>(trie.vocab_size()) + 63) / 64, 0);
  if (state.accepting) {
    for (int32_t id : end_tokens) {
      if (id >= 0 && id < trie.vocab_size()) mask[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
  if (state.finished()) return mask;
  const std::vector<TokenTrie::Node>& nodes = trie.nodes();
  const std::vector<int32_t>& ids = trie.token_ids();
  // The states along the current trie path, without an allocation per byte: the state after
  // the first d bytes is buf[begin[d], begin[d + 1]) (unsorted, unique), and next[d] the
  // bytes it accepts, so that a child whose byte no stack accepts is skipped before any
  // stepping. `mark` dedups the nodes of the state being built (epoch-stamped).
  std::vector<int32_t> buf(state.stacks.begin(), state.stacks.end());
  std::vector<int32_t> begin = {0, static_cast<int32_t>(buf.size())};
  std::vector<ByteSet> next = {matcher.NextBytes(state)};
  std::vector<uint32_t> mark(static_cast<size_t>(matcher.arena_size()), 0);
  uint32_t epoch = 0;
  const int32_t n = static_cast<int32_t>(nodes.size());
  for (int32_t i = 0; i < n;) {
    const TokenTrie::Node& node = nodes[i];
    const int32_t d = node.depth - 1;  // the parent state's depth
    if (!next[d].Has(node.byte)) {
      i = node.subtree_end;
      continue;
    }
    // Drop the states of the previous path deeper than the parent.
    buf.resize(static_cast<size_t>(begin[d + 1]));
    begin.resize(static_cast<size_t>(d + 2));
    next.resize(static_cast<size_t>(d + 1));
    ++epoch;
    bool accepting = false;
    ByteSet bytes;
    const int32_t from = begin[d];
    const int32_t to = begin[d + 1];
    for (int32_t k = from; k < to; ++k) {
      const int32_t s = buf[static_cast<size_t>(k)];
      if (!matcher.WaitingBytes(s).Has(node.byte)) continue;
      bool acc = false;
      absl::Span<const int32_t> succ = matcher.Successors(s, &acc);
      accepting |= acc;
      if (mark.size() < static_cast<size_t>(matcher.arena_size())) {
        mark.resize(static_cast<size_t>(matcher.arena_size()), 0);
      }
      for (int32_t t : succ) {
        if (mark[static_cast<size_t>(t)] == epoch) continue;
        mark[static_cast<size_t>(t)] = epoch;
        buf.push_back(t);
        bytes |= matcher.WaitingBytes(t);
      }
    }
    const bool alive = accepting || static_cast<int32_t>(buf.size()) > to;
    if (!alive) {
      i = node.subtree_end;
      continue;
    }
    for (int32_t t = node.tokens_begin; t < node.tokens_end; ++t) {
      mask[ids[t] >> 6] |= uint64_t{1} << (ids[t] & 63);
    }
    begin.push_back(static_cast<int32_t>(buf.size()));
    next.push_back(bytes);
    ++i;
  }
  return mask;
}

size_t MaskCache::KeyHash::operator()(const MatchState& s) const {
  size_t h = s.accepting ? 0x9e3779b97f4a7c15ull : 0;
  for (int32_t n : s.stacks) h = (h ^ static_cast<size_t>(n)) * 0x100000001b3ull;
  return h;
}

const TokenBitmask& MaskCache::Get(Matcher& matcher, const MatchState& state, const TokenTrie& trie,
                                   absl::Span<const int32_t> end_tokens) {
  if (auto it = masks_.find(state); it != masks_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  if (static_cast<int64_t>(masks_.size()) >= max_entries_) masks_.clear();
  return masks_.emplace(state, ComputeTokenMask(matcher, state, trie, end_tokens)).first->second;
}

}  // namespace kvserve::constraint
