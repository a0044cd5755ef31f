// RequestBuilder: typed inputs to engine requests, one named error per bad field.
#include "server/request_builder.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/string_cat.h"
#include "cache/cache_factory.h"
#include "cache/retention.h"
#include "cache/snapshot.h"
#include "model/model.h"
#include "server/encoder_decoder_request.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using base::Cat;

// The payload key of an error's field path.
constexpr std::string_view kFieldPathPayload = "type.kvserve.dev/field-path";

// A prefix name as the store accepts it: 1 to 128 characters of [A-Za-z0-9._-].
bool IsValidPrefixName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// A caller's string quoted in an error, at most `max_bytes` of it.
std::string Quoted(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  return Cat(text.substr(0, max_bytes), "... (", text.size(), " bytes)");
}

absl::Status NotFoundAt(std::string_view path, std::string_view message) {
  return WithFieldPath(absl::NotFoundError(Cat(path, ": ", message)), path);
}

// CacheSpec's messages start with the parameter they refuse ("cache_config.nbits 5 is ...",
// "max_cache_len 0 is ..."); the error starts with that parameter's path on the wire.
absl::Status CacheFieldError(std::string_view message) {
  const size_t space = message.find(' ');
  const std::string_view parameter = message.substr(0, space);
  const std::string_view rest = space == std::string_view::npos ? "" : message.substr(space + 1);
  constexpr std::string_view kConfig = "cache_config";
  if (parameter == kConfig) return FieldError("cache.quantization", std::string(message));
  if (parameter.substr(0, kConfig.size() + 1) == "cache_config.") {
    return FieldError(Cat("cache.quantization.", parameter.substr(kConfig.size() + 1)),
                      std::string(rest));
  }
  if (parameter == "cache_implementation" || parameter == "max_cache_len") {
    return FieldError(Cat("cache.", parameter), std::string(rest));
  }
  return FieldError("cache", std::string(message));
}

// `status` (of a field under "cache") as a field of `parent` ("options.cache...").
absl::Status Under(std::string_view parent, const absl::Status& status) {
  const std::string path = FieldPathOf(status);
  return WithFieldPath(absl::Status(status.code(), Cat(parent, ".", status.message())),
                       path.empty() ? std::string(parent) : Cat(parent, ".", path));
}

// The longest token string of the vocabulary, in bytes: no token stands for more input.
int64_t LongestTokenBytes(const tokenizer::Tokenizer& tokenizer) {
  int64_t longest = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (std::optional<std::string> token = tokenizer.IdToToken(id)) {
      longest = std::max<int64_t>(longest, static_cast<int64_t>(token->size()));
    }
  }
  return longest;
}

// See RequestBuilder::max_input_bytes().
int64_t MaxInputBytes(const model::ModelInfo& info, const tokenizer::Tokenizer* tokenizer) {
  // Normalizers may shrink text (NFKC turns a 3-byte fullwidth letter into one byte) or drop
  // characters; four times the bound leaves room for that. gRPC refuses messages over 64 MiB
  // anyway.
  constexpr int64_t kShrinkAllowance = 4;
  constexpr int64_t kMinTokenBytes = 16;
  constexpr int64_t kCeiling = int64_t{64} << 20;
  const int64_t token_bytes =
      std::max(kMinTokenBytes, tokenizer != nullptr ? LongestTokenBytes(*tokenizer) : 0);
  const int64_t context = std::max<int64_t>(1, info.max_position_embeddings);
  if (context > kCeiling / (token_bytes * kShrinkAllowance)) return kCeiling;
  return context * token_bytes * kShrinkAllowance;
}

