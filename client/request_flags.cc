// kvctl's request flags and their mapping onto kvserve.v1 requests (see request_flags.h).
#include "client/request_flags.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/text_input.h"
#include "nlohmann/json.hpp"

namespace kvserve::client {
namespace {

using Json = nlohmann::json;

// Sets `*out` via `set` when the flag was given; passes a parse error on.
template <typename T, typename Set>
absl::Status SetIfGiven(const absl::StatusOr<std::optional<T>>& value, Set set) {
  if (!value.ok()) return value.status();
  if (value->has_value()) set(**value);
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseJson(const std::string& text, const std::string& flag) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": not valid JSON (", e.what(), ")"));
  }
}

// The integer under `key` of `object`, within [lo, hi]; InvalidArgument naming the key.
absl::StatusOr<int64_t> JsonInteger(const Json& object, const std::string& key, int64_t lo,
                                    int64_t hi) {
  const Json& value = object.at(key);
  const std::string where = absl::StrCat("--cache-config: \"", key, "\"");
  if (!value.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " must be an integer"));
  }
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is out of range"));
  }
  const int64_t v = value.get<int64_t>();
  if (v < lo || v > hi) return absl::InvalidArgumentError(absl::StrCat(where, " is out of range"));
  return v;
}

// Sets the request's input oneof from --prompt, --prompt-file, --token-ids or --messages
// (exactly one); `in` is what --prompt-file - reads.
absl::Status SetInput(const ParsedFlags& parsed, std::istream& in, v1::GenerateRequest& request) {
  const base::CommandLine& flags = parsed.flags;
  const int given = flags.Has("prompt") + flags.Has("prompt-file") + flags.Has("token-ids") +
                    flags.Has("messages");
  if (given != 1) {
    return absl::InvalidArgumentError(
        given == 0 ? "one of --prompt, --prompt-file, --token-ids, --messages is required"
                   : "give only one of --prompt, --prompt-file, --token-ids, --messages");
  }
  if (flags.Has("prompt")) {
    const std::string prompt = flags.GetString("prompt");
    if (absl::Status utf8 = CheckUtf8("--prompt", prompt); !utf8.ok()) return utf8;
    request.set_prompt(prompt);
    return absl::OkStatus();
  }
  if (flags.Has("prompt-file")) {
    absl::StatusOr<std::string> prompt =
        ReadTextInput("prompt-file", flags.GetString("prompt-file"), in);
    if (!prompt.ok()) return prompt.status();
    request.set_prompt(*std::move(prompt));
    return absl::OkStatus();
  }
  return SetTokenIdsOrMessages(flags, request);
}

bool AnyGiven(const ParsedFlags& parsed, const std::vector<base::FlagSpec>& specs) {
  for (const base::FlagSpec& spec : specs) {
    if (parsed.flags.Has(spec.name) || parsed.repeated.contains(spec.name)) return true;
  }
  return false;
}

absl::Status SetSampling(const ParsedFlags& p, v1::SamplingParams& s) {
  absl::Status status;
  status.Update(
      SetIfGiven(p.GetInt32("max-new-tokens"), [&](int32_t v) { s.set_max_new_tokens(v); }));
  if (std::optional<bool> v = p.GetSwitch("do-sample")) s.set_do_sample(*v);
  status.Update(SetIfGiven(p.GetFloat("temperature"), [&](float v) { s.set_temperature(v); }));
  status.Update(SetIfGiven(p.GetInt32("top-k"), [&](int32_t v) { s.set_top_k(v); }));
  status.Update(SetIfGiven(p.GetFloat("top-p"), [&](float v) { s.set_top_p(v); }));
  status.Update(SetIfGiven(p.GetFloat("min-p"), [&](float v) { s.set_min_p(v); }));
  status.Update(
      SetIfGiven(p.GetFloat("repetition-penalty"), [&](float v) { s.set_repetition_penalty(v); }));
  status.Update(SetIfGiven(p.GetUint64("seed"), [&](uint64_t v) { s.set_seed(v); }));
  if (auto it = p.repeated.find("stop"); it != p.repeated.end()) {
    for (const std::string& stop : it->second) s.add_stop(stop);
  }
  if (p.flags.Has("stop-token-ids")) {
    absl::StatusOr<std::vector<int32_t>> ids = p.flags.GetIntList("stop-token-ids");
    if (!ids.ok()) {
      status.Update(ids.status());
    } else {
      s.mutable_stop_token_ids()->Add(ids->begin(), ids->end());
    }
  }
  if (p.GetSwitch("ignore-eos").value_or(false)) s.set_ignore_eos(true);
  return status;
}

