// Streaming detokenization: token ids in, UTF-8-complete text deltas out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvserve::tokenizer {

class Tokenizer;

// Turns generated token ids into text deltas for streaming. Every delta is complete UTF-8 (a
// character split over byte-level or byte-fallback tokens is held back until its last byte
// arrives) and the concatenation of all deltas plus Finish() equals
// tokenizer.Decode(all ids, skip_special_tokens). Text that clean_up_tokenization_spaces could
// still change (" ." and contractions) is held back too. Not thread-safe; one per sequence.
class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens);

  // Appends one token id; returns the text that became final (possibly empty).
  std::string Add(int32_t id);
  // Returns all text still held back (call once, at the end of the stream).
  std::string Finish();
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  // Feeds raw (not yet cleaned-up) text through the clean-up hold-back: what clean-up could
  // still rewrite together with text to come stays in pending_.
  std::string Emit(std::string raw, bool final);

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;          // every id added
  std::vector<int32_t> decoded_ids_;  // those Decode does not leave out; the offsets index it
  size_t prefix_offset_ = 0;          // first token of the decode window
  size_t read_offset_ = 0;            // tokens before this have been emitted
  std::string pending_;               // raw text held back from clean-up
  std::string emitted_tail_;          // the last bytes of raw text already cleaned up and emitted
};

}  // namespace kvserve::tokenizer