absl::Status CheckIdsInVocab(const std::vector<int32_t>& ids, int64_t vocab_size,
                             const std::string& field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return FieldError(Cat(field, "[", i, "]"),
                        Cat(ids[i], " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// The field a prompt input is read from, as errors name it.
std::string InputField(const PromptInput& input, std::string_view text_field) {
  switch (input.kind) {
    case PromptInput::Kind::kText:
      return std::string(text_field);
    case PromptInput::Kind::kTokenIds:
      return "token_ids.ids";
    case PromptInput::Kind::kMessages:
      return "messages";
    case PromptInput::Kind::kNone:
      break;
  }
  return "input";
}

// Bytes an answer may take per token: its id and text, and each log-probability given.
constexpr int64_t kResponseBytesPerToken = 24;
constexpr int64_t kResponseBytesPerLogprob = 16;

}  // namespace

std::string FieldPathOf(const absl::Status& status) {
  const auto path = status.GetPayload(std::string(kFieldPathPayload));
  return path ? std::string(*path) : std::string();
}

absl::Status WithFieldPath(absl::Status status, std::string_view path) {
  if (!status.ok())
    status.SetPayload(std::string(kFieldPathPayload), absl::Cord(std::string(path)));
  return status;
}

absl::Status FieldError(std::string_view path, std::string_view reason) {
  return WithFieldPath(absl::InvalidArgumentError(Cat(path, ": ", reason)), path);
}

RequestBuilder::RequestBuilder(const model::ModelInfo& model_info,
                               const tokenizer::Tokenizer* tokenizer, RequestLimits limits,
                               CatalogSource catalog, SessionSource sessions)
    : model_info_(model_info),
      tokenizer_(tokenizer),
      limits_(limits),
      constraints_(tokenizer == nullptr
                       ? nullptr
                       : std::make_unique<constraint::ConstraintCompiler>(
                             tokenizer, model_info.eos_token_ids, model_info.vocab_size,
                             constraint::ConstraintCompilerOptions{
                                 .limits = limits.constraint,
                                 .cache_entries = limits.constraint_cache_entries})),
      catalog_(std::move(catalog)),
      sessions_(std::move(sessions)),
      max_input_bytes_(MaxInputBytes(model_info, tokenizer)) {}

absl::StatusOr<std::vector<int32_t>> RequestBuilder::TextIds(const std::string& text,
                                                             const std::string& field,
                                                             bool add_special_tokens) const {
  if (tokenizer_ == nullptr) {
    return FieldError(field, "the model has no tokenizer.json; send token_ids instead");
  }
  if (static_cast<int64_t>(text.size()) > max_input_bytes_) {
    return FieldError(field, Cat(text.size(), " bytes is more than the ", max_input_bytes_,
                                 " bytes that any input fitting the model's context of ",
                                 model_info_.max_position_embeddings, " tokens can have"));
  }
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text, add_special_tokens);
  if (!ids.ok()) return FieldError(field, std::string(ids.status().message()));
  return ids;
}

absl::StatusOr<std::vector<int32_t>> RequestBuilder::ChatIds(const PromptInput& input,
                                                             const std::string& field,
                                                             bool add_generation_prompt,
                                                             const BuildContext& context) const {
  const std::vector<tokenizer::ChatMessage>& messages = input.messages;
  if (messages.empty()) {
    return FieldError(Cat(field, ".messages"), "at least one message is required");
  }
  if (static_cast<int64_t>(messages.size()) > limits_.max_messages) {
    return FieldError(Cat(field, ".messages"), Cat(messages.size(), " messages; at most ",
                                                   limits_.max_messages, " are allowed"));
  }
  // The kwargs count with the contents: they are rendered too.
  int64_t content_bytes = static_cast<int64_t>(input.template_kwargs.size());
  if (content_bytes > max_input_bytes_) {
    return FieldError("template_kwargs", Cat("more than the ", max_input_bytes_,
                                             " bytes that any input fitting the model's context "
                                             "can have"));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const tokenizer::ChatMessage& m = messages[i];
    if (m.role.empty()) {
      return FieldError(Cat(field, ".messages[", i, "].role"), "must not be empty");
    }
    content_bytes += static_cast<int64_t>(m.role.size() + m.content.size());
    if (content_bytes > max_input_bytes_) {
      return FieldError(Cat(field, ".messages"),
                        Cat("more than the ", max_input_bytes_,
                            " bytes that any input fitting the model's context of ",
                            model_info_.max_position_embeddings, " tokens can have"));
    }
  }
  if (tokenizer_ == nullptr) {
    return FieldError(field, "the model has no tokenizer.json; send token_ids instead");
  }
  // The render checks these every so many steps; a call already over needs no render at all.
  if (context.cancelled && context.cancelled()) {
    return absl::CancelledError("the client cancelled the request");
  }
  if (absl::Now() >= context.deadline) {
    return absl::DeadlineExceededError("the request's deadline passed while it was parsed");
  }
  tokenizer::RenderBudget budget;
  budget.deadline = context.deadline;
  budget.cancelled = context.cancelled;
  absl::StatusOr<std::string> text =
      tokenizer_->ApplyChatTemplate(messages, add_generation_prompt, budget, input.template_kwargs);
  if (!text.ok()) {
    // Malformed kwargs name their own field.
    if (absl::IsInvalidArgument(text.status()) &&
        absl::StartsWith(text.status().message(), "template_kwargs")) {
      return WithFieldPath(text.status(), "template_kwargs");
    }
    // The client's own deadline or cancellation, and memory running out, keep their code.
    if (absl::IsDeadlineExceeded(text.status()) || absl::IsCancelled(text.status()) ||
        absl::IsResourceExhausted(text.status())) {
      return text.status();
    }
    return FieldError(field,
                      Cat("the chat template cannot render them: ", text.status().message()));
  }
  // The rendered template carries its own special tokens, as apply_chat_template(tokenize=True).
  return TextIds(*text, field, /*add_special_tokens=*/false);
}

absl::StatusOr<std::vector<int32_t>> RequestBuilder::InputIds(const PromptInput& input,
                                                              bool add_special_tokens,
                                                              const BuildContext& context) const {
  if (!input.template_kwargs.empty() && input.kind != PromptInput::Kind::kMessages) {
    return FieldError("template_kwargs", "applies only to messages input");
  }
  switch (input.kind) {
    case PromptInput::Kind::kText:
      return TextIds(input.text, "prompt", add_special_tokens);
    case PromptInput::Kind::kTokenIds: {
      if (static_cast<int64_t>(input.token_ids.size()) > model_info_.max_position_embeddings) {
        return FieldError("token_ids.ids",
                          Cat(input.token_ids.size(), " ids; the model's context holds ",
                              model_info_.max_position_embeddings));
      }
      absl::Status in_vocab =
          CheckIdsInVocab(input.token_ids, model_info_.vocab_size, "token_ids.ids");
      if (!in_vocab.ok()) return in_vocab;
      return input.token_ids;
    }
    case PromptInput::Kind::kMessages:
      return ChatIds(input, "messages", /*add_generation_prompt=*/true, context);
    case PromptInput::Kind::kNone:
      break;
  }
  return FieldError("input", "one of prompt, token_ids or messages is required");
}

absl::Status RequestBuilder::BuildConstraint(const constraint::ConstraintSpec& spec,
                                             GenerationRequest* out) const {
  const std::string kind = constraint::ConstraintKindName(spec.kind);
  const std::string field = kind.empty() ? std::string("constraint") : Cat("constraint.", kind);
  if (constraints_ == nullptr) {
    return FieldError(field, "constraints need the model's tokenizer.json, which it lacks");
  }
  absl::StatusOr<std::shared_ptr<const constraint::CompiledConstraint>> compiled =
      constraints_->Compile(spec);
  if (!compiled.ok()) return FieldError(field, std::string(compiled.status().message()));
  out->constraint = *std::move(compiled);
  return absl::OkStatus();
}

absl::Status RequestBuilder::BuildSampling(const SamplingInput& s, GenerationRequest* out) const {
  if (s.constraint) {
    if (absl::Status c = BuildConstraint(*s.constraint, out); !c.ok()) return c;
  }
  if (s.max_new_tokens) {
    if (*s.max_new_tokens < 1) {
      return FieldError("sampling.max_new_tokens",
                        Cat("must be >= 1 (got ", *s.max_new_tokens, ")"));
    }
    if (*s.max_new_tokens > limits_.max_new_tokens_limit) {
      return FieldError("sampling.max_new_tokens",
                        Cat(*s.max_new_tokens, " is above the server's --max-new-tokens-limit of ",
                            limits_.max_new_tokens_limit));
    }
    out->max_new_tokens = *s.max_new_tokens;
  } else {
    // generation_config.json's default (generate() reads it for every unset parameter), else 16.
    out->max_new_tokens = std::min<int64_t>(model_info_.generation.max_new_tokens.value_or(16),
                                            limits_.max_new_tokens_limit);
  }
  const model::GenerationConfig& defaults = model_info_.generation;
  model::SamplingParams& p = out->sampling;
  p.do_sample = s.do_sample ? *s.do_sample : defaults.do_sample.value_or(false);
  if (defaults.temperature && *defaults.temperature > 0) p.temperature = *defaults.temperature;
  // A default temperature of 0 means greedy, unless the request sets its own temperature.
  if (defaults.temperature && *defaults.temperature == 0 && !s.temperature) p.do_sample = false;
  // A top_k past the vocabulary keeps every token, as a larger one would.
  if (defaults.top_k) {
    p.top_k = static_cast<int32_t>(std::min<int64_t>(*defaults.top_k, model_info_.vocab_size));
  }
  if (defaults.top_p) p.top_p = *defaults.top_p;
  if (defaults.min_p) p.min_p = *defaults.min_p;
  if (defaults.repetition_penalty) p.repetition_penalty = *defaults.repetition_penalty;
  // A set value is checked even when greedy decoding ignores it: it is still malformed.
  if (s.temperature) {
    if (!std::isfinite(*s.temperature) || *s.temperature < 0) {
      return FieldError("sampling.temperature", Cat("must be >= 0 (got ", *s.temperature, ")"));
    }
    if (*s.temperature == 0) {
      // What OpenAI and vLLM clients send for deterministic output: greedy decoding.
      p.do_sample = false;
    } else {
      p.temperature = *s.temperature;
    }
  }
  if (s.top_k) {
    if (*s.top_k < 0) {
      return FieldError("sampling.top_k",
                        Cat("must be >= 0, 0 turning it off (got ", *s.top_k, ")"));
    }
    p.top_k = static_cast<int32_t>(std::min<int64_t>(*s.top_k, INT32_MAX));
  }
  if (s.top_p) {
    if (!(*s.top_p > 0 && *s.top_p <= 1)) {
      return FieldError("sampling.top_p", Cat("must be in (0, 1] (got ", *s.top_p, ")"));
    }
    p.top_p = *s.top_p;
  }
  if (s.min_p) {
    if (!(*s.min_p >= 0 && *s.min_p <= 1)) {
      return FieldError("sampling.min_p", Cat("must be in [0, 1] (got ", *s.min_p, ")"));
    }
    p.min_p = *s.min_p;
  }
  if (s.repetition_penalty) {
    if (!std::isfinite(*s.repetition_penalty) || *s.repetition_penalty <= 0) {
      return FieldError("sampling.repetition_penalty",
                        Cat("must be > 0 (got ", *s.repetition_penalty, ")"));
    }
    p.repetition_penalty = *s.repetition_penalty;
  }
  if (s.seed) p.seed = *s.seed;
  if (static_cast<int64_t>(s.stop.size()) > limits_.max_stop_strings) {
    return FieldError("sampling.stop", Cat(s.stop.size(), " strings given; at most ",
                                           limits_.max_stop_strings, " are allowed"));
  }
  for (size_t i = 0; i < s.stop.size(); ++i) {
    const std::string& stop = s.stop[i];
    if (stop.empty()) return FieldError(Cat("sampling.stop[", i, "]"), "must not be empty");
    if (static_cast<int64_t>(stop.size()) > limits_.max_stop_string_bytes) {
      return FieldError(Cat("sampling.stop[", i, "]"),
                        Cat("is ", stop.size(), " bytes; at most ", limits_.max_stop_string_bytes));
    }
    out->stop_strings.push_back(stop);
  }
  if (static_cast<int64_t>(s.stop_token_ids.size()) > limits_.max_stop_token_ids) {
    return FieldError("sampling.stop_token_ids",
                      Cat(s.stop_token_ids.size(), " ids given; at most ",
                          limits_.max_stop_token_ids, " are allowed"));
  }
  out->stop_token_ids = s.stop_token_ids;
  absl::Status ids_ok =
      CheckIdsInVocab(out->stop_token_ids, model_info_.vocab_size, "sampling.stop_token_ids");
  if (!ids_ok.ok()) return ids_ok;
  out->ignore_eos = s.ignore_eos;
  return BuildSequences(s, out);
}

absl::Status RequestBuilder::BuildSequences(const SamplingInput& s, GenerationRequest* out) const {
  const model::GenerationConfig& defaults = model_info_.generation;
  if (s.num_beam_groups && *s.num_beam_groups != 1) {
    return FieldError("sampling.num_beam_groups",
                      Cat("diverse (group) beam search is not offered; only 1 is accepted (got ",
                          *s.num_beam_groups, ")"));
  }
  const int max_sequences = limits_.max_sequences_per_request;
  const bool sampling = out->sampling.do_sample;
  // generation_config.json's num_beams applies where it can: not to sampling (beam sampling
  // is not offered), stop strings or more sequences than it has beams.
  int64_t num_beams = std::min(defaults.num_beams.value_or(1), max_sequences);
  if (sampling || !out->stop_strings.empty() ||
      (s.num_return_sequences && *s.num_return_sequences > num_beams)) {
    num_beams = 1;
  }
  if (s.num_beams) {
    if (*s.num_beams < 1 || *s.num_beams > max_sequences) {
      return FieldError("sampling.num_beams",
                        Cat("must be in [1, ", max_sequences, "] (got ", *s.num_beams, ")"));
    }
    num_beams = *s.num_beams;
  }
  int64_t num_sequences = 1;
  if (s.num_return_sequences) {
    if (*s.num_return_sequences < 1 || *s.num_return_sequences > max_sequences) {
      return FieldError(
          "sampling.num_return_sequences",
          Cat("must be in [1, ", max_sequences, "] (got ", *s.num_return_sequences, ")"));
    }
    num_sequences = *s.num_return_sequences;
  }
  if (num_beams > 1) {
    if (sampling) {
      return FieldError("sampling.do_sample",
                        Cat("beam sampling (do_sample with num_beams ", num_beams,
                            ") is not offered; use num_beams 1 to sample or do_sample false "
                            "for beam search"));
    }
    if (!out->stop_strings.empty()) {
      return FieldError("sampling.stop",
                        "stop strings are not offered with beam search (num_beams > 1); "
                        "stop_token_ids end a beam as an end-of-sequence token does");
    }
    if (num_sequences > num_beams) {
      return FieldError("sampling.num_return_sequences",
                        Cat(num_sequences, " is above num_beams (", num_beams,
                            "): beam search returns at most its beams"));
    }
    // Each step keeps max(2, 1 + end tokens) * num_beams candidates.
    const int64_t ends =
        static_cast<int64_t>(model_info_.eos_token_ids.size() + out->stop_token_ids.size());
    const int64_t candidates = std::max<int64_t>(2, 1 + ends) * num_beams;
    if (candidates > model_info_.vocab_size) {
      return FieldError("sampling.num_beams",
                        Cat(num_beams, " beams need ", candidates,
                            " candidates per step; the vocabulary has ", model_info_.vocab_size));
    }
  } else if (num_sequences > 1 && !sampling) {
    return FieldError("sampling.num_return_sequences",
                      Cat("greedy decoding returns one sequence (got ", num_sequences,
                          "); set do_sample for independent samples or num_beams for beams"));
  }
  out->num_beams = static_cast<int>(num_beams);
  out->num_return_sequences = static_cast<int>(num_sequences);
  switch (s.early_stopping) {
    case EarlyStoppingInput::kTrue:
      out->early_stopping = model::EarlyStopping::kTrue;
      break;
    case EarlyStoppingInput::kNever:
      out->early_stopping = model::EarlyStopping::kNever;
      break;
    case EarlyStoppingInput::kFalse:
      out->early_stopping = model::EarlyStopping::kFalse;
      break;
    case EarlyStoppingInput::kUnspecified:
      out->early_stopping = defaults.early_stopping.value_or(model::EarlyStopping::kFalse);
      break;
    case EarlyStoppingInput::kInvalid:
      return FieldError("sampling.early_stopping", Cat("unknown value ", s.early_stopping_value));
  }
  out->length_penalty = defaults.length_penalty.value_or(1.0);
  if (s.length_penalty) {
    if (!std::isfinite(*s.length_penalty)) {
      return FieldError("sampling.length_penalty", "must be a finite number");
    }
    out->length_penalty = *s.length_penalty;
  }
  if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs) {
    return FieldError("sampling.top_logprobs",
                      Cat("must be in [0, ", kMaxTopLogprobs, "] (got ", s.top_logprobs, ")"));
  }
  if (s.top_logprobs > 0 && !s.logprobs) {
    return FieldError("sampling.top_logprobs", "needs logprobs set");
  }
  out->top_logprobs = s.logprobs ? static_cast<int>(s.top_logprobs) : -1;
  return absl::OkStatus();
}

