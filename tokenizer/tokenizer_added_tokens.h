// Added (special and user) tokens of tokenizer.json and how they are found in text before the
// model sees it: leftmost-longest matching with lstrip, rstrip and single_word.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// One piece of text after splitting on added tokens: either an added token or plain text.
struct TextSection {
  std::string_view text;  // the plain text (empty for an added token)
  int32_t added_id = -1;  // the added token's id, or -1 for plain text
  size_t offset = 0;      // byte offset of the section in the split text
};

// A set of added tokens matched in one pass. Immutable after construction; thread-safe.
class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into plain sections and added tokens. Whitespace that an lstrip/rstrip token
  // absorbs is dropped. Empty plain sections are omitted.
  std::vector<TextSection> Split(std::string_view text) const;

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<int>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace kvserve::tokenizer
