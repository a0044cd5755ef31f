// What the server uses of the constraint engine: a constraint compiled for one vocabulary
// (ConstraintCompiler, a bounded cache shared by every request), and one request's decoding
// state under it (SequenceConstraint: a matcher state per row, the mask of each row's next
// token, forced continuations for jump-forward).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "constraint/constraint.h"
#include "constraint/matcher.h"
#include "constraint/token_mask.h"

namespace kvserve::tokenizer {
class Tokenizer;
}  // namespace kvserve::tokenizer

namespace kvserve::constraint {

// One vocabulary as masks see it: each token's bytes in a trie, the ids that end a sequence
// (allowed only where the constraint accepts), and the logits' width (the model's vocabulary,
// which may be wider than the tokenizer's: ids past the tokenizer are never allowed).
// Immutable: any thread.
class ConstraintVocabulary {
 public:
  // InvalidArgument when `model_vocab` is smaller than the tokenizer's vocabulary; the errors
  // of TokenBytesOf otherwise.
  static absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> Create(
      const tokenizer::Tokenizer& tokenizer, std::vector<int32_t> end_tokens, int64_t model_vocab);
  // From token byte strings directly (tests, tools).
  ConstraintVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens,
                       int64_t model_vocab);

  const TokenTrie& trie() const { return trie_; }
  const std::vector<std::string>& token_bytes() const { return token_bytes_; }
  absl::Span<const int32_t> end_tokens() const { return end_tokens_; }
  int64_t model_vocab() const { return model_vocab_; }

 private:
  std::vector<std::string> token_bytes_;
  TokenTrie trie_;
  std::vector<int32_t> end_tokens_;
  int64_t model_vocab_;
};

// A constraint ready for decoding: its grammar and the vocabulary it masks.
struct CompiledConstraint {
  ConstraintSpec::Kind kind = ConstraintSpec::Kind::kRegex;
  std::shared_ptr<const CompiledGrammar> grammar;
  std::shared_ptr<const ConstraintVocabulary> vocabulary;
};

struct ConstraintCompilerOptions {
  ConstraintLimits limits;
  // Compiled constraints kept for reuse (the least recently used leaves first); 0 keeps none.
  int64_t cache_entries = 256;
};

// Compiles constraints for one vocabulary and keeps the most recent ones, so that a schema
// every request of a service sends is compiled once. Thread-safe (adapter threads compile
// while building a request). The vocabulary's trie is built at the first Compile.
class ConstraintCompiler {
 public:
  // `tokenizer` must outlive the compiler.
  ConstraintCompiler(const tokenizer::Tokenizer* tokenizer, std::vector<int32_t> end_tokens,
                     int64_t model_vocab, ConstraintCompilerOptions options = {});
  // A compiler over a ready vocabulary (tests, tools).
  ConstraintCompiler(std::shared_ptr<const ConstraintVocabulary> vocabulary,
                     ConstraintCompilerOptions options = {});

  // InvalidArgument naming the position or JSON pointer (CompileConstraint's errors);
  // FailedPrecondition when the vocabulary cannot be read as bytes.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(const ConstraintSpec& spec);

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t entries = 0;
  };
  Stats stats() const;

 private:
  absl::StatusOr<std::shared_ptr<const ConstraintVocabulary>> Vocabulary();

  const tokenizer::Tokenizer* const tokenizer_;
  const std::vector<int32_t> end_tokens_;
  const int64_t model_vocab_;
  const ConstraintCompilerOptions options_;
  mutable std::mutex mu_;
  std::shared_ptr<const ConstraintVocabulary> vocabulary_;  // guarded by mu_ until set
  absl::Status vocabulary_status_;
  // Most recent first; the map points into the list.
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledConstraint>>;
  std::list<Entry> lru_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  Stats stats_;
};

// One request's decoding under a constraint: a matcher state per row (one row, n samples or
// beams). Engine thread only (or the thread it hands mask work to, one at a time).
class SequenceConstraint {
 public:
  explicit SequenceConstraint(std::shared_ptr<const CompiledConstraint> compiled, int rows = 1);

  int rows() const { return static_cast<int>(states_.size()); }
  // Row i becomes old row parents[i] (beams' reorder and their fan-out from the prompt's
  // row). Samples keep one row each by sample index for the whole request.
  void Reorder(absl::Span<const int64_t> parents);

  // The tokens that may come next on `row` (EOS only where the constraint accepts).
  const TokenBitmask& Mask(int row);
  // Sets the logits of every token `row` may not take next to -inf: `logits` spans the
  // model's vocabulary. Returns false when no token is allowed (the row cannot go on).
  bool ApplyMask(int row, absl::Span<float> logits);
  // Moves `row` past `token`. False when the token was not allowed (the row is then dead and
  // allows nothing); an end token leaves the state as it was.
  bool Accept(int row, int32_t token);

  // The row's text is a whole string of the constraint.
  bool Accepting(int row) const { return states_[row].accepting; }
  // Nothing can follow but the end (a finished value): the sequence should end now.
  bool Finished(int row) const { return states_[row].finished(); }
  bool Dead(int row) const { return states_[row].dead(); }

  // Jump-forward: the tokens that must come next on `row` whatever is sampled, at most
  // `max_tokens`: while the constraint allows only one byte (and is not accepting), those bytes
  // are forced; they become the tokens whose bytes spell them exactly (the longest token at
  // each point that the mask allows and that ends inside the forced bytes). Not accepted:
  // call Accept for each one taken.
  std::vector<int32_t> ForcedTokens(int row, int max_tokens);

 private:
  std::shared_ptr<const CompiledConstraint> compiled_;
  Matcher matcher_;
  MaskCache cache_;
  std::vector<MatchState> states_;
  TokenBitmask none_;  // the mask of a dead row
};

}  // namespace kvserve::constraint
