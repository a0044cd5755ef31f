// TokenTrie and ComputeTokenMask: which tokens of a vocabulary may come next under a matcher
// state, by walking a trie of the tokens' byte strings once per state.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"
#include "constraint/matcher.h"

namespace kvserve::constraint {

// The vocabulary as byte strings, in a trie laid out in depth-first order so that a walk that
// finds a dead prefix skips its whole subtree in one jump. Immutable once built: any thread.
class TokenTrie {
 public:
  // `token_bytes[id]` is the UTF-8 (or raw byte) string token `id` decodes to; an empty string
  // (special tokens, tokens that decode to nothing) is never allowed by a mask.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  struct Node {
    uint8_t byte = 0;
    int32_t depth = 0;         // 1 for the first byte of a token
    int32_t subtree_end = 0;   // the index after this node's subtree
    int32_t tokens_begin = 0;  // into token_ids(): the tokens whose bytes end at this node
    int32_t tokens_end = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  int64_t vocab_size_ = 0;
};

// A bit per token id: bit (id % 64) of word (id / 64).
using TokenBitmask = std::vector<uint64_t>;

inline bool MaskAllows(const TokenBitmask& mask, int32_t id) {
  return (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

// The tokens whose bytes can follow `state` (every byte keeps a parse alive), and the ids of
// `end_tokens` (EOS) when `state` is accepting. Engine or mask thread: the matcher is its own.
TokenBitmask ComputeTokenMask(Matcher& matcher, const MatchState& state, const TokenTrie& trie,
                              absl::Span<const int32_t> end_tokens);

// The masks of the states one matcher has met, so that a state met again (a JSON string's
// content after each character, a list after each item) costs a lookup. Bounded: past
// `max_entries` it starts over. One per matcher (states are the matcher's).
class MaskCache {
 public:
  explicit MaskCache(int64_t max_entries = 64) : max_entries_(max_entries) {}
  // ComputeTokenMask's answer for `state`, computed at its first request.
  const TokenBitmask& Get(Matcher& matcher, const MatchState& state, const TokenTrie& trie,
                          absl::Span<const int32_t> end_tokens);
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  struct KeyHash {
    size_t operator()(const MatchState& s) const;
  };
  int64_t max_entries_;
  std::unordered_map<MatchState, TokenBitmask, KeyHash> masks_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace kvserve::constraint