// --early-stopping: "true", "false" or "never"; nullopt when not given.
absl::StatusOr<std::optional<v1::EarlyStopping>> EarlyStoppingFlag(const ParsedFlags& p) {
  if (!p.flags.Has("early-stopping")) return std::optional<v1::EarlyStopping>();
  const std::string text = p.flags.GetString("early-stopping");
  if (text == "true") return std::optional<v1::EarlyStopping>(v1::EARLY_STOPPING_TRUE);
  if (text == "false") return std::optional<v1::EarlyStopping>(v1::EARLY_STOPPING_FALSE);
  if (text == "never") return std::optional<v1::EarlyStopping>(v1::EARLY_STOPPING_NEVER);
  return absl::InvalidArgumentError(
      absl::StrCat("--early-stopping: '", text, "' is not true, false or never"));
}

// The flags of SequenceFlagSpecs() (given only where a command has them).
absl::Status SetSequences(const ParsedFlags& p, v1::SamplingParams& s) {
  absl::Status status;
  status.Update(SetIfGiven(p.GetInt32("num-beams"), [&](int32_t v) { s.set_num_beams(v); }));
  status.Update(SetIfGiven(p.GetInt32("num-return-sequences"),
                           [&](int32_t v) { s.set_num_return_sequences(v); }));
  status.Update(
      SetIfGiven(EarlyStoppingFlag(p), [&](v1::EarlyStopping v) { s.set_early_stopping(v); }));
  status.Update(
      SetIfGiven(p.GetFloat("length-penalty"), [&](float v) { s.set_length_penalty(v); }));
  if (p.GetSwitch("logprobs").value_or(false)) s.set_logprobs(true);
  status.Update(SetIfGiven(p.GetInt32("top-logprobs"), [&](int32_t v) { s.set_top_logprobs(v); }));
  return status;
}

absl::Status SetCache(const ParsedFlags& p, v1::CacheOptions& c) {
  absl::Status status;
  if (std::optional<bool> no_cache = p.GetSwitch("no-cache")) c.set_use_cache(!*no_cache);
  if (p.flags.Has("cache-implementation")) {
    c.set_cache_implementation(p.flags.GetString("cache-implementation"));
  }
  if (p.flags.Has("cache-config")) {
    absl::StatusOr<v1::QuantizationConfig> config =
        ParseCacheConfig(p.flags.GetString("cache-config"));
    if (!config.ok()) {
      status.Update(config.status());
    } else {
      *c.mutable_quantization() = *std::move(config);
    }
  }
  status.Update(
      SetIfGiven(p.GetInt64("max-cache-len"), [&](int64_t v) { c.set_max_cache_len(v); }));
  if (std::optional<bool> v = p.GetSwitch("offload-only-non-sliding")) {
    c.set_offload_only_non_sliding(*v);
  }
  if (p.GetSwitch("no-prefix-reuse").value_or(false)) c.set_skip_prefix_reuse(true);
  return status;
}

// The flags of a request's own cache that are not its strategy (a session refuses both).
base::FlagSpec NoCacheFlagSpec() {
  return {"no-cache", "no KV cache: recompute the whole sequence every step", "", true};
}
base::FlagSpec NoPrefixReuseFlagSpec() {
  return {"no-prefix-reuse", "compute the whole prompt even when a cached prefix matches", "",
          true};
}

// "--template-kwargs needs --messages" when the flag is given without --messages.
absl::Status CheckTemplateKwargsHasMessages(const ParsedFlags& flags) {
  if (flags.flags.Has("template-kwargs") && !flags.flags.Has("messages")) {
    return absl::InvalidArgumentError("--template-kwargs needs --messages");
  }
  return absl::OkStatus();
}

base::FlagSpec TemplateKwargsFlagSpec() {
  return {"template-kwargs",
          "--messages only: chat-template keyword arguments, a JSON object: "
          "{\"enable_thinking\":false}",
          ""};
}

}  // namespace