absl::Status RequestBuilder::BuildCache(const CacheInput& c, GenerationRequest* out) const {
  cache::QuantizationConfig quantization;
  if (c.quantization) {
    const QuantizationInput& q = *c.quantization;
    if (!q.backend.empty()) quantization.backend = q.backend;
    if (q.nbits) quantization.nbits = *q.nbits;
    if (q.axis_key) quantization.axis_key = *q.axis_key;
    if (q.axis_value) quantization.axis_value = *q.axis_value;
    if (q.q_group_size) quantization.q_group_size = *q.q_group_size;
    if (q.residual_length) quantization.residual_length = *q.residual_length;
  }
  const bool use_cache = c.use_cache.value_or(true);
  if (!use_cache) {
    // Without a cache nothing else in `cache` can apply: refuse it rather than ignore it.
    std::string_view ignored;
    if (!c.cache_implementation.empty()) ignored = "cache_implementation";
    if (c.quantization) ignored = "quantization";
    if (c.max_cache_len) ignored = "max_cache_len";
    if (c.offload_only_non_sliding) ignored = "offload_only_non_sliding";
    if (!ignored.empty()) {
      return FieldError(Cat("cache.", ignored),
                        "cannot be used with use_cache false (no cache is kept)");
    }
  }
  std::optional<int64_t> max_cache_len;
  if (c.max_cache_len) {
    if (*c.max_cache_len > model_info_.max_position_embeddings) {
      return FieldError("cache.max_cache_len",
                        Cat(*c.max_cache_len, " is above the model's context of ",
                            model_info_.max_position_embeddings, " tokens"));
    }
    max_cache_len = *c.max_cache_len;
  }
  absl::StatusOr<cache::CacheSpec> spec =
      cache::CacheSpec::Parse(c.cache_implementation, quantization, use_cache, max_cache_len);
  if (!spec.ok()) return CacheFieldError(std::string(spec.status().message()));
  if (c.max_cache_len && !spec->is_static()) {
    return FieldError("cache.max_cache_len",
                      Cat("applies only to the static and offloaded_static caches, not '",
                          cache::CacheImplementationName(spec->implementation), "'"));
  }
  if (absl::Status fits =
          cache::CheckSpecForModel(*spec, model_info_.layer_specs, model_info_.head_dim);
      !fits.ok()) {
    // Named with the model's family: the refusal is about this model, not the request alone.
    return CacheFieldError(Cat(fits.message(), " (model_type ", model_info_.model_type, ")"));
  }
  if (c.offload_only_non_sliding) {
    if (!spec->is_offloaded()) {
      return FieldError("cache.offload_only_non_sliding",
                        "applies only to the offloaded and offloaded_static caches");
    }
    spec->offload_only_non_sliding = *c.offload_only_non_sliding;
  }
  if (spec->is_static()) {
    spec->max_cache_len = cache::StaticCacheLength(
        static_cast<int64_t>(out->prompt_ids.size()) + out->max_new_tokens, spec->max_cache_len);
  }
  out->cache_spec = *std::move(spec);
  out->skip_prefix_reuse = c.skip_prefix_reuse;
  if (!c.prefix_kv_mode.empty()) {
    absl::StatusOr<cache::PrefixKvMode> mode = cache::ParsePrefixKvMode(c.prefix_kv_mode);
    if (!mode.ok()) {
      return FieldError("cache.prefix_kv_mode", std::string(mode.status().message()));
    }
    out->prefix_kv_mode = *mode;
  }
  return absl::OkStatus();
}

