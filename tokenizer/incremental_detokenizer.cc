// Streaming detokenization: token ids in, UTF-8-complete text deltas out.
#include "tokenizer/incremental_detokenizer.h"

#include <string_view>

#include "absl/types/span.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::model {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Patterns Transformers' clean_up_tokenization rewrites; all start with a space.
constexpr std::string_view kCleanupPatterns[] = {" .",   " ?",  " !",  " ,",   " ' ",
                                                 " n't", " 'm", " 's", " 've", " 're"};

bool IsProperPrefixOfPattern(std::string_view tail) {
  for (std::string_view p : kCleanupPatterns) {
    if (tail.size() < p.size() && p.starts_with(tail)) return true;
  }
  return false;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Add(int32_t id) {
  ids_.push_back(id);
  const absl::Span<const int32_t> all(ids_);
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
  read_offset_ = ids_.size();
  return Emit(new_text.substr(prefix_text.size()), false);
}

std::string IncrementalDetokenizer::Finish() {
  const absl::Span<const int32_t> all(ids_);
  const std::string prefix_text = tokenizer_->DecodeWithoutCleanup(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text =
      tokenizer_->DecodeWithoutCleanup(all.subspan(prefix_offset_), skip_special_tokens_);
  std::string raw;
  if (new_text.size() > prefix_text.size() && new_text.starts_with(prefix_text)) {
    raw = new_text.substr(prefix_text.size());
  }
  prefix_offset_ = read_offset_ = ids_.size();
  return Emit(std::move(raw), true);
}

std::string IncrementalDetokenizer::Emit(std::string raw, bool final) {
  if (!tokenizer_->clean_up_tokenization_spaces()) return raw;
  pending_.append(raw);
  size_t cut = pending_.size();
  if (!final) {
    // Hold back from the earliest space whose tail may still grow into a clean-up pattern.
    const size_t lookback = pending_.size() < 4 ? 0 : pending_.size() - 4;
    for (size_t s = lookback; s < pending_.size(); ++s) {
      if (pending_[s] == ' ' && IsProperPrefixOfPattern(std::string_view(pending_).substr(s))) {
        cut = s;
        break;
      }
    }
  }
  std::string out = Tokenizer::CleanUpTokenization(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return out;
}

}  // namespace kvserve::model