std::vector<base::FlagSpec> SamplingFlagSpecs() {
  return {
      {"max-new-tokens", "tokens to generate at most", "server: 16"},
      {"do-sample", "sample instead of greedy decoding", "", true},
      {"temperature", "sampling temperature (0: greedy)", "server: 1.0"},
      {"top-k", "keep the k most likely tokens (0: off)", "server: 50"},
      {"top-p", "nucleus sampling threshold, in (0, 1]", "server: 1.0"},
      {"min-p", "drop tokens below min-p times the most likely one", "server: 0"},
      {"repetition-penalty", "penalty for tokens already seen, > 0", "server: 1.0"},
      {"seed", "the request's random seed", "server: 0"},
      {"stop", "stop string; repeat the flag for several: --stop a --stop b", ""},
      {"stop-token-ids", "token ids that end generation, comma-separated", ""},
      {"ignore-eos", "keep generating past end-of-sequence tokens", "", true},
  };
}

std::vector<base::FlagSpec> SequenceFlagSpecs() {
  return {
      {"num-beams", "beam search with this many beams (1: none; needs greedy decoding)",
       "server: 1"},
      {"num-return-sequences",
       "sequences to return: the best N beams, or N samples with --do-sample", "server: 1"},
      {"early-stopping", "beam search: when it ends, true, false or never", "server: false"},
      {"length-penalty",
       "beam search: a sequence's score is its log-probability / length^X (> 0 favours longer)",
       "server: 1.0"},
      {"logprobs", "return each generated token's log-probability", "", true},
      {"top-logprobs", "with --logprobs: also the K most likely tokens at each position, 0..20",
       "server: 0"},
  };
}

std::vector<base::FlagSpec> CacheStrategyFlagSpecs() {
  return {
      {"cache-implementation", "dynamic, static, offloaded, offloaded_static or quantized",
       "server: dynamic"},
      {"cache-config",
       "quantized cache config, JSON with keys backend, nbits, axis_key, axis_value, "
       "q_group_size, residual_length",
       ""},
      {"max-cache-len", "static caches: slots per layer", ""},
      {"offload-only-non-sliding",
       "offloaded caches: keep sliding-window and chunked layers on the device "
       "(=false: offload them too)",
       "server: false for offloaded, true for offloaded_static", true},
  };
}

absl::StatusOr<std::optional<v1::SamplingParams>> BuildSamplingParams(const ParsedFlags& flags) {
  if (!AnyGiven(flags, SamplingFlagSpecs()) && !AnyGiven(flags, SequenceFlagSpecs())) {
    return std::optional<v1::SamplingParams>();
  }
  v1::SamplingParams sampling;
  if (absl::Status s = SetSampling(flags, sampling); !s.ok()) return s;
  if (absl::Status s = SetSequences(flags, sampling); !s.ok()) return s;
  return std::optional<v1::SamplingParams>(std::move(sampling));
}

absl::StatusOr<std::optional<v1::CacheOptions>> BuildCacheOptions(const ParsedFlags& flags) {
  if (!AnyGiven(flags, CacheStrategyFlagSpecs()) &&
      !AnyGiven(flags, {NoCacheFlagSpec(), NoPrefixReuseFlagSpec()})) {
    return std::optional<v1::CacheOptions>();
  }
  v1::CacheOptions cache;
  if (absl::Status s = SetCache(flags, cache); !s.ok()) return s;
  return std::optional<v1::CacheOptions>(std::move(cache));
}

absl::StatusOr<std::string> TemplateKwargsFlag(const ParsedFlags& flags) {
  if (!flags.flags.Has("template-kwargs")) return std::string();
  const std::string text = flags.flags.GetString("template-kwargs");
  absl::StatusOr<Json> parsed = ParseJson(text, "--template-kwargs");
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError("--template-kwargs: expected a JSON object");
  }
  return text;
}

std::vector<base::FlagSpec> ConstraintFlagSpecs() {
  return {
      {"json-schema", "the output is JSON valid under the JSON Schema in this file (- reads stdin)",
       ""},
      {"json-object", "the output is a JSON object", "", true},
      {"regex", "the whole output matches this regular expression", ""},
      {"grammar", "the output matches the GBNF grammar (llama.cpp syntax) in this file", ""},
      {"choice", "the output is one of these strings; repeat the flag: --choice yes --choice no",
       ""},
      {"whitespace-bytes", "--json-schema, --json-object: most whitespace bytes between tokens",
       "server: 0 (compact)"},
  };
}