absl::Status RequestBuilder::CheckSize(GenerationRequest& out,
                                       std::string_view prompt_field) const {
  const int64_t context_tokens = model_info_.max_position_embeddings;
  const int64_t prompt = static_cast<int64_t>(out.prompt_ids.size());
  if (prompt >= context_tokens && !prompt_field.empty()) {
    // The prompt alone leaves no room for one new token: it is the prompt's fault.
    return FieldError(prompt_field, Cat("the prompt's ", prompt,
                                        " tokens leave no room in the model's context of ",
                                        context_tokens, " tokens for a token to generate"));
  }
  if (prompt + out.max_new_tokens > context_tokens) {
    return FieldError("sampling.max_new_tokens",
                      Cat("the prompt's ", prompt, " tokens + max_new_tokens ", out.max_new_tokens,
                          " exceed the model's context of ", context_tokens, " tokens"));
  }
  const int64_t rows = std::max(out.num_beams, out.num_return_sequences);
  if (limits_.max_request_token_rows > 0 &&
      rows * (prompt + out.max_new_tokens) > limits_.max_request_token_rows) {
    return FieldError(rows > 1 ? "sampling.num_beams" : "sampling.max_new_tokens",
                      Cat(rows, " rows (beams or samples) of ", prompt + out.max_new_tokens,
                          " tokens each are above the server's --max-request-token-rows of ",
                          limits_.max_request_token_rows, " tokens over all rows"));
  }
  const int64_t logprobs = out.top_logprobs < 0 ? 0 : 1 + out.top_logprobs;
  const int64_t answer_bytes = out.num_return_sequences * out.max_new_tokens *
                               (kResponseBytesPerToken + logprobs * kResponseBytesPerLogprob);
  if (limits_.max_response_bytes > 0 && answer_bytes > limits_.max_response_bytes) {
    return FieldError(
        logprobs > 0 ? "sampling.top_logprobs" : "sampling.max_new_tokens",
        Cat("the answer may take ", answer_bytes, " bytes (", out.num_return_sequences,
            " sequences x ", out.max_new_tokens, " tokens",
            logprobs > 0 ? Cat(" x ", logprobs, " log-probabilities") : "",
            "), above the server's --max-response-bytes of ", limits_.max_response_bytes));
  }
  return absl::OkStatus();
}

