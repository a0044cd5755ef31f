// ConstraintVocabulary, ConstraintCompiler's bounded cache, and SequenceConstraint's rows.
#include "constraint/token_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "constraint/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::constraint {
namespace {

// The cache key: the kind, then every text the spec carries, each length-prefixed so that no
// two specs share a key.
std::string KeyOf(const ConstraintSpec& spec) {
  std::string key = absl::StrCat(static_cast<int>(spec.kind), ":", spec.whitespace_bytes, ":",
                                 spec.text.size(), ":", spec.text);
  for (const std::string& choice : spec.choices) absl::StrAppend(&key, choice.size(), ":", choice);
  return key;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabulary::Create(
    const tokenizer::Tokenizer& tokenizer, std::vector<int32_t> end_tokens, int64_t model_vocab) {
  absl::StatusOr<std::vector<std::string>> bytes = TokenBytesOf(tokenizer);
  if (!bytes.ok()) return bytes.status();
  if (model_vocab < static_cast<int64_t>(bytes->size())) {
    return absl::InvalidArgumentError(absl::StrCat("the model's vocabulary (", model_vocab,
                                                   ") is smaller than the tokenizer's (",
                                                   bytes->size(), ")"));
  }
  return std::make_shared<const ConstraintVocabulary>(*std::move(bytes), std::move(end_tokens),
                                                      model_vocab);
}

ConstraintVocabulary::ConstraintVocabulary(std::vector<std::string> token_bytes,
                                           std::vector<int32_t> end_tokens, int64_t model_vocab)
    : token_bytes_(std::move(token_bytes)),
      trie_(token_bytes_),
      end_tokens_(std::move(end_tokens)),
      model_vocab_(std::max<int64_t>(model_vocab, static_cast<int64_t>(token_bytes_.size()))) {
  // An end token past the tokenizer's vocabulary could never be allowed by a mask.
  std::erase_if(end_tokens_, [&](int32_t id) {
    return id < 0 || id >= static_cast<int64_t>(token_bytes_.size());
  });
}

ConstraintCompiler::ConstraintCompiler(const tokenizer::Tokenizer* tokenizer,
                                       std::vector<int32_t> end_tokens, int64_t model_vocab,
                                       ConstraintCompilerOptions options)
    : tokenizer_(tokenizer),
      end_tokens_(std::move(end_tokens)),
      model_vocab_(model_vocab),
      options_(std::move(options)) {}

ConstraintCompiler::ConstraintCompiler(std::shared_ptr<const ConstraintVocabulary> vocabulary,
                                       ConstraintCompilerOptions options)
    : tokenizer_(nullptr),
      model_vocab_(vocabulary->model_vocab()),
      options_(std::move(options)),
      vocabulary_(std::move(vocabulary)) {}

absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> ConstraintCompiler::Vocabulary() {
  // Called with mu_ held.
  if (vocabulary_ != nullptr) return vocabulary_;
  if (!vocabulary_status_.ok()) return vocabulary_status_;
  if (tokenizer_ == nullptr) {
    vocabulary_status_ = absl::FailedPreconditionError(
        "constraints need the model's tokenizer (tokenizer.json), and this model has none");
    return vocabulary_status_;
  }
  absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> built =
      ConstraintVocabulary::Create(*tokenizer_, end_tokens_, model_vocab_);
  if (!built.ok()) {
    vocabulary_status_ = absl::FailedPreconditionError(
        absl::StrCat("the vocabulary cannot be read as bytes: ", built.status().message()));
    return vocabulary_status_;
  }
  vocabulary_ = *std::move(built);
  return vocabulary_;
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::Compile(
    const ConstraintSpec& spec) {
  const std::string key = KeyOf(spec);
  std::shared_ptr<const ConstraintVocabulary> vocabulary;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
    ++stats_.misses;
    absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> v = Vocabulary();
    if (!v.ok()) return v.status();
    vocabulary = *std::move(v);
  }
  // Compiled outside the lock: one slow grammar does not hold up other requests' lookups.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar =
      CompileConstraint(spec, options_.limits);
  if (!grammar.ok()) return grammar.status();
  auto compiled = std::make_shared<CompiledConstraint>();
  compiled->kind = spec.kind;
  compiled->grammar = *std::move(grammar);
  compiled->vocabulary = std::move(vocabulary);
  if (options_.cache_entries <= 0) return compiled;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (static_cast<int64_t>(lru_.size()) > options_.cache_entries) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  stats_.entries = static_cast<int64_t>(lru_.size());
  return compiled;
}

ConstraintCompiler::Stats ConstraintCompiler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

SequenceConstraint::SequenceConstraint(std::shared_ptr<const CompiledConstraint> compiled, int rows)
    : compiled_(std::move(compiled)),
      matcher_(compiled_->grammar),
      cache_(256),
      states_(static_cast<size_t>(std::max(rows, 1)), matcher_.initial()),
      none_((static_cast<size_t>(compiled_->vocabulary->trie().vocab_size()) + 63) / 64, 0) {}

void SequenceConstraint::Reorder(absl::Span<const int64_t> parents) {
  std::vector<MatchState> next;
  next.reserve(parents.size());
  for (int64_t parent : parents) next.push_back(states_[static_cast<size_t>(parent)]);
  states_ = std::move(next);
}

const TokenBitmask& SequenceConstraint::Mask(int row) {
  const MatchState& state = states_[static_cast<size_t>(row)];
  if (state.dead()) return none_;
  const ConstraintVocabulary& vocabulary = *compiled_->vocabulary;
  return cache_.Get(matcher_, state, vocabulary.trie(), vocabulary.end_tokens());
}

bool SequenceConstraint::ApplyMask(int row, absl::Span<float> logits) {
  const TokenBitmask& mask = Mask(row);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t width = logits.size();
  const size_t masked = std::min(width, mask.size() * 64);
  bool any = false;
  // A word at a time: whole words of disallowed tokens are the common case.
  for (size_t word = 0; word * 64 < masked; ++word) {
    const uint64_t bits = mask[word];
    const size_t begin = word * 64;
    const size_t end = std::min(masked, begin + 64);
    if (bits == 0) {
      std::fill(logits.begin() + begin, logits.begin() + end, kNegInf);
      continue;
    }
    any = true;
    if (bits == ~uint64_t{0}) continue;
    for (size_t i = begin; i < end; ++i) {
      if (((bits >> (i - begin)) & 1) == 0) logits[i] = kNegInf;
    }
  }
  // Ids past the tokenizer's vocabulary (padding rows of the embedding) are never allowed.
  std::fill(logits.begin() + masked, logits.end(), kNegInf);
  return any;
}

bool SequenceConstraint::Accept(int row, int32_t token) {
  MatchState& state = states_[static_cast<size_t>(row)];
  const ConstraintVocabulary& vocabulary = *compiled_->vocabulary;
  for (int32_t end : vocabulary.end_tokens()) {
    if (token == end) return state.accepting;
  }
  if (token < 0 || token >= static_cast<int64_t>(vocabulary.token_bytes().size())) {
    state = MatchState{};
    return false;
  }
  const std::string& bytes = vocabulary.token_bytes()[static_cast<size_t>(token)];
  if (bytes.empty()) {
    state = MatchState{};
    return false;
  }
  state = matcher_.AdvanceAll(std::move(state), bytes);
  return !state.dead();
}

std::vector<int32_t> SequenceConstraint::ForcedTokens(int row, int max_tokens) {
  std::vector<int32_t> forced;
  MatchState state = states_[static_cast<size_t>(row)];
  // The forced bytes: while exactly one byte may follow and the text so far is not already a
  // whole string (where ending would be the other choice).
  std::string bytes;
  while (!state.accepting && !state.finished() &&
         static_cast<int64_t>(bytes.size()) < int64_t{64} * std::max(max_tokens, 1)) {
    const ByteSet next = matcher_.NextBytes(state);
    int only = -1;
    int count = 0;
    for (int b = 0; b < 256 && count < 2; ++b) {
      if (next.Has(static_cast<uint8_t>(b))) {
        only = b;
        ++count;
      }
    }
    if (count != 1) break;
    bytes.push_back(static_cast<char>(only));
    state = matcher_.Advance(state, static_cast<uint8_t>(only));
  }
  if (bytes.empty()) return forced;
  const bool ends_value = state.finished();
  // Spell the bytes with the longest tokens of the trie, walking its depth-first layout.
  const TokenTrie& trie = compiled_->vocabulary->trie();
  const std::vector<TokenTrie::Node>& nodes = trie.nodes();
  const int32_t n = static_cast<int32_t>(nodes.size());
  size_t pos = 0;
  std::vector<size_t> ends;  // where each forced token ends in `bytes`
  while (pos < bytes.size() && static_cast<int>(forced.size()) < max_tokens) {
    int32_t best_token = -1;
    size_t best_len = 0;
    int32_t begin = 0;
    int32_t end = n;
    for (size_t d = 0; pos + d < bytes.size(); ++d) {
      const auto want = static_cast<uint8_t>(bytes[pos + d]);
      int32_t child = begin;
      while (child < end && nodes[child].byte != want) child = nodes[child].subtree_end;
      if (child >= end) break;
      if (nodes[child].tokens_begin < nodes[child].tokens_end) {
        best_token = trie.token_ids()[nodes[child].tokens_begin];
        best_len = d + 1;
      }
      begin = child + 1;
      end = nodes[child].subtree_end;
    }
    if (best_token < 0) break;  // no token spells the next byte: sampling takes over
    forced.push_back(best_token);
    pos += best_len;
    ends.push_back(pos);
  }
  // A token that ends exactly where the forced bytes end could, in the model's own
  // tokenization, have merged with what follows; leave that last one to sampling unless the
  // value ends there.
  if (!forced.empty() && ends.back() == bytes.size() && !ends_value) forced.pop_back();
  return forced;
}

}  // namespace kvserve::constraint
