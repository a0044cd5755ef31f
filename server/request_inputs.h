// Typed inputs of the request builder: what a client asks for, as any protocol adapter (gRPC,
// HTTP) reads it off its wire, before defaults, validation and tokenization. No wire types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "constraint/constraint.h"
#include "tokenizer/chat_template.h"

namespace kvserve::server {

// The text a request is about: exactly one of a prompt text, token ids or chat messages.
struct PromptInput {
  enum class Kind { kNone, kText, kTokenIds, kMessages };
  Kind kind = Kind::kNone;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<tokenizer::ChatMessage> messages;
  // Extra chat-template variables, a JSON object's text (messages only; empty: none).
  std::string template_kwargs;

  static PromptInput Text(std::string text) {
    PromptInput in;
    in.kind = Kind::kText;
    in.text = std::move(text);
    return in;
  }
  static PromptInput TokenIds(std::vector<int32_t> ids) {
    PromptInput in;
    in.kind = Kind::kTokenIds;
    in.token_ids = std::move(ids);
    return in;
  }
  static PromptInput Messages(std::vector<tokenizer::ChatMessage> messages) {
    PromptInput in;
    in.kind = Kind::kMessages;
    in.messages = std::move(messages);
    return in;
  }
};

// Beam search's stopping rule as sent; kInvalid carries a value no rule has.
enum class EarlyStoppingInput { kUnspecified, kTrue, kFalse, kNever, kInvalid };

// Sampling and decoding; unset fields take generation_config.json's value, else the default.
struct SamplingInput {
  std::optional<int64_t> max_new_tokens;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<int64_t> num_beams;
  std::optional<int64_t> num_return_sequences;
  std::optional<int64_t> num_beam_groups;
  EarlyStoppingInput early_stopping = EarlyStoppingInput::kUnspecified;
  int early_stopping_value = 0;  // the value sent, for kInvalid's message
  std::optional<double> length_penalty;
  bool logprobs = false;
  int64_t top_logprobs = 0;
  // What the output must match (errors name "constraint.<kind>"); unset: nothing.
  std::optional<constraint::ConstraintSpec> constraint;
};

struct QuantizationInput {
  std::string backend;  // empty: the default
  std::optional<int64_t> nbits;
  std::optional<int64_t> axis_key;
  std::optional<int64_t> axis_value;
  std::optional<int64_t> q_group_size;
  std::optional<int64_t> residual_length;
};

// A request's own cache, as Transformers' generate() takes it.
struct CacheInput {
  std::optional<bool> use_cache;
  std::string cache_implementation;  // empty: dynamic
  std::optional<QuantizationInput> quantization;
  std::optional<int64_t> max_cache_len;
  std::optional<bool> offload_only_non_sliding;
  bool skip_prefix_reuse = false;
  std::string prefix_kv_mode;  // "copy" or "shared"; empty: the server's --prefix-kv-mode
};

// A generation, or a turn of a session.
struct GenerationInput {
  PromptInput input;
  std::string prefix;   // a registered prefix's name (empty: none)
  std::string session;  // an open session's id (empty: none)
  SamplingInput sampling;
  std::optional<CacheInput> cache;  // unset: the defaults (a session turn must leave it unset)
  // Encoder-decoder models only: the decoder's first tokens (the prompt is the encoder input);
  // unset: the model's decoder start tokens.
  std::optional<std::vector<int32_t>> decoder_prompt_ids;
};

// A named prefix to register.
struct RegistrationInput {
  std::string name;
  PromptInput content;
  bool shared = false;  // in the shared namespace (admins only) instead of the caller's
  std::optional<bool> pinned;
  std::string retention;    // "pinned", "high", "normal", "low"; empty: from `pinned`
  int64_t ttl_seconds = 0;  // 0: none
  std::string cache_implementation;
};

// A session to open.
struct SessionInput {
  CacheInput cache;
  std::string prefix;
  int64_t ttl_seconds = 0;  // 0: the server's default
};

// Text or messages to tokenize.
struct TokenizeInput {
  PromptInput input;
  std::optional<bool> add_special_tokens;  // text only; unset: true
};

// Token ids and the vocabulary's string for each.
struct TokenizeResult {
  std::vector<int32_t> token_ids;
  std::vector<std::string> tokens;
};

}  // namespace kvserve::server
