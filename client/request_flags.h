// kvctl's request flags: the flags of `generate`, `stream` and `tokenize` (and the sampling
// and cache-strategy flags `chat` and `session create` share), and their mapping onto
// kvserve.v1 requests (a proto optional field is set only when its flag is given).
#pragma once

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/command_line.h"
#include "client/flags.h"
#include "kvserve/v1/generation.pb.h"

namespace kvserve::client {

// The flags of `kvctl generate` and `kvctl stream`, one per GenerateRequest field.
std::vector<base::FlagSpec> GenerateFlagSpecs();
// Those of them that may be given several times (--stop).
std::vector<std::string> GenerateRepeatableFlags();

// Builds the request from flags parsed with GenerateFlagSpecs(). Exactly one of --prompt,
// --prompt-file (a file's text, or `in`'s with "-"), --token-ids, --messages is required;
// --template-kwargs only with --messages. `sampling` and `cache` stay unset when none of their
// flags is given, and so does each optional field. A malformed value (a prompt that is not
// UTF-8 included) or an unreadable file is InvalidArgument naming the flag; values are otherwise
// left for the server to validate.
absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const ParsedFlags& flags,
                                                         std::istream& in = std::cin);

// The sampling flags (--max-new-tokens ... --ignore-eos), as GenerateFlagSpecs() has them.
std::vector<base::FlagSpec> SamplingFlagSpecs();

// The flags of beam search, several sequences and log-probabilities (--num-beams,
// --num-return-sequences, --early-stopping, --length-penalty, --logprobs, --top-logprobs), as
// GenerateFlagSpecs() has them after the sampling flags. Only generate and stream take them.
std::vector<base::FlagSpec> SequenceFlagSpecs();

// SamplingParams from the flags of SamplingFlagSpecs() (and --stop as repeatable) and, where
// the command has them, SequenceFlagSpecs(); nullopt when none is given. --early-stopping
// true|false|never maps onto EARLY_STOPPING_TRUE|FALSE|NEVER; --top-logprobs is sent as given,
// with or without --logprobs. InvalidArgument naming the flag for a malformed value.
absl::StatusOr<std::optional<v1::SamplingParams>> BuildSamplingParams(const ParsedFlags& flags);

// The flags of a cache's strategy (--cache-implementation, --cache-config, --max-cache-len,
// --offload-only-non-sliding), as GenerateFlagSpecs() has them.
std::vector<base::FlagSpec> CacheStrategyFlagSpecs();

// --json-schema FILE, --json-object, --regex, --grammar FILE, --choice (repeated),
// --whitespace-bytes: the request's output constraint.
std::vector<base::FlagSpec> ConstraintFlagSpecs();
// The constraint the flags ask for (at most one kind), files read (- is `in`); nullopt: none.
absl::StatusOr<std::optional<v1::Constraint>> BuildConstraint(const ParsedFlags& flags,
                                                              std::istream& in);

// CacheOptions from the flags of CacheStrategyFlagSpecs() and, when `flags` has them,
// --no-cache and --no-prefix-reuse; nullopt when none is given. InvalidArgument naming the
// flag for a malformed value.
absl::StatusOr<std::optional<v1::CacheOptions>> BuildCacheOptions(const ParsedFlags& flags);

// The value of --template-kwargs when it is a JSON object, as given (the server keeps its keys'
// order); "" when the flag is not given. InvalidArgument naming --template-kwargs for malformed
// JSON or another JSON value.
absl::StatusOr<std::string> TemplateKwargsFlag(const ParsedFlags& flags);

// Parses a JSON array of {"role": ..., "content": ...} objects; InvalidArgument naming
// `flag` (e.g. "--messages") and what is wrong.
absl::StatusOr<v1::ChatMessages> ParseChatMessages(const std::string& json,
                                                   const std::string& flag);

// Sets `request`'s token ids from --token-ids, or else its messages from --messages (the
// caller has checked that exactly one input flag is given). Shared by the requests with these
// inputs (GenerateRequest, RegisterPrefixRequest). InvalidArgument naming the flag.
template <typename Request>
absl::Status SetTokenIdsOrMessages(const base::CommandLine& flags, Request& request) {
  if (flags.Has("token-ids")) {
    absl::StatusOr<std::vector<int32_t>> ids = flags.GetIntList("token-ids");
    if (!ids.ok()) return ids.status();
    request.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
    return absl::OkStatus();
  }
  absl::StatusOr<v1::ChatMessages> messages =
      ParseChatMessages(flags.GetString("messages"), "--messages");
  if (!messages.ok()) return messages.status();
  *request.mutable_messages() = *std::move(messages);
  return absl::OkStatus();
}

// Parses --cache-config: a JSON object with any of the keys backend (string), nbits, axis_key,
// axis_value, q_group_size, residual_length (integers); only keys present are set. An unknown
// key, a wrong type or malformed JSON is InvalidArgument naming --cache-config.
absl::StatusOr<v1::QuantizationConfig> ParseCacheConfig(const std::string& json);

// The flags of `kvctl tokenize`.
std::vector<base::FlagSpec> TokenizeFlagSpecs();

// Builds the request from flags parsed with TokenizeFlagSpecs(): exactly one of --text and
// --messages; --no-special-tokens sets add_special_tokens=false (unset otherwise);
// --template-kwargs only with --messages.
absl::StatusOr<v1::TokenizeRequest> BuildTokenizeRequest(const ParsedFlags& flags);

}  // namespace kvserve::client
