// A Hugging Face tokenizer.json tokenizer (BPE, byte-level or SentencePiece-style with byte
// fallback) plus tokenizer_config.json's special tokens and chat template.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/chat_template.h"

namespace kvserve::base {
class ModelSource;
}  // namespace kvserve::base

namespace kvserve::tokenizer {

class AddedTokenMatcher;
class BpeModel;
class Normalizer;
class PreTokenizer;
class TokenDecoder;

// Immutable after construction; every method is thread-safe.
class Tokenizer {
 public:
  // Builds a tokenizer from the contents of tokenizer.json and tokenizer_config.json
  // (`tokenizer_config_json` may be empty). InvalidArgument naming the file and the JSON path
  // for malformed JSON, a missing field, a field of the wrong type, a token id outside
  // [0, 2^31) or an unsupported component ("tokenizer.json: model.type: unsupported model
  // type 'Unigram'", "tokenizer.json: added_tokens[3].id: must be in [0, 2147483647] (got
  // 4000000000)"). Never throws. A chat template that does not parse is not an error here:
  // it is reported by ApplyChatTemplate.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view tokenizer_config_json);
  // Reads the model's tokenizer.json and, when present, tokenizer_config.json; errors name
  // the files by path. NotFound when tokenizer.json is missing; InvalidArgument naming the
  // path when either is not a regular file (a link to /dev/zero, a FIFO, a directory) or is
  // too large (ModelSource::ReadText), and as FromJson.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromModelSource(
      const base::ModelSource& source);
  // FromModelSource of the folder `dir`; NotFound when `dir` is not a folder.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (UTF-8); with `add_special_tokens` the post-processor's special tokens
  // (e.g. BOS) are added. Added-token strings inside `text` become their ids. InvalidArgument
  // when `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;
  // Text of `ids`; ids without a token decode to nothing. With `skip_special_tokens` special
  // added tokens are dropped. Applies clean_up_tokenization_spaces when the config asks.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> bos_token_id() const { return bos_token_id_; }
  // The config's eos_token plus the end-of-turn tokens the chat template emits.
  std::vector<int32_t> eos_token_ids() const { return eos_token_ids_; }
  // One past the largest token id the tokenizer knows or produces: vocab, added tokens and
  // the post-processor's special tokens.
  int64_t vocab_size() const { return vocab_size_; }
  // OK when every id the tokenizer can produce is below the model's `model_vocab_size`
  // (config.json's vocab_size; a larger, padded model vocab is fine). Otherwise
  // InvalidArgument naming tokenizer.json and both sizes, to be refused at start-up: such ids
  // would index past the embedding table.
  absl::Status CheckFitsModel(int64_t model_vocab_size) const;
  // OK when tokenizer_config.json has no chat template or its template parsed; otherwise the
  // parse error ("tokenizer_config.json: chat template: ..."), for servers that refuse to
  // start with a template every chat request would fail on.
  absl::Status CheckChatTemplate() const {
    return chat_template_ != nullptr || absl::IsFailedPrecondition(chat_template_status_)
               ? absl::OkStatus()
               : chat_template_status_;
  }

  // Renders tokenizer_config.json's chat_template within `budget` (see ChatTemplate::Render for
  // its errors). FailedPrecondition when there is none; InvalidArgument "tokenizer_config.json:
  // chat template: ..." naming the construct when it did not parse.
  absl::StatusOr<std::string> ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt,
                                                const RenderBudget& budget = RenderBudget()) const;
  // Like ApplyChatTemplate, with extra template variables from `template_kwargs_json`: a JSON
  // object text whose members become global variables of the template, in their order (as
  // apply_chat_template(**kwargs)); empty text: none. Objects inside keep the order of the text
  // (`tojson`, `items()`). InvalidArgument starting "template_kwargs: " when it is not valid JSON
  // ("template_kwargs: not valid JSON: ..."), not an object ("template_kwargs: must be a JSON
  // object"), nests deeper than budget.max_depth ("template_kwargs: nested deeper than 100
  // levels"), or sets a variable the request sets itself (messages, add_generation_prompt,
  // bos_token, eos_token: "template_kwargs.messages: is set by the request, not by
  // template_kwargs"). Other errors as ApplyChatTemplate; a missing or unparsable template and
  // an invalid budget are reported before template_kwargs.
  absl::StatusOr<std::string> ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt,
                                                const RenderBudget& budget,
                                                std::string_view template_kwargs_json) const;

  // The token string of `id` (added tokens included), or nullopt.
  std::optional<std::string> IdToToken(int32_t id) const;
  std::optional<int32_t> TokenToId(std::string_view token) const;
  bool IsSpecialToken(int32_t id) const { return special_ids_.contains(id); }

  // Whether Decode leaves `id` out entirely (an id without a token, or a special token when
  // skipping them), so that it changes nothing around it either.
  bool DecodesToNothing(int32_t id, bool skip_special_tokens) const;
  // Decode without clean_up_tokenization_spaces; used by the incremental detokenizer.
  std::string DecodeWithoutCleanup(absl::Span<const int32_t> ids, bool skip_special_tokens) const;
  bool clean_up_tokenization_spaces() const { return clean_up_tokenization_spaces_; }
  // Transformers' clean_up_tokenization: removes the space before . ? ! , and contractions.
  static std::string CleanUpTokenization(std::string_view text);

  // Like ApplyChatTemplate with template kwargs, the messages given as a JSON array (extra
  // fields such as reasoning_content or tool_calls pass through to the template, in their
  // order). An ordered_json finds keys by linear scans: request text should reach the template
  // through `template_kwargs_json`, which is read in linear time.
  absl::StatusOr<std::string> ApplyChatTemplateJson(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const RenderBudget& budget = RenderBudget(),
      std::string_view template_kwargs_json = {}) const;

 private:
  Tokenizer();
  // FromJson with the names errors give the two files.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromNamedJson(
      std::string_view tokenizer_json, std::string_view tokenizer_json_name,
      std::string_view tokenizer_config_json, std::string_view tokenizer_config_json_name);
  // Errors of these name the JSON path, not the file.
  absl::Status LoadTokenizerJson(std::string_view json);
  absl::Status LoadConfigJson(std::string_view json);
  // Reads the post_processor at `path` (recursing into a Sequence's processors).
  absl::Status LoadPostProcessor(const nlohmann::json& config, std::string_view path);
  // Appends the ids of plain text (no added tokens of the first pass inside).
  void EncodeSection(std::string_view text, bool at_input_start, std::vector<int32_t>* ids) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;               // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer_;          // may be null
  std::unique_ptr<TokenDecoder> decoder_;                // may be null
  std::unique_ptr<AddedTokenMatcher> raw_added_;         // non-normalized added tokens
  std::unique_ptr<AddedTokenMatcher> normalized_added_;  // normalized added tokens
  absl::flat_hash_map<int32_t, std::string> added_id_to_content_;
  absl::flat_hash_map<std::string, int32_t> added_content_to_id_;
  absl::flat_hash_set<std::string> added_contents_;
  absl::flat_hash_set<int32_t> special_ids_;
  // Post-processing for a single sequence: ids before and after the encoded text.
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::optional<int32_t> bos_token_id_;
  std::vector<int32_t> eos_token_ids_;
  int64_t vocab_size_ = 0;
  bool clean_up_tokenization_spaces_ = false;
  std::string bos_token_, eos_token_;
  std::unique_ptr<ChatTemplate> chat_template_;  // null when absent or unparsable
  absl::Status chat_template_status_;            // why chat_template_ is null
};

}  // namespace kvserve::tokenizer