std::shared_ptr<const cache::Snapshot> RequestBuilder::FindPrefix(
    const std::string& qualified) const {
  if (!catalog_) return nullptr;
  const std::shared_ptr<const cache::PrefixCatalog> catalog = catalog_();
  auto it = catalog->find(qualified);
  return it == catalog->end() ? nullptr : it->second.snapshot.lock();
}

std::optional<ResolvedPrefix> RequestBuilder::ResolvePrefix(std::string_view tenant,
                                                            const std::string& name) const {
  if (!catalog_) return std::nullopt;
  const std::shared_ptr<const cache::PrefixCatalog> catalog = catalog_();
  ResolvedPrefix resolved;
  const cache::CatalogEntry* entry =
      cache::FindVisiblePrefix(*catalog, tenant, name, &resolved.qualified_name);
  if (entry == nullptr) return std::nullopt;
  resolved.snapshot = entry->snapshot.lock();
  if (resolved.snapshot != nullptr) {
    resolved.tokens.assign(resolved.snapshot->token_ids().begin(),
                           resolved.snapshot->token_ids().end());
  } else if (!entry->tokens.empty()) {
    resolved.tokens = entry->tokens;  // demoted: promoted back for the request
  } else {
    return std::nullopt;
  }
  return resolved;
}

absl::StatusOr<cache::SessionOptions> RequestBuilder::Session(const SessionInput& input,
                                                              const BuildContext& context) const {
  cache::SessionOptions out;
  out.tenant = context.caller.tenant;
  if (input.ttl_seconds < 0) {
    return FieldError("options.ttl_seconds", Cat("must be >= 0 (got ", input.ttl_seconds, ")"));
  }
  // Unset (0): the server's default, applied by the session table.
  out.ttl = input.ttl_seconds > 0 ? absl::Seconds(input.ttl_seconds) : absl::ZeroDuration();
  const CacheInput& c = input.cache;
  if (c.use_cache && !*c.use_cache) {
    return FieldError("options.cache.use_cache", "a session keeps a cache; it cannot be false");
  }
  if (c.skip_prefix_reuse) {
    return FieldError("options.cache.skip_prefix_reuse",
                      "a session reuses its own cache; it cannot be set");
  }
  GenerationRequest parsed;
  if (absl::Status cache = BuildCache(c, &parsed); !cache.ok()) return Under("options", cache);
  out.cache = parsed.cache_spec;
  if (out.cache.is_static()) {
    // The whole conversation lives in it: sized for the model's context unless it says.
    out.cache.max_cache_len =
        c.max_cache_len ? *c.max_cache_len : model_info_.max_position_embeddings;
  }
  if (!input.prefix.empty()) {
    if (!IsValidPrefixName(input.prefix)) {
      return FieldError("options.prefix", "a name is 1 to 128 characters of [A-Za-z0-9._-]");
    }
    std::optional<ResolvedPrefix> prefix = ResolvePrefix(out.tenant, input.prefix);
    if (!prefix) {
      return NotFoundAt("options.prefix",
                        Cat("no prefix named '", input.prefix, "' is registered"));
    }
    out.prefix_name = prefix->qualified_name;
    out.prefix_tokens = std::move(prefix->tokens);
  }
  return out;
}

