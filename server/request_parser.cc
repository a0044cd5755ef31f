// RequestParser: kvserve.v1 requests to GenerationRequest, one named error per bad field.
#include "server/request_parser.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/string_cat.h"
#include "cache/cache_factory.h"
#include "cache/snapshot.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using base::Cat;

absl::Status FieldError(const std::string& field, const std::string& reason) {
  return absl::InvalidArgumentError(Cat(field, ": ", reason));
}

// A prefix name as PrefixCache accepts it: 1 to 128 characters of [A-Za-z0-9._-].
bool IsValidPrefixName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
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

// The longest token string of the vocabulary, in bytes: no token stands for more input.
int64_t LongestTokenBytes(const model::Tokenizer& tokenizer) {
  int64_t longest = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (std::optional<std::string> token = tokenizer.IdToToken(id)) {
      longest = std::max<int64_t>(longest, static_cast<int64_t>(token->size()));
    }
  }
  return longest;
}

// See RequestParser::max_input_bytes().
int64_t MaxInputBytes(const model::ModelInfo& info, const model::Tokenizer* tokenizer) {
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

}  // namespace

RequestParser::RequestParser(const model::ModelInfo& model_info, const model::Tokenizer* tokenizer,
                             RequestLimits limits, CatalogSource catalog, SessionSource sessions)
    : model_info_(model_info),
      tokenizer_(tokenizer),
      limits_(limits),
      catalog_(std::move(catalog)),
      sessions_(std::move(sessions)),
      max_input_bytes_(MaxInputBytes(model_info, tokenizer)) {}

