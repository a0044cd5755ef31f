// OpenAI response bodies and streamed chunks.
#include "server/http_api/openai_response.h"

namespace kvserve::server::http_api {
namespace {

using nlohmann::json;

bool Chat(const ResponseHeader& header) { return header.endpoint == Endpoint::kChatCompletions; }

json Bytes(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}. Completions:
// {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}, the offsets
// counted from `text_offset`.
json LogprobsJson(const ResponseHeader& header, const std::vector<model::PositionLogprobs>& lps,
                  const TokenText& token_text, int64_t text_offset) {
  if (Chat(header)) {
    json content = json::array();
    for (const model::PositionLogprobs& p : lps) {
      const std::string token = token_text(p.chosen.token_id);
      json top = json::array();
      for (const model::TokenLogprob& t : p.top) {
        const std::string alt = token_text(t.token_id);
        top.push_back({{"token", alt}, {"logprob", t.logprob}, {"bytes", Bytes(alt)}});
      }
      content.push_back({{"token", token},
                         {"logprob", p.chosen.logprob},
                         {"bytes", Bytes(token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const model::PositionLogprobs& p : lps) {
    const std::string token = token_text(p.chosen.token_id);
    tokens.push_back(token);
    token_logprobs.push_back(p.chosen.logprob);
    json alternatives = json::object();
    for (const model::TokenLogprob& t : p.top) alternatives[token_text(t.token_id)] = t.logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(token.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

json Envelope(const ResponseHeader& header, bool chunk) {
  json body;
  body["id"] = header.id;
  body["object"] =
      Chat(header) ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  body["created"] = header.created;
  body["model"] = header.model;
  body["system_fingerprint"] = nullptr;
  return body;
}

}  // namespace

const char* FinishReasonText(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
    case FinishReason::kEos:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "stop";
}

json UsageJson(const GenerationSummary& summary) {
  return {{"prompt_tokens", summary.prompt_tokens},
          {"completion_tokens", summary.completion_tokens},
          {"total_tokens", summary.prompt_tokens + summary.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", summary.cached_tokens}}},
          // kvserve's: completion tokens an output constraint forced (jump-forward).
          {"completion_tokens_details", {{"forced_tokens", summary.forced_tokens}}}};
}

json ResponseBody(const ResponseHeader& header, const std::vector<Choice>& choices,
                  const GenerationSummary& summary, bool logprobs, const TokenText& token_text) {
  json body = Envelope(header, /*chunk=*/false);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    json choice;
    choice["index"] = i;
    if (Chat(header)) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = logprobs ? LogprobsJson(header, c.logprobs, token_text, 0) : json(nullptr);
    choice["finish_reason"] = FinishReasonText(c.finish.value_or(summary.finish_reason));
    list.push_back(std::move(choice));
  }
  body["choices"] = std::move(list);
  body["usage"] = UsageJson(summary);
  return body;
}

json DeltaChunk(const ResponseHeader& header, const SequenceDelta& delta, bool role, bool logprobs,
                const TokenText& token_text) {
  json body = Envelope(header, /*chunk=*/true);
  json choice;
  choice["index"] = delta.index;
  if (Chat(header)) {
    json d = {{"content", delta.text}};
    if (role) d["role"] = "assistant";
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = delta.text;
  }
  choice["logprobs"] =
      logprobs ? LogprobsJson(header, delta.logprobs, token_text, 0) : json(nullptr);
  choice["finish_reason"] = nullptr;
  body["choices"] = json::array({std::move(choice)});
  return body;
}

json FinishChunk(const ResponseHeader& header, int index, FinishReason reason) {
  json body = Envelope(header, /*chunk=*/true);
  json choice;
  choice["index"] = index;
  if (Chat(header)) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = FinishReasonText(reason);
  body["choices"] = json::array({std::move(choice)});
  return body;
}

json UsageChunk(const ResponseHeader& header, const GenerationSummary& summary) {
  json body = Envelope(header, /*chunk=*/true);
  body["choices"] = json::array();
  body["usage"] = UsageJson(summary);
  return body;
}

}  // namespace kvserve::server::http_api