absl::StatusOr<std::optional<v1::Constraint>> BuildConstraint(const ParsedFlags& flags,
                                                              std::istream& in) {
  int given = 0;
  for (const char* name : {"json-schema", "regex", "grammar"}) given += flags.flags.Has(name);
  given += flags.GetSwitch("json-object").value_or(false);
  given += flags.repeated.contains("choice");
  if (given == 0) {
    if (flags.flags.Has("whitespace-bytes")) {
      return absl::InvalidArgumentError("--whitespace-bytes needs --json-schema or --json-object");
    }
    return std::optional<v1::Constraint>();
  }
  if (given > 1) {
    return absl::InvalidArgumentError(
        "give only one of --json-schema, --json-object, --regex, --grammar, --choice");
  }
  v1::Constraint c;
  if (flags.flags.Has("json-schema")) {
    absl::StatusOr<std::string> text =
        ReadTextInput("json-schema", flags.flags.GetString("json-schema"), in);
    if (!text.ok()) return text.status();
    if (absl::StatusOr<Json> parsed = ParseJson(*text, "--json-schema"); !parsed.ok()) {
      return parsed.status();
    }
    c.set_json_schema(*std::move(text));
  } else if (flags.flags.Has("grammar")) {
    absl::StatusOr<std::string> text =
        ReadTextInput("grammar", flags.flags.GetString("grammar"), in);
    if (!text.ok()) return text.status();
    c.set_grammar(*std::move(text));
  } else if (flags.flags.Has("regex")) {
    c.set_regex(flags.flags.GetString("regex"));
  } else if (auto it = flags.repeated.find("choice"); it != flags.repeated.end()) {
    for (const std::string& choice : it->second) c.mutable_choice()->add_choices(choice);
  } else {
    c.set_json_object(true);
  }
  if (absl::Status s = SetIfGiven(flags.GetInt32("whitespace-bytes"),
                                  [&](int32_t v) { c.set_whitespace_bytes(v); });
      !s.ok()) {
    return s;
  }
  return std::optional<v1::Constraint>(std::move(c));
}

std::vector<base::FlagSpec> GenerateFlagSpecs() {
  std::vector<base::FlagSpec> specs = {
      {"prompt", "input text (tokenized with the model's special tokens)", ""},
      {"prompt-file",
       "input text read from this file, as is (a final newline included); - reads stdin", ""},
      {"token-ids", "input token ids, comma-separated: 1,450,29", ""},
      {"messages", "input conversation, JSON: [{\"role\":\"user\",\"content\":\"Hi\"}]", ""},
      TemplateKwargsFlagSpec(),
      {"prefix", "name of a registered prefix that comes before the input", ""},
      {"session",
       "run as a turn of this session (kvctl session create): --messages is the whole "
       "conversation, --prompt or --token-ids are appended to its history",
       ""},
  };
  const std::vector<base::FlagSpec> sampling = SamplingFlagSpecs();
  const std::vector<base::FlagSpec> sequences = SequenceFlagSpecs();
  const std::vector<base::FlagSpec> strategy = CacheStrategyFlagSpecs();
  specs.insert(specs.end(), sampling.begin(), sampling.end());
  specs.insert(specs.end(), sequences.begin(), sequences.end());
  const std::vector<base::FlagSpec> constraints = ConstraintFlagSpecs();
  specs.insert(specs.end(), constraints.begin(), constraints.end());
  specs.push_back(NoCacheFlagSpec());
  specs.insert(specs.end(), strategy.begin(), strategy.end());
  specs.push_back(NoPrefixReuseFlagSpec());
  return specs;
}

std::vector<std::string> GenerateRepeatableFlags() { return {"stop", "choice"}; }

absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const ParsedFlags& flags,
                                                         std::istream& in) {
  v1::GenerateRequest request;
  if (absl::Status s = SetInput(flags, in, request); !s.ok()) return s;
  if (absl::Status s = CheckTemplateKwargsHasMessages(flags); !s.ok()) return s;
  absl::StatusOr<std::string> template_kwargs = TemplateKwargsFlag(flags);
  if (!template_kwargs.ok()) return template_kwargs.status();
  request.set_template_kwargs(*std::move(template_kwargs));
  if (flags.flags.Has("prefix")) request.set_prefix(flags.flags.GetString("prefix"));
  if (flags.flags.Has("session")) request.set_session(flags.flags.GetString("session"));
  absl::StatusOr<std::optional<v1::SamplingParams>> sampling = BuildSamplingParams(flags);
  if (!sampling.ok()) return sampling.status();
  if (sampling->has_value()) *request.mutable_sampling() = **std::move(sampling);
  absl::StatusOr<std::optional<v1::Constraint>> constraint = BuildConstraint(flags, in);
  if (!constraint.ok()) return constraint.status();
  if (constraint->has_value()) *request.mutable_constraint() = **std::move(constraint);
  absl::StatusOr<std::optional<v1::CacheOptions>> cache = BuildCacheOptions(flags);
  if (!cache.ok()) return cache.status();
  if (cache->has_value()) *request.mutable_cache() = **std::move(cache);
  return request;
}

