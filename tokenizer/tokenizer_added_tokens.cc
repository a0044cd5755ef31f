// Added (special and user) tokens of tokenizer.json and how they are found in text.
#include "tokenizer/tokenizer_added_tokens.h"

#include <algorithm>
#include <utility>

#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

bool IsWordChar(char32_t cp) {
  if (cp == '_') return true;
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return !IsUnicodeWhitespace(cp);
}

// The code point that ends just before `pos`.
char32_t CodePointBefore(std::string_view text, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return DecodeUtf8(text, &start);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  tokens_.erase(std::remove_if(tokens_.begin(), tokens_.end(),
                               [](const AddedToken& t) { return t.content.empty(); }),
                tokens_.end());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(
        static_cast<int>(i));
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [this](int a, int b) {
      return tokens_[static_cast<size_t>(a)].content.size() >
             tokens_[static_cast<size_t>(b)].content.size();
    });
  }
}

std::vector<TextSection> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<TextSection> sections;
  size_t plain_begin = 0;
  auto add_plain = [&](size_t begin, size_t end) {
    if (end > begin) sections.push_back({text.substr(begin, end - begin), -1, begin});
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[pos])];
    const AddedToken* found = nullptr;
    for (int index : bucket) {
      const AddedToken& token = tokens_[static_cast<size_t>(index)];
      if (text.compare(pos, token.content.size(), token.content) != 0) continue;
      if (token.single_word) {
        const size_t end = pos + token.content.size();
        if (pos > 0 && IsWordChar(CodePointBefore(text, pos))) continue;
        size_t after = end;
        if (end < text.size() && IsWordChar(DecodeUtf8(text, &after))) continue;
      }
      found = &token;
      break;
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t match_begin = pos;
    size_t match_end = pos + found->content.size();
    if (found->lstrip) {
      while (match_begin > plain_begin && IsUnicodeWhitespace(CodePointBefore(text, match_begin))) {
        size_t start = match_begin - 1;
        while (start > plain_begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
          --start;
        }
        match_begin = start;
      }
    }
    if (found->rstrip) {
      while (match_end < text.size()) {
        size_t next = match_end;
        if (!IsUnicodeWhitespace(DecodeUtf8(text, &next))) break;
        match_end = next;
      }
    }
    add_plain(plain_begin, match_begin);
    sections.push_back({std::string_view(), found->id, match_begin});
    plain_begin = match_end;
    pos = match_end;
  }
  add_plain(plain_begin, text.size());
  return sections;
}

}  // namespace kvserve::tokenizer
