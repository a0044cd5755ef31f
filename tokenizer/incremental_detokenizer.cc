// Streaming detokenization: token ids in, UTF-8-complete text deltas out.
#include "tokenizer/incremental_detokenizer.h"

#include <string_view>

#include "absl/types/span.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::tokenizer {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Whether text[i] can never be part of a match of Transformers' clean_up_tokenization, whatever
// text comes before or after: " .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've" and
// " 're", replaced in that order, each rule over the whole text. A rule's replacement only deletes
// spaces, so a match of a later rule may join characters that a deleted space separated ("n ' t"
// becomes "n't", then matches " n't"); a character that is not a space keeps its place among the
// others. A byte that is not ASCII, and an ASCII character outside the patterns, never matches; a
// pattern letter matches only after the characters its patterns put before it, so one that
// follows another non-space character cannot. Text whose context is unknown (`i` at the start)
// counts as matchable.
bool IsCleanupBarrier(std::string_view text, size_t i) {
  // The nearest character before `j` that is not a space; npos when none is known.
  auto previous = [&text](size_t j) {
    while (j > 0 && text[j - 1] == ' ') --j;
    return j == 0 ? std::string_view::npos : j - 1;
  };
  switch (text[i]) {
    case ' ':
    case '.':
    case '?':
    case '!':
    case ',':
    case '\'':
      return false;
    case 'n':  // " n't": right after the pattern's space
      return i > 0 && text[i - 1] != ' ';
    case 't':  // " n't"
    case 'm':
    case 's':
    case 'v':
    case 'r': {  // " 'm", " 's", " 've", " 're"
      const size_t before = previous(i);
      return before != std::string_view::npos && text[before] != '\'';
    }
    case 'e': {  // " 've", " 're"
      const size_t before = previous(i);
      if (before == std::string_view::npos) return false;
      if (text[before] != 'v' && text[before] != 'r') return true;
      const size_t quote = previous(before);
      return quote != std::string_view::npos && text[quote] != '\'';
    }
    default:
      return true;
  }
}

bool IsUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The longest prefix of `pending` that clean-up may rewrite on its own: no match of any rule
// (at any stage) can cross the cut, so that the clean-up of the whole text is the clean-up of
// the prefix followed by that of the rest, whatever comes next. A match is a run of characters,
// so a cut beside a character that no match contains is safe. `emitted` ends with what was
// emitted before (context for the first characters). Cuts fall between UTF-8 characters.
size_t SafeCleanupCut(std::string_view emitted, std::string_view pending) {
  const std::string text = std::string(emitted) + std::string(pending);
  const size_t base = emitted.size();
  for (size_t p = text.size(); p > base; --p) {
    if (p < text.size() && IsUtf8Continuation(text[p])) continue;
    if (IsCleanupBarrier(text, p - 1) || (p < text.size() && IsCleanupBarrier(text, p))) {
      return p - base;
    }
  }
  return 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Add(int32_t id) {
  ids_.push_back(id);
  // Left out of the decode window: otherwise a long run of them (skipped special tokens with
  // ignore_eos, ids past the tokenizer's vocabulary) would be decoded again at every token.
  if (tokenizer_->DecodesToNothing(id, skip_special_tokens_)) return std::string();
  decoded_ids_.push_back(id);
  const absl::Span<const int32_t> all(decoded_ids_);
  // Both texts start at the same token, so start-of-text effects (a stripped leading space)
  // cancel out and the difference is exactly the new tokens' text.
  const std::string prefix_text = tokenizer_->DecodeWithoutCleanup(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text =
      tokenizer_->DecodeWithoutCleanup(all.subspan(prefix_offset_), skip_special_tokens_);
  if (new_text.size() <= prefix_text.size() || !new_text.starts_with(prefix_text) ||
      std::string_view(new_text).ends_with(kReplacementChar)) {
    return std::string();  // nothing new, or a character still incomplete
  }
  prefix_offset_ = read_offset_;
  read_offset_ = decoded_ids_.size();
  return Emit(new_text.substr(prefix_text.size()), false);
}

std::string IncrementalDetokenizer::Finish() {
  const absl::Span<const int32_t> all(decoded_ids_);
  const std::string prefix_text = tokenizer_->DecodeWithoutCleanup(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text =
      tokenizer_->DecodeWithoutCleanup(all.subspan(prefix_offset_), skip_special_tokens_);
  std::string raw;
  if (new_text.size() > prefix_text.size() && new_text.starts_with(prefix_text)) {
    raw = new_text.substr(prefix_text.size());
  }
  prefix_offset_ = read_offset_ = decoded_ids_.size();
  return Emit(std::move(raw), true);
}

std::string IncrementalDetokenizer::Emit(std::string raw, bool final) {
  if (!tokenizer_->clean_up_tokenization_spaces()) return raw;
  pending_.append(raw);
  const size_t cut = final ? pending_.size() : SafeCleanupCut(emitted_tail_, pending_);
  const std::string_view done = std::string_view(pending_).substr(0, cut);
  std::string out = Tokenizer::CleanUpTokenization(done);
  // Enough context for IsCleanupBarrier: a pattern is at most 4 characters, spaces aside.
  constexpr size_t kTailBytes = 16;
  emitted_tail_.append(done);
  if (emitted_tail_.size() > kTailBytes) emitted_tail_.erase(0, emitted_tail_.size() - kTailBytes);
  pending_.erase(0, cut);
  return out;
}

}  // namespace kvserve::tokenizer