absl::StatusOr<GenerationRequest> RequestBuilder::SessionTurn(const GenerationInput& input,
                                                              const BuildContext& context) const {
  const std::string& id = input.session;
  if (!input.input.template_kwargs.empty() && input.input.kind != PromptInput::Kind::kMessages) {
    return FieldError("template_kwargs", "applies only to messages input");
  }
  std::shared_ptr<const cache::SessionOptions> session = sessions_ ? sessions_(id) : nullptr;
  // Another tenant's session is answered as one that does not exist.
  if (session != nullptr && session->tenant != context.caller.tenant) session = nullptr;
  if (session == nullptr) {
    return NotFoundAt("session", Cat("no open session '", Quoted(id, 64),
                                     "' (closed, expired or never created)"));
  }
  if (input.cache) {
    return FieldError("cache", "a session turn uses its session's cache; leave cache unset");
  }
  const std::string_view session_prefix =
      cache::SplitQualifiedPrefixName(session->prefix_name).second;
  if (!input.prefix.empty() && input.prefix != session_prefix) {
    return FieldError("prefix", session->prefix_name.empty()
                                    ? std::string("the session starts with no prefix")
                                    : Cat("the session starts with prefix '", session_prefix,
                                          "'; leave prefix unset"));
  }
  GenerationRequest out;
  out.tenant = context.caller.tenant;
  out.session = id;
  out.cache_spec = session->cache;
  out.prefix = session->prefix_name;
  switch (input.input.kind) {
    case PromptInput::Kind::kMessages: {
      // The whole conversation: the engine reuses what it shares with the history.
      absl::StatusOr<std::vector<int32_t>> ids = InputIds(input.input, false, context);
      if (!ids.ok()) return ids.status();
      if (ids->empty())
        return FieldError("messages", "the input has no tokens; at least one is required");
      out.prompt_ids = session->prefix_tokens;
      out.prompt_ids.insert(out.prompt_ids.end(), ids->begin(), ids->end());
      break;
    }
    case PromptInput::Kind::kText: {
      // Appended to the history; with the sequence-start tokens only on an empty history.
      out.session_append = true;
      absl::StatusOr<std::vector<int32_t>> ids = TextIds(input.input.text, "prompt", false);
      if (!ids.ok()) return ids.status();
      absl::StatusOr<std::vector<int32_t>> first = TextIds(input.input.text, "prompt", true);
      if (!first.ok()) return first.status();
      if (ids->empty())
        return FieldError("prompt", "the input has no tokens; at least one is required");
      out.prompt_ids = *std::move(ids);
      out.first_turn_ids = *std::move(first);
      break;
    }
    case PromptInput::Kind::kTokenIds: {
      out.session_append = true;
      absl::StatusOr<std::vector<int32_t>> ids = InputIds(input.input, false, context);
      if (!ids.ok()) return ids.status();
      if (ids->empty()) {
        return FieldError("token_ids.ids", "the input has no tokens; at least one is required");
      }
      out.first_turn_ids = *ids;
      out.prompt_ids = *std::move(ids);
      break;
    }
    case PromptInput::Kind::kNone:
      return FieldError("input", "one of prompt, token_ids or messages is required");
  }
  if (!session->prefix_name.empty()) {
    // The first turn copies the prefix's snapshot, when the name still holds that content.
    std::shared_ptr<const cache::Snapshot> snapshot = FindPrefix(session->prefix_name);
    if (snapshot != nullptr &&
        std::equal(snapshot->token_ids().begin(), snapshot->token_ids().end(),
                   session->prefix_tokens.begin(), session->prefix_tokens.end())) {
      out.prefix_snapshot = std::move(snapshot);
    }
  }
  absl::Status sampling = BuildSampling(input.sampling, &out);
  if (!sampling.ok()) return sampling;
  if (out.num_beams > 1) {
    return FieldError("sampling.num_beams",
                      "a session turn continues one history; beam search is not offered on it");
  }
  if (out.num_return_sequences > 1) {
    return FieldError("sampling.num_return_sequences",
                      "a session turn continues one history; it returns one sequence");
  }
  // An appended turn's history is the engine's to count.
  if (absl::Status size = CheckSize(out, /*prompt_field=*/""); !size.ok()) return size;
  return out;
}

