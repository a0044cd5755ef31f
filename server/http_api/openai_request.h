// OpenAiRequest: the body of POST /v1/chat/completions or /v1/completions read into the request
// builder's typed inputs (request_inputs.h), every field checked: a field kvserve cannot honour
// is refused naming it, never ignored.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/request_inputs.h"
#include "tokenizer/chat_template.h"

namespace kvserve::server::http_api {

enum class Endpoint { kChatCompletions, kCompletions };

// A `cache_control: {"type": "ephemeral", "ttl": "5m" | "1h"}` on a message's content part:
// the prompt up to the end of that part is registered as a prefix of the caller's tenant.
// kvserve also reads `"retention": "pinned" | "high" | "normal" | "low"` there: pinned (the
// default) keeps the prefix on the device for its TTL; a class lets the store demote it to
// the host and disk tiers in that class's order (see the README's Retention).
struct CacheBreakpoint {
  // The conversation up to the breakpoint (the last message cut after the marked part).
  std::vector<tokenizer::ChatMessage> messages;
  absl::Duration ttl = absl::Minutes(5);
  std::string retention;  // empty: pinned
  std::string param;      // "messages[i].content[j].cache_control", for errors
};

// At most this many breakpoints per request (Anthropic's limit).
inline constexpr int kMaxCacheBreakpoints = 4;

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;
  // The generation: the prompt (messages or text or token ids), sampling, and the kvserve
  // extension's prefix, session and cache.
  GenerationInput generation;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::vector<CacheBreakpoint> breakpoints;
  std::string prompt_cache_key;  // a routing hint (the gateway routes by x-kvserve-route)
  std::string user;
  // The names the request used, so that the builder's errors name them.
  std::string max_tokens_param = "max_tokens";
  // The parameter that carried the output constraint ("response_format.json_schema.schema",
  // "structured_outputs.regex", ...); empty: none.
  std::string constraint_param;
};

// Parses a JSON object into a request for `endpoint`. InvalidArgument whose field path
// (FieldPathOf) is the OpenAI parameter at fault ("temperature", "messages[1].content",
// "kvserve.prefix") for a missing, mistyped, out-of-range or unsupported field.
// `raw_body` (optional) is the body's text: a JSON schema is taken from it with its keys in the
// order sent (properties are generated in that order); without it, in sorted order.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(Endpoint endpoint, const nlohmann::json& body,
                                                 std::string_view raw_body = {});

// The request builder's error (its field path is kvserve's: "sampling.top_p") with the path and
// the message's leading path replaced by the OpenAI parameter ("top_p").
absl::Status ToOpenAiParam(const absl::Status& status, const OpenAiRequest& request);

}  // namespace kvserve::server::http_api