absl::StatusOr<v1::ChatMessages> ParseChatMessages(const std::string& json,
                                                   const std::string& flag) {
  absl::StatusOr<Json> parsed = ParseJson(json, flag);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected a JSON array of {\"role\", \"content\"} objects"));
  }
  v1::ChatMessages messages;
  for (size_t i = 0; i < parsed->size(); ++i) {
    const Json& item = (*parsed)[i];
    const std::string where = absl::StrCat(flag, ": message ", i);
    if (!item.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
    }
    v1::ChatMessage* message = messages.add_messages();
    for (const auto& [key, value] : item.items()) {
      if (key != "role" && key != "content") {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": unknown key \"", key, "\" (expected role, content)"));
      }
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": \"", key, "\" must be a string"));
      }
      if (key == "role") {
        message->set_role(value.get<std::string>());
      } else {
        message->set_content(value.get<std::string>());
      }
    }
  }
  return messages;
}

absl::StatusOr<v1::QuantizationConfig> ParseCacheConfig(const std::string& json) {
  absl::StatusOr<Json> parsed = ParseJson(json, "--cache-config");
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError("--cache-config: expected a JSON object");
  }
  constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  v1::QuantizationConfig config;
  for (const auto& [key, value] : parsed->items()) {
    if (key == "backend") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError("--cache-config: \"backend\" must be a string");
      }
      config.set_backend(value.get<std::string>());
      continue;
    }
    const bool is_int32 = key == "nbits" || key == "axis_key" || key == "axis_value";
    const bool is_int64 = key == "q_group_size" || key == "residual_length";
    if (!is_int32 && !is_int64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cache-config: unknown key \"", key,
          "\" (expected backend, nbits, axis_key, axis_value, q_group_size, residual_length)"));
    }
    absl::StatusOr<int64_t> v = is_int32 ? JsonInteger(*parsed, key, kInt32Min, kInt32Max)
                                         : JsonInteger(*parsed, key, kInt64Min, kInt64Max);
    if (!v.ok()) return v.status();
    if (key == "nbits") config.set_nbits(static_cast<int32_t>(*v));
    if (key == "axis_key") config.set_axis_key(static_cast<int32_t>(*v));
    if (key == "axis_value") config.set_axis_value(static_cast<int32_t>(*v));
    if (key == "q_group_size") config.set_q_group_size(*v);
    if (key == "residual_length") config.set_residual_length(*v);
  }
  return config;
}

std::vector<base::FlagSpec> TokenizeFlagSpecs() {
  return {
      {"text", "text to tokenize", ""},
      {"messages", "conversation to render and tokenize, JSON (as for generate)", ""},
      TemplateKwargsFlagSpec(),
      {"no-special-tokens", "--text only: do not add BOS and other leading special tokens", "",
       true},
  };
}

absl::StatusOr<v1::TokenizeRequest> BuildTokenizeRequest(const ParsedFlags& flags) {
  const bool has_text = flags.flags.Has("text");
  const bool has_messages = flags.flags.Has("messages");
  if (has_text == has_messages) {
    return absl::InvalidArgumentError(has_text ? "give only one of --text, --messages"
                                               : "one of --text, --messages is required");
  }
  v1::TokenizeRequest request;
  if (has_text) {
    request.set_text(flags.flags.GetString("text"));
  } else {
    absl::StatusOr<v1::ChatMessages> messages =
        ParseChatMessages(flags.flags.GetString("messages"), "--messages");
    if (!messages.ok()) return messages.status();
    *request.mutable_messages() = *std::move(messages);
  }
  if (absl::Status s = CheckTemplateKwargsHasMessages(flags); !s.ok()) return s;
  absl::StatusOr<std::string> template_kwargs = TemplateKwargsFlag(flags);
  if (!template_kwargs.ok()) return template_kwargs.status();
  request.set_template_kwargs(*std::move(template_kwargs));
  if (std::optional<bool> no_special = flags.GetSwitch("no-special-tokens")) {
    request.set_add_special_tokens(!*no_special);
  }
  return request;
}

}  // namespace kvserve::client