absl::StatusOr<GenerationRequest> RequestBuilder::Generation(const GenerationInput& input,
                                                             const BuildContext& context) const {
  if (absl::Status s = CheckEncoderDecoderInput(model_info_, input); !s.ok()) return s;
  if (!input.session.empty()) return SessionTurn(input, context);
  GenerationRequest out;
  out.tenant = context.caller.tenant;
  if (!input.prefix.empty() && !IsValidPrefixName(input.prefix)) {
    return FieldError("prefix", "a name is 1 to 128 characters of [A-Za-z0-9._-]");
  }
  // With a prefix the input continues a sequence, so it gets no sequence-start tokens.
  absl::StatusOr<std::vector<int32_t>> ids =
      InputIds(input.input, /*add_special_tokens=*/input.prefix.empty(), context);
  if (!ids.ok()) return ids.status();
  if (ids->empty() && input.prefix.empty()) {
    return FieldError(InputField(input.input, "prompt"),
                      "the input has no tokens; at least one is required");
  }
  if (!input.prefix.empty()) {
    std::optional<ResolvedPrefix> prefix = ResolvePrefix(context.caller.tenant, input.prefix);
    if (!prefix) {
      return NotFoundAt("prefix", Cat("no prefix named '", input.prefix, "' is registered"));
    }
    // The prompt is the prefix's tokens followed by the input's.
    std::vector<int32_t> prompt = std::move(prefix->tokens);
    prompt.insert(prompt.end(), ids->begin(), ids->end());
    *ids = std::move(prompt);
    out.prefix = prefix->qualified_name;
    out.prefix_snapshot = std::move(prefix->snapshot);
  }
  out.prompt_ids = *std::move(ids);
  if (absl::Status s = ApplyEncoderDecoderInput(model_info_, input, &out); !s.ok()) return s;
  absl::Status sampling = BuildSampling(input.sampling, &out);
  if (!sampling.ok()) return sampling;
  if (absl::Status size = CheckSize(out, InputField(input.input, "prompt")); !size.ok()) {
    return size;
  }
  absl::Status cache = BuildCache(input.cache.value_or(CacheInput{}), &out);
  if (!cache.ok()) return cache;
  if (absl::Status s = CheckEncoderDecoderCache(model_info_, &out); !s.ok()) return s;
  if (!out.cache_spec.use_cache() && (out.num_beams > 1 || out.num_return_sequences > 1)) {
    return FieldError("cache.use_cache",
                      "beams and several sequences are rows of one cache; use_cache must be true");
  }
  return out;
}

