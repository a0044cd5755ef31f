// OpenAI response bodies: chat.completion and text_completion objects, their streamed chunks,
// usage (with prompt_tokens_details.cached_tokens, always) and log-probabilities.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/generation_request.h"
#include "server/http_api/openai_request.h"
#include "server/http_api/response_channel.h"

namespace kvserve::server::http_api {

// The text of one token id, as logprobs name it.
using TokenText = std::function<std::string(int32_t)>;

// What every object of one response shares.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string id;       // "chatcmpl-<request id>" or "cmpl-<request id>"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// One choice of a whole (not streamed) response, accumulated from its deltas.
struct Choice {
  std::string text;
  std::vector<model::PositionLogprobs> logprobs;
  std::optional<FinishReason> finish;
};

// "stop" (a stop string or an end-of-sequence token), "length", or "cancelled" (cut by a
// shutdown).
const char* FinishReasonText(FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}}.
nlohmann::json UsageJson(const GenerationSummary& summary);

// The response of a request that is not streamed. A choice without a finish reason of its own
// takes the summary's.
nlohmann::json ResponseBody(const ResponseHeader& header, const std::vector<Choice>& choices,
                            const GenerationSummary& summary, bool logprobs,
                            const TokenText& token_text);

// A streamed chunk with one choice's new text (and its log-probabilities when asked for); with
// `role`, the chat delta says role "assistant" (a choice's first chunk).
nlohmann::json DeltaChunk(const ResponseHeader& header, const SequenceDelta& delta, bool role,
                          bool logprobs, const TokenText& token_text);
// A streamed chunk that ends choice `index` with `reason` and carries no text.
nlohmann::json FinishChunk(const ResponseHeader& header, int index, FinishReason reason);
// The last chunk of stream_options.include_usage: no choices, the usage.
nlohmann::json UsageChunk(const ResponseHeader& header, const GenerationSummary& summary);

}  // namespace kvserve::server::http_api