absl::StatusOr<std::vector<int32_t>> RequestParser::TextIds(const std::string& text,
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

absl::StatusOr<std::vector<int32_t>> RequestParser::ChatIds(
    const v1::ChatMessages& messages, const std::string& field, bool add_generation_prompt,
    const ParseContext& context, const std::string& template_kwargs) const {
  if (messages.messages().empty()) {
    return FieldError(Cat(field, ".messages"), "at least one message is required");
  }
  if (messages.messages_size() > limits_.max_messages) {
    return FieldError(Cat(field, ".messages"), Cat(messages.messages_size(), " messages; at most ",
                                                   limits_.max_messages, " are allowed"));
  }
  std::vector<model::ChatMessage> chat;
  chat.reserve(messages.messages_size());
  // The kwargs count with the contents: they are rendered too.
  int64_t content_bytes = static_cast<int64_t>(template_kwargs.size());
  if (content_bytes > max_input_bytes_) {
    return FieldError("template_kwargs", Cat("more than the ", max_input_bytes_,
                                             " bytes that any input fitting the model's context "
                                             "can have"));
  }
  for (int i = 0; i < messages.messages_size(); ++i) {
    const v1::ChatMessage& m = messages.messages(i);
    if (m.role().empty()) {
      return FieldError(Cat(field, ".messages[", i, "].role"), "must not be empty");
    }
    content_bytes += static_cast<int64_t>(m.role().size() + m.content().size());
    if (content_bytes > max_input_bytes_) {
      return FieldError(Cat(field, ".messages"),
                        Cat("more than the ", max_input_bytes_,
                            " bytes that any input fitting the model's context of ",
                            model_info_.max_position_embeddings, " tokens can have"));
    }
    chat.push_back({m.role(), m.content()});
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
  model::RenderBudget budget;
  budget.deadline = context.deadline;
  budget.cancelled = context.cancelled;
  absl::StatusOr<std::string> text =
      tokenizer_->ApplyChatTemplate(chat, add_generation_prompt, budget, template_kwargs);
  if (!text.ok()) {
    // Malformed kwargs name their own field.
    if (absl::IsInvalidArgument(text.status()) &&
        absl::StartsWith(text.status().message(), "template_kwargs")) {
      return text.status();
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

absl::StatusOr<std::vector<int32_t>> RequestParser::InputIds(const v1::GenerateRequest& request,
                                                             const ParseContext& context) const {
  if (!request.template_kwargs().empty() &&
      request.input_case() != v1::GenerateRequest::kMessages) {
    return FieldError("template_kwargs", "applies only to messages input");
  }
  // With a prefix the input continues a sequence, so it gets no sequence-start tokens.
  const bool add_special_tokens = request.prefix().empty();
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      return TextIds(request.prompt(), "prompt", add_special_tokens);
    case v1::GenerateRequest::kTokenIds: {
      if (request.token_ids().ids_size() > model_info_.max_position_embeddings) {
        return FieldError("token_ids.ids",
                          Cat(request.token_ids().ids_size(), " ids; the model's context holds ",
                              model_info_.max_position_embeddings));
      }
      std::vector<int32_t> ids(request.token_ids().ids().begin(), request.token_ids().ids().end());
      absl::Status in_vocab = CheckIdsInVocab(ids, model_info_.vocab_size, "token_ids.ids");
      if (!in_vocab.ok()) return in_vocab;
      return ids;
    }
    case v1::GenerateRequest::kMessages:
      return ChatIds(request.messages(), "messages", /*add_generation_prompt=*/true, context,
                     request.template_kwargs());
    case v1::GenerateRequest::INPUT_NOT_SET:
      break;
  }
  return FieldError("input", "one of prompt, token_ids or messages is required");
}

absl::Status RequestParser::ParseSampling(const v1::SamplingParams& s,
                                          GenerationRequest* out) const {
  if (s.has_max_new_tokens()) {
    if (s.max_new_tokens() < 1) {
      return FieldError("sampling.max_new_tokens",
                        Cat("must be >= 1 (got ", s.max_new_tokens(), ")"));
    }
    if (s.max_new_tokens() > limits_.max_new_tokens_limit) {
      return FieldError("sampling.max_new_tokens",
                        Cat(s.max_new_tokens(), " is above the server's --max-new-tokens-limit of ",
                            limits_.max_new_tokens_limit));
    }
    out->max_new_tokens = s.max_new_tokens();
  } else {
    // generation_config.json's default (generate() reads it for every unset parameter), else 16.
    out->max_new_tokens = std::min<int64_t>(model_info_.generation.max_new_tokens.value_or(16),
                                            limits_.max_new_tokens_limit);
  }
  const model::GenerationConfig& defaults = model_info_.generation;
  model::SamplingParams& p = out->sampling;
  p.do_sample = s.has_do_sample() ? s.do_sample() : defaults.do_sample.value_or(false);
  if (defaults.temperature && *defaults.temperature > 0) p.temperature = *defaults.temperature;
  // A default temperature of 0 means greedy, unless the request sets its own temperature.
  if (defaults.temperature && *defaults.temperature == 0 && !s.has_temperature()) {
    p.do_sample = false;
  }
  // A top_k past the vocabulary keeps every token, as a larger one would.
  if (defaults.top_k) {
    p.top_k = static_cast<int32_t>(std::min<int64_t>(*defaults.top_k, model_info_.vocab_size));
  }
  if (defaults.top_p) p.top_p = *defaults.top_p;
  if (defaults.min_p) p.min_p = *defaults.min_p;
  if (defaults.repetition_penalty) p.repetition_penalty = *defaults.repetition_penalty;
  // A set value is checked even when greedy decoding ignores it: it is still malformed.
  if (s.has_temperature()) {
    if (!std::isfinite(s.temperature()) || s.temperature() < 0) {
      return FieldError("sampling.temperature", Cat("must be >= 0 (got ", s.temperature(), ")"));
    }
    if (s.temperature() == 0) {
      // What OpenAI and vLLM clients send for deterministic output: greedy decoding.
      p.do_sample = false;
    } else {
      p.temperature = s.temperature();
    }
  }
  if (s.has_top_k()) {
    if (s.top_k() < 0) {
      return FieldError("sampling.top_k",
                        Cat("must be >= 0, 0 turning it off (got ", s.top_k(), ")"));
    }
    p.top_k = s.top_k();
  }
  if (s.has_top_p()) {
    if (!(s.top_p() > 0 && s.top_p() <= 1)) {
      return FieldError("sampling.top_p", Cat("must be in (0, 1] (got ", s.top_p(), ")"));
    }
    p.top_p = s.top_p();
  }
  if (s.has_min_p()) {
    if (!(s.min_p() >= 0 && s.min_p() <= 1)) {
      return FieldError("sampling.min_p", Cat("must be in [0, 1] (got ", s.min_p(), ")"));
    }
    p.min_p = s.min_p();
  }
  if (s.has_repetition_penalty()) {
    if (!std::isfinite(s.repetition_penalty()) || s.repetition_penalty() <= 0) {
      return FieldError("sampling.repetition_penalty",
                        Cat("must be > 0 (got ", s.repetition_penalty(), ")"));
    }
    p.repetition_penalty = s.repetition_penalty();
  }
  if (s.has_seed()) p.seed = s.seed();
  if (s.stop_size() > limits_.max_stop_strings) {
    return FieldError("sampling.stop", Cat(s.stop_size(), " strings given; at most ",
                                           limits_.max_stop_strings, " are allowed"));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const std::string& stop = s.stop(i);
    if (stop.empty()) return FieldError(Cat("sampling.stop[", i, "]"), "must not be empty");
    if (static_cast<int64_t>(stop.size()) > limits_.max_stop_string_bytes) {
      return FieldError(Cat("sampling.stop[", i, "]"),
                        Cat("is ", stop.size(), " bytes; at most ", limits_.max_stop_string_bytes));
    }
    out->stop_strings.push_back(stop);
  }
  if (s.stop_token_ids_size() > limits_.max_stop_token_ids) {
    return FieldError("sampling.stop_token_ids",
                      Cat(s.stop_token_ids_size(), " ids given; at most ",
                          limits_.max_stop_token_ids, " are allowed"));
  }
  out->stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  absl::Status ids_ok =
      CheckIdsInVocab(out->stop_token_ids, model_info_.vocab_size, "sampling.stop_token_ids");
  if (!ids_ok.ok()) return ids_ok;
  out->ignore_eos = s.ignore_eos();
  return ParseSequences(s, out);
}

absl::Status RequestParser::ParseSequences(const v1::SamplingParams& s,
                                           GenerationRequest* out) const {
  const model::GenerationConfig& defaults = model_info_.generation;
  if (s.has_num_beam_groups() && s.num_beam_groups() != 1) {
    return FieldError("sampling.num_beam_groups",
                      Cat("diverse (group) beam search is not offered; only 1 is accepted (got ",
                          s.num_beam_groups(), ")"));
  }
  const int max_sequences = limits_.max_sequences_per_request;
  const bool sampling = out->sampling.do_sample;
  // generation_config.json's num_beams applies where it can: not to sampling (beam sampling
  // is not offered), stop strings or more sequences than it has beams.
  int num_beams = std::min(defaults.num_beams.value_or(1), max_sequences);
  if (sampling || !out->stop_strings.empty() ||
      (s.has_num_return_sequences() && s.num_return_sequences() > num_beams)) {
    num_beams = 1;
  }
  if (s.has_num_beams()) {
    if (s.num_beams() < 1 || s.num_beams() > max_sequences) {
      return FieldError("sampling.num_beams",
                        Cat("must be in [1, ", max_sequences, "] (got ", s.num_beams(), ")"));
    }
    num_beams = s.num_beams();
  }
  int num_sequences = 1;
  if (s.has_num_return_sequences()) {
    if (s.num_return_sequences() < 1 || s.num_return_sequences() > max_sequences) {
      return FieldError(
          "sampling.num_return_sequences",
          Cat("must be in [1, ", max_sequences, "] (got ", s.num_return_sequences(), ")"));
    }
    num_sequences = s.num_return_sequences();
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
  out->num_beams = num_beams;
  out->num_return_sequences = num_sequences;
  switch (s.early_stopping()) {
    case v1::EARLY_STOPPING_TRUE:
      out->early_stopping = model::EarlyStopping::kTrue;
      break;
    case v1::EARLY_STOPPING_NEVER:
      out->early_stopping = model::EarlyStopping::kNever;
      break;
    case v1::EARLY_STOPPING_FALSE:
      out->early_stopping = model::EarlyStopping::kFalse;
      break;
    case v1::EARLY_STOPPING_UNSPECIFIED:
      out->early_stopping = defaults.early_stopping.value_or(model::EarlyStopping::kFalse);
      break;
    default:
      return FieldError("sampling.early_stopping",
                        Cat("unknown value ", static_cast<int>(s.early_stopping())));
  }
  out->length_penalty = defaults.length_penalty.value_or(1.0);
  if (s.has_length_penalty()) {
    if (!std::isfinite(s.length_penalty())) {
      return FieldError("sampling.length_penalty", "must be a finite number");
    }
    out->length_penalty = s.length_penalty();
  }
  if (s.top_logprobs() < 0 || s.top_logprobs() > kMaxTopLogprobs) {
    return FieldError("sampling.top_logprobs",
                      Cat("must be in [0, ", kMaxTopLogprobs, "] (got ", s.top_logprobs(), ")"));
  }
  if (s.top_logprobs() > 0 && !s.logprobs()) {
    return FieldError("sampling.top_logprobs", "needs logprobs set");
  }
  out->top_logprobs = s.logprobs() ? s.top_logprobs() : -1;
  return absl::OkStatus();
}

absl::Status RequestParser::ParseCache(const v1::CacheOptions& c, GenerationRequest* out) const {
  cache::QuantizationConfig quantization;
  if (c.has_quantization()) {
    const v1::QuantizationConfig& q = c.quantization();
    if (!q.backend().empty()) quantization.backend = q.backend();
    if (q.has_nbits()) quantization.nbits = q.nbits();
    if (q.has_axis_key()) quantization.axis_key = q.axis_key();
    if (q.has_axis_value()) quantization.axis_value = q.axis_value();
    if (q.has_q_group_size()) quantization.q_group_size = q.q_group_size();
    if (q.has_residual_length()) quantization.residual_length = q.residual_length();
  }
  const bool use_cache = !c.has_use_cache() || c.use_cache();
  if (!use_cache) {
    // Without a cache nothing else in `cache` can apply: refuse it rather than ignore it.
    std::string_view ignored;
    if (!c.cache_implementation().empty()) ignored = "cache_implementation";
    if (c.has_quantization()) ignored = "quantization";
    if (c.has_max_cache_len()) ignored = "max_cache_len";
    if (c.has_offload_only_non_sliding()) ignored = "offload_only_non_sliding";
    if (!ignored.empty()) {
      return FieldError(Cat("cache.", ignored),
                        "cannot be used with use_cache false (no cache is kept)");
    }
  }
  std::optional<int64_t> max_cache_len;
  if (c.has_max_cache_len()) {
    if (c.max_cache_len() > model_info_.max_position_embeddings) {
      return FieldError("cache.max_cache_len",
                        Cat(c.max_cache_len(), " is above the model's context of ",
                            model_info_.max_position_embeddings, " tokens"));
    }
    max_cache_len = c.max_cache_len();
  }
  absl::StatusOr<cache::CacheSpec> spec =
      cache::CacheSpec::Parse(c.cache_implementation(), quantization, use_cache, max_cache_len);
  if (!spec.ok()) return CacheFieldError(std::string(spec.status().message()));
  if (c.has_max_cache_len() && !spec->is_static()) {
    return FieldError("cache.max_cache_len",
                      Cat("applies only to the static and offloaded_static caches, not '",
                          cache::CacheImplementationName(spec->implementation), "'"));
  }
  if (absl::Status fits =
          cache::CheckSpecForModel(*spec, model_info_.layer_specs, model_info_.head_dim);
      !fits.ok()) {
    return CacheFieldError(std::string(fits.message()));
  }
  if (c.has_offload_only_non_sliding()) {
    if (!spec->is_offloaded()) {
      return FieldError("cache.offload_only_non_sliding",
                        "applies only to the offloaded and offloaded_static caches");
    }
    spec->offload_only_non_sliding = c.offload_only_non_sliding();
  }
  if (spec->is_static()) {
    spec->max_cache_len = cache::StaticCacheLength(
        static_cast<int64_t>(out->prompt_ids.size()) + out->max_new_tokens, spec->max_cache_len);
  }
  out->cache_spec = *std::move(spec);
  out->skip_prefix_reuse = c.skip_prefix_reuse();
  return absl::OkStatus();
}

std::shared_ptr<const cache::Snapshot> RequestParser::FindPrefix(
    const std::string& qualified) const {
  if (!catalog_) return nullptr;
  const std::shared_ptr<const cache::PrefixCatalog> catalog = catalog_();
  auto it = catalog->find(qualified);
  return it == catalog->end() ? nullptr : it->second.snapshot.lock();
}

std::optional<ResolvedPrefix> RequestParser::ResolvePrefix(const std::string& tenant,
                                                           const std::string& name) const {
  if (!catalog_) return std::nullopt;
  const std::shared_ptr<const cache::PrefixCatalog> catalog = catalog_();
  ResolvedPrefix resolved;
  const cache::CatalogEntry* entry =
      cache::FindVisiblePrefix(*catalog, tenant, name, &resolved.qualified_name);
  if (entry == nullptr) return std::nullopt;
  resolved.snapshot = entry->snapshot.lock();
  if (resolved.snapshot == nullptr) return std::nullopt;
  return resolved;
}

absl::StatusOr<cache::SessionOptions> RequestParser::ParseSessionOptions(
    const v1::SessionOptions& options, const std::string& tenant) const {
  cache::SessionOptions out;
  out.tenant = tenant;
  if (options.ttl_seconds() < 0) {
    return FieldError("options.ttl_seconds", Cat("must be >= 0 (got ", options.ttl_seconds(), ")"));
  }
  // Unset (0): the server's default, applied by the engine.
  out.ttl = options.ttl_seconds() > 0 ? absl::Seconds(options.ttl_seconds()) : absl::ZeroDuration();
  const v1::CacheOptions& c = options.cache();
  if (c.has_use_cache() && !c.use_cache()) {
    return FieldError("options.cache.use_cache", "a session keeps a cache; it cannot be false");
  }
  if (c.skip_prefix_reuse()) {
    return FieldError("options.cache.skip_prefix_reuse",
                      "a session reuses its own cache; it cannot be set");
  }
  GenerationRequest parsed;
  if (absl::Status cache = ParseCache(c, &parsed); !cache.ok()) {
    return absl::Status(cache.code(), Cat("options.", cache.message()));
  }
  out.cache = parsed.cache_spec;
  if (out.cache.is_static()) {
    // The whole conversation lives in it: sized for the model's context unless it says.
    out.cache.max_cache_len =
        c.has_max_cache_len() ? c.max_cache_len() : model_info_.max_position_embeddings;
  }
  if (!options.prefix().empty()) {
    if (!IsValidPrefixName(options.prefix())) {
      return FieldError("options.prefix", "a name is 1 to 128 characters of [A-Za-z0-9._-]");
    }
    std::optional<ResolvedPrefix> prefix = ResolvePrefix(tenant, options.prefix());
    if (!prefix) {
      return absl::NotFoundError(
          Cat("options.prefix: no prefix named '", options.prefix(), "' is registered"));
    }
    out.prefix_name = prefix->qualified_name;
    out.prefix_tokens.assign(prefix->snapshot->token_ids().begin(),
                             prefix->snapshot->token_ids().end());
  }
  return out;
}

absl::StatusOr<GenerationRequest> RequestParser::ParseSessionTurn(
    const v1::GenerateRequest& request, const ParseContext& context) const {
  const std::string& id = request.session();
  if (!request.template_kwargs().empty() &&
      request.input_case() != v1::GenerateRequest::kMessages) {
    return FieldError("template_kwargs", "applies only to messages input");
  }
  std::shared_ptr<const cache::SessionOptions> session = sessions_ ? sessions_(id) : nullptr;
  // Another tenant's session is answered as one that does not exist.
  if (session != nullptr && session->tenant != context.tenant) session = nullptr;
  if (session == nullptr) {
    constexpr size_t kMaxQuoted = 64;
    const std::string quoted =
        id.size() <= kMaxQuoted ? id : Cat(id.substr(0, kMaxQuoted), "... (", id.size(), " bytes)");
    return absl::NotFoundError(
        Cat("session: no open session '", quoted, "' (closed, expired or never created)"));
  }
  if (request.has_cache()) {
    return FieldError("cache", "a session turn uses its session's cache; leave cache unset");
  }
  const std::string_view session_prefix =
      cache::SplitQualifiedPrefixName(session->prefix_name).second;
  if (!request.prefix().empty() && request.prefix() != session_prefix) {
    return FieldError("prefix", session->prefix_name.empty()
                                    ? std::string("the session starts with no prefix")
                                    : Cat("the session starts with prefix '", session_prefix,
                                          "'; leave prefix unset"));
  }
  GenerationRequest out;
  out.tenant = context.tenant;
  out.session = id;
  out.cache_spec = session->cache;
  out.prefix = session->prefix_name;
  switch (request.input_case()) {
    case v1::GenerateRequest::kMessages: {
      // The whole conversation: the engine reuses what it shares with the history.
      absl::StatusOr<std::vector<int32_t>> ids = InputIds(request, context);
      if (!ids.ok()) return ids.status();
      if (ids->empty())
        return FieldError("messages", "the input has no tokens; at least one is required");
      out.prompt_ids = session->prefix_tokens;
      out.prompt_ids.insert(out.prompt_ids.end(), ids->begin(), ids->end());
      break;
    }
    case v1::GenerateRequest::kPrompt: {
      // Appended to the history; with the sequence-start tokens only on an empty history.
      out.session_append = true;
      absl::StatusOr<std::vector<int32_t>> ids = TextIds(request.prompt(), "prompt", false);
      if (!ids.ok()) return ids.status();
      absl::StatusOr<std::vector<int32_t>> first = TextIds(request.prompt(), "prompt", true);
      if (!first.ok()) return first.status();
      if (ids->empty())
        return FieldError("prompt", "the input has no tokens; at least one is required");
      out.prompt_ids = *std::move(ids);
      out.first_turn_ids = *std::move(first);
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      out.session_append = true;
      absl::StatusOr<std::vector<int32_t>> ids = InputIds(request, context);
      if (!ids.ok()) return ids.status();
      if (ids->empty()) {
        return FieldError("token_ids.ids", "the input has no tokens; at least one is required");
      }
      out.first_turn_ids = *ids;
      out.prompt_ids = *std::move(ids);
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
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
  absl::Status sampling = ParseSampling(request.sampling(), &out);
  if (!sampling.ok()) return sampling;
  if (out.num_beams > 1) {
    return FieldError("sampling.num_beams",
                      "a session turn continues one history; beam search is not offered on it");
  }
  if (out.num_return_sequences > 1) {
    return FieldError("sampling.num_return_sequences",
                      "a session turn continues one history; it returns one sequence");
  }
  const int64_t context_tokens = model_info_.max_position_embeddings;
  const int64_t prompt = static_cast<int64_t>(out.prompt_ids.size());
  // An appended turn's history is the engine's to count.
  if (prompt + out.max_new_tokens > context_tokens) {
    return FieldError("sampling.max_new_tokens",
                      Cat("the prompt's ", prompt, " tokens + max_new_tokens ", out.max_new_tokens,
                          " exceed the model's context of ", context_tokens, " tokens"));
  }
  return out;
}

absl::StatusOr<GenerationRequest> RequestParser::Parse(const v1::GenerateRequest& request,
                                                       const ParseContext& context) const {
  if (!request.session().empty()) return ParseSessionTurn(request, context);
  GenerationRequest out;
  out.tenant = context.tenant;
  if (!request.prefix().empty()) {
    if (!IsValidPrefixName(request.prefix())) {
      return FieldError("prefix", "a name is 1 to 128 characters of [A-Za-z0-9._-]");
    }
  }
  absl::StatusOr<std::vector<int32_t>> ids = InputIds(request, context);
  if (!ids.ok()) return ids.status();
  if (ids->empty() && request.prefix().empty()) {
    const std::string field =
        request.input_case() == v1::GenerateRequest::kTokenIds
            ? "token_ids.ids"
            : (request.input_case() == v1::GenerateRequest::kPrompt ? "prompt" : "messages");
    return FieldError(field, "the input has no tokens; at least one is required");
  }
  if (!request.prefix().empty()) {
    std::optional<ResolvedPrefix> prefix = ResolvePrefix(context.tenant, request.prefix());
    if (!prefix) {
      return absl::NotFoundError(
          Cat("prefix: no prefix named '", request.prefix(), "' is registered"));
    }
    // The prompt is the prefix's tokens followed by the input's.
    std::vector<int32_t> prompt(prefix->snapshot->token_ids().begin(),
                                prefix->snapshot->token_ids().end());
    prompt.insert(prompt.end(), ids->begin(), ids->end());
    *ids = std::move(prompt);
    out.prefix = prefix->qualified_name;
    out.prefix_snapshot = std::move(prefix->snapshot);
  }
  out.prompt_ids = *std::move(ids);
  absl::Status sampling = ParseSampling(request.sampling(), &out);
  if (!sampling.ok()) return sampling;
  const int64_t context_tokens = model_info_.max_position_embeddings;
  const int64_t prompt = static_cast<int64_t>(out.prompt_ids.size());
  if (prompt + out.max_new_tokens > context_tokens) {
    return FieldError("sampling.max_new_tokens",
                      Cat("the prompt's ", prompt, " tokens + max_new_tokens ", out.max_new_tokens,
                          " exceed the model's context of ", context_tokens, " tokens"));
  }
  absl::Status cache = ParseCache(request.cache(), &out);
  if (!cache.ok()) return cache;
  if (!out.cache_spec.use_cache() && (out.num_beams > 1 || out.num_return_sequences > 1)) {
    return FieldError("cache.use_cache",
                      "beams and several sequences are rows of one cache; use_cache must be true");
  }
  return out;
}

absl::StatusOr<PrefixRegistration> RequestParser::ParseRegisterPrefix(
    const v1::RegisterPrefixRequest& request) const {
  PrefixRegistration out;
  if (!IsValidPrefixName(request.name())) {
    return FieldError("name", "a name is 1 to 128 characters of [A-Za-z0-9._-]");
  }
  out.name = request.name();
  switch (request.content_case()) {
    case v1::RegisterPrefixRequest::kText: {
      absl::StatusOr<std::vector<int32_t>> ids = TextIds(request.text(), "text", true);
      if (!ids.ok()) return ids.status();
      out.token_ids = *std::move(ids);
      break;
    }
    case v1::RegisterPrefixRequest::kTokenIds: {
      out.token_ids.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      absl::Status in_vocab =
          CheckIdsInVocab(out.token_ids, model_info_.vocab_size, "token_ids.ids");
      if (!in_vocab.ok()) return in_vocab;
      break;
    }
    case v1::RegisterPrefixRequest::kMessages: {
      absl::StatusOr<std::vector<int32_t>> ids =
          ChatIds(request.messages(), "messages", /*add_generation_prompt=*/false, {});
      if (!ids.ok()) return ids.status();
      out.token_ids = *std::move(ids);
      break;
    }
    case v1::RegisterPrefixRequest::CONTENT_NOT_SET:
      return FieldError("content", "one of text, token_ids or messages is required");
  }
  if (out.token_ids.empty()) return FieldError("content", "the content has no tokens");
  // A request using the prefix needs at least one token of its own after it.
  if (static_cast<int64_t>(out.token_ids.size()) >= model_info_.max_position_embeddings) {
    return FieldError("content", Cat(out.token_ids.size(),
                                     " tokens leave no room in the model's "
                                     "context of ",
                                     model_info_.max_position_embeddings));
  }
  const v1::PrefixOptions& o = request.options();
  out.options.pinned = !o.has_pinned() || o.pinned();
  if (o.ttl_seconds() < 0) {
    return FieldError("options.ttl_seconds", Cat("must be >= 0 (got ", o.ttl_seconds(), ")"));
  }
  if (o.ttl_seconds() > 0) out.options.ttl = absl::Seconds(o.ttl_seconds());
  // The snapshot always holds every token's K/V; the strategy decides how its prompt is
  // prefilled (whole for a quantized one) and is checked against the model here.
  out.options.cache_implementation =
      o.cache_implementation().empty() ? "dynamic" : o.cache_implementation();
  absl::StatusOr<cache::CacheSpec> spec = cache::CacheSpec::Parse(out.options.cache_implementation);
  if (!spec.ok()) {
    return FieldError("options.cache_implementation", std::string(spec.status().message()));
  }
  if (absl::Status fits =
          cache::CheckSpecForModel(*spec, model_info_.layer_specs, model_info_.head_dim);
      !fits.ok()) {
    return FieldError("options.cache_implementation", std::string(fits.message()));
  }
  out.strategy = *std::move(spec);
  return out;
}

absl::StatusOr<v1::TokenizeResponse> RequestParser::Tokenize(const v1::TokenizeRequest& request,
                                                             const ParseContext& context) const {
  if (!request.template_kwargs().empty() &&
      request.input_case() != v1::TokenizeRequest::kMessages) {
    return FieldError("template_kwargs", "applies only to messages input");
  }
  std::vector<int32_t> ids;
  switch (request.input_case()) {
    case v1::TokenizeRequest::kText: {
      const bool add_special = !request.has_add_special_tokens() || request.add_special_tokens();
      absl::StatusOr<std::vector<int32_t>> encoded = TextIds(request.text(), "text", add_special);
      if (!encoded.ok()) return encoded.status();
      ids = *std::move(encoded);
      break;
    }
    case v1::TokenizeRequest::kMessages: {
      absl::StatusOr<std::vector<int32_t>> encoded =
          ChatIds(request.messages(), "messages", /*add_generation_prompt=*/true, context,
                  request.template_kwargs());
      if (!encoded.ok()) return encoded.status();
      ids = *std::move(encoded);
      break;
    }
    case v1::TokenizeRequest::INPUT_NOT_SET:
      return FieldError("input", "one of text or messages is required");
  }
  v1::TokenizeResponse response;
  for (int32_t id : ids) {
    response.add_token_ids(id);
    response.add_tokens(tokenizer_->IdToToken(id).value_or(""));
  }
  return response;
}

}  // namespace kvserve::server