absl::StatusOr<PrefixRegistration> RequestBuilder::Registration(const RegistrationInput& input,
                                                                const BuildContext& context) const {
  if (input.shared && context.caller.role != Role::kAdmin) {
    return absl::PermissionDeniedError(
        "shared: registering a shared prefix needs the admin role (this caller is a user)");
  }
  PrefixRegistration out;
  if (!IsValidPrefixName(input.name)) {
    return FieldError("name", "a name is 1 to 128 characters of [A-Za-z0-9._-]");
  }
  out.name = cache::QualifiedPrefixName(
      input.shared ? std::string(cache::kSharedSpace) : context.caller.tenant, input.name);
  switch (input.content.kind) {
    case PromptInput::Kind::kText: {
      absl::StatusOr<std::vector<int32_t>> ids = TextIds(input.content.text, "text", true);
      if (!ids.ok()) return ids.status();
      out.token_ids = *std::move(ids);
      break;
    }
    case PromptInput::Kind::kTokenIds: {
      out.token_ids = input.content.token_ids;
      absl::Status in_vocab =
          CheckIdsInVocab(out.token_ids, model_info_.vocab_size, "token_ids.ids");
      if (!in_vocab.ok()) return in_vocab;
      break;
    }
    case PromptInput::Kind::kMessages: {
      absl::StatusOr<std::vector<int32_t>> ids =
          ChatIds(input.content, "messages", /*add_generation_prompt=*/false, context);
      if (!ids.ok()) return ids.status();
      out.token_ids = *std::move(ids);
      break;
    }
    case PromptInput::Kind::kNone:
      return FieldError("content", "one of text, token_ids or messages is required");
  }
  if (out.token_ids.empty()) return FieldError("content", "the content has no tokens");
  // A request using the prefix needs at least one token of its own after it.
  if (static_cast<int64_t>(out.token_ids.size()) >= model_info_.max_position_embeddings) {
    return FieldError("content",
                      Cat(out.token_ids.size(), " tokens leave no room in the model's context of ",
                          model_info_.max_position_embeddings));
  }
  out.options.pinned = input.pinned.value_or(true);
  if (!input.retention.empty()) {
    const std::optional<cache::RetentionClass> retention =
        cache::ParseRetentionClass(input.retention);
    if (input.retention != "pinned" && !retention) {
      return FieldError("options.retention",
                        Cat("must be \"pinned\", \"high\", \"normal\" or \"low\" (got \"",
                            input.retention, "\")"));
    }
    if (input.pinned.has_value() && *input.pinned != !retention) {
      return FieldError(
          "options.retention",
          Cat("\"", input.retention, "\" contradicts pinned = ", *input.pinned ? "true" : "false"));
    }
    out.options.pinned = !retention;
    if (retention) out.options.retention = *retention;
  }
  if (input.ttl_seconds < 0) {
    return FieldError("options.ttl_seconds", Cat("must be >= 0 (got ", input.ttl_seconds, ")"));
  }
  if (input.ttl_seconds > 0) out.options.ttl = absl::Seconds(input.ttl_seconds);
  // The snapshot always holds every token's K/V; the strategy decides how its prompt is
  // prefilled (whole for a quantized one) and is checked against the model here.
  out.options.cache_implementation =
      input.cache_implementation.empty() ? "dynamic" : input.cache_implementation;
  absl::StatusOr<cache::CacheSpec> spec = cache::CacheSpec::Parse(out.options.cache_implementation);
  if (!spec.ok()) {
    return FieldError("options.cache_implementation", std::string(spec.status().message()));
  }
  if (absl::Status fits =
          cache::CheckSpecForModel(*spec, model_info_.layer_specs, model_info_.head_dim);
      !fits.ok()) {
    return FieldError("options.cache_implementation",
                      Cat(fits.message(), " (model_type ", model_info_.model_type, ")"));
  }
  out.strategy = *std::move(spec);
  if (absl::Status s = ApplyEncoderDecoderRegistration(model_info_, &out); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::string> RequestBuilder::DeletionTarget(const std::string& name, bool shared,
                                                           const BuildContext& context) const {
  std::string qualified = cache::QualifiedPrefixName(context.caller.tenant, name);
  const std::string shared_name = cache::QualifiedPrefixName(cache::kSharedSpace, name);
  const std::shared_ptr<const cache::PrefixCatalog> catalog =
      catalog_ ? catalog_() : std::make_shared<const cache::PrefixCatalog>();
  if (shared || (catalog->find(qualified) == catalog->end() &&
                 catalog->find(shared_name) != catalog->end())) {
    if (context.caller.role != Role::kAdmin) {
      return absl::PermissionDeniedError(
          "shared: deleting a shared prefix needs the admin role (this caller is a user)");
    }
    qualified = shared_name;
  }
  return qualified;
}

absl::StatusOr<TokenizeResult> RequestBuilder::Tokenize(const TokenizeInput& input,
                                                        const BuildContext& context) const {
  if (!input.input.template_kwargs.empty() && input.input.kind != PromptInput::Kind::kMessages) {
    return FieldError("template_kwargs", "applies only to messages input");
  }
  std::vector<int32_t> ids;
  switch (input.input.kind) {
    case PromptInput::Kind::kText: {
      absl::StatusOr<std::vector<int32_t>> encoded =
          TextIds(input.input.text, "text", input.add_special_tokens.value_or(true));
      if (!encoded.ok()) return encoded.status();
      ids = *std::move(encoded);
      break;
    }
    case PromptInput::Kind::kMessages: {
      absl::StatusOr<std::vector<int32_t>> encoded =
          ChatIds(input.input, "messages", /*add_generation_prompt=*/true, context);
      if (!encoded.ok()) return encoded.status();
      ids = *std::move(encoded);
      break;
    }
    case PromptInput::Kind::kTokenIds:
    case PromptInput::Kind::kNone:
      return FieldError("input", "one of text or messages is required");
  }
  TokenizeResult result;
  result.token_ids = ids;
  result.tokens.reserve(ids.size());
  for (int32_t id : ids) result.tokens.push_back(tokenizer_->IdToToken(id).value_or(""));
  return result;
}

}  // namespace kvserve::server
