// OpenAI request bodies to typed inputs: fields read, unsupported ones refused by name,
// cache_control breakpoints, and the builder's field paths renamed to OpenAI parameters.
#include "server/http_api/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/request_builder.h"

namespace kvserve::server::http_api {
namespace {

using nlohmann::json;

absl::StatusOr<OpenAiRequest> Chat(const std::string& text) {
  return ParseOpenAiRequest(Endpoint::kChatCompletions, json::parse(text));
}

absl::StatusOr<OpenAiRequest> Completion(const std::string& text) {
  return ParseOpenAiRequest(Endpoint::kCompletions, json::parse(text));
}

TEST(OpenAiRequestTest, ChatFieldsBecomeTypedInputs) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({
    "model": "m", "messages": [{"role": "developer", "content": "be brief"},
                               {"role": "user", "content": [{"type": "text", "text": "a"},
                                                            {"type": "text", "text": "b"}]}],
    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": "x",
    "n": 2, "logprobs": true, "top_logprobs": 3, "stream": true,
    "stream_options": {"include_usage": true}, "user": "u", "prompt_cache_key": "k",
    "kvserve": {"prefix": "p", "cache_implementation": "static"}, "tools": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  const GenerationInput& g = r->generation;
  ASSERT_EQ(g.input.kind, PromptInput::Kind::kMessages);
  ASSERT_EQ(g.input.messages.size(), 2u);
  EXPECT_EQ(g.input.messages[0].role, "system");
  EXPECT_EQ(g.input.messages[1].content, "a\nb");
  EXPECT_EQ(g.sampling.max_new_tokens, 7);
  EXPECT_EQ(g.sampling.do_sample, true);
  EXPECT_EQ(g.sampling.temperature, 0.5);
  EXPECT_EQ(g.sampling.top_p, 0.9);
  EXPECT_EQ(g.sampling.seed, 3u);
  EXPECT_EQ(g.sampling.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(g.sampling.num_return_sequences, 2);
  EXPECT_TRUE(g.sampling.logprobs);
  EXPECT_EQ(g.sampling.top_logprobs, 3);
  EXPECT_EQ(g.prefix, "p");
  ASSERT_TRUE(g.cache.has_value());
  EXPECT_EQ(g.cache->cache_implementation, "static");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(r->max_tokens_param, "max_completion_tokens");
  EXPECT_EQ(r->prompt_cache_key, "k");
}

TEST(OpenAiRequestTest, TemperatureZeroIsGreedy) {
  absl::StatusOr<OpenAiRequest> r =
      Chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generation.sampling.do_sample, false);
  EXPECT_FALSE(r->generation.sampling.temperature.has_value());
}

TEST(OpenAiRequestTest, UnsupportedAndBadFieldsNameTheParameter) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "frequency_penalty": 1})",
       "frequency_penalty"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 3})",
       "temperature"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})",
       "temperature"},
      {R"({"messages": [{"role": "user", "content": "hi"}]})", "model"},
      {R"({"model": "m", "messages": [{"role": "tool", "content": "hi"}]})", "messages[0].role"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi", "name": "x"}]})",
       "messages[0].name"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream_options": {}})",
       "stream_options"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})",
       "top_logprobs"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "kvserve": {"x": 1}})",
       "kvserve.x"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": -1})", "seed"},
  };
  for (const auto& [body, param] : cases) {
    absl::StatusOr<OpenAiRequest> r = Chat(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(FieldPathOf(r.status()), param) << body;
    EXPECT_TRUE(std::string(r.status().message()).starts_with(param)) << r.status();
  }
}

TEST(OpenAiRequestTest, CompletionPrompts) {
  absl::StatusOr<OpenAiRequest> text = Completion(R"({"model": "m", "prompt": ["hello"]})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->generation.input.kind, PromptInput::Kind::kText);
  EXPECT_EQ(text->generation.input.text, "hello");
  EXPECT_EQ(text->generation.sampling.max_new_tokens, 16);  // OpenAI's default
  absl::StatusOr<OpenAiRequest> ids =
      Completion(R"({"model": "m", "prompt": [1, 2, 3], "logprobs": 2})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->generation.input.token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(ids->generation.sampling.logprobs);
  EXPECT_EQ(ids->generation.sampling.top_logprobs, 2);
  absl::StatusOr<OpenAiRequest> two = Completion(R"({"model": "m", "prompt": ["a", "b"]})");
  EXPECT_EQ(FieldPathOf(two.status()), "prompt");
  absl::StatusOr<OpenAiRequest> echo = Completion(R"({"model": "m", "prompt": "a", "echo": true})");
  EXPECT_EQ(FieldPathOf(echo.status()), "echo");
}

TEST(OpenAiRequestTest, CacheControlBreakpoints) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({"model": "m", "messages": [
      {"role": "system", "content": [{"type": "text", "text": "S",
                                      "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
      {"role": "user", "content": [{"type": "text", "text": "a",
                                    "cache_control": {"type": "ephemeral"}},
                                   {"type": "text", "text": "b"}]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->breakpoints.size(), 2u);
  EXPECT_EQ(r->breakpoints[0].ttl, absl::Hours(1));
  ASSERT_EQ(r->breakpoints[0].messages.size(), 1u);
  EXPECT_EQ(r->breakpoints[0].messages[0].content, "S");
  EXPECT_EQ(r->breakpoints[1].ttl, absl::Minutes(5));
  ASSERT_EQ(r->breakpoints[1].messages.size(), 2u);
  EXPECT_EQ(r->breakpoints[1].messages[1].content, "a");  // cut after the marked part
  EXPECT_EQ(r->generation.input.messages[1].content, "a\nb");

  std::string five = R"({"model": "m", "messages": [{"role": "user", "content": [)";
  for (int i = 0; i < 5; ++i) {
    if (i > 0) five += ",";
    five += R"({"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}})";
  }
  five += "]}]}";
  EXPECT_EQ(FieldPathOf(Chat(five).status()), "messages[0].content[4].cache_control");
  EXPECT_EQ(FieldPathOf(Chat(R"({"model": "m", "messages": [{"role": "user", "content": [
      {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]}]})")
                            .status()),
            "messages[0].content[0].cache_control.ttl");
  // kvserve's retention class on a breakpoint: pinned unless it says a class.
  EXPECT_EQ(r->breakpoints[0].retention, "");
  absl::StatusOr<OpenAiRequest> low = Chat(R"({"model": "m", "messages": [{"role": "user",
      "content": [{"type": "text", "text": "x",
                   "cache_control": {"type": "ephemeral", "retention": "low"}}]}]})");
  ASSERT_TRUE(low.ok()) << low.status();
  EXPECT_EQ(low->breakpoints[0].retention, "low");
  absl::StatusOr<OpenAiRequest> bad = Chat(R"({"model": "m", "messages": [{"role": "user",
      "content": [{"type": "text", "text": "x",
                   "cache_control": {"type": "ephemeral", "retention": "forever"}}]}]})");
  EXPECT_EQ(FieldPathOf(bad.status()), "messages[0].content[0].cache_control.retention");
}

TEST(OpenAiRequestTest, BuilderErrorsNameOpenAiParameters) {
  absl::StatusOr<OpenAiRequest> chat =
      Chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9})");
  ASSERT_TRUE(chat.ok());
  const absl::Status renamed =
      ToOpenAiParam(FieldError("sampling.max_new_tokens", "must be <= 8"), *chat);
  EXPECT_EQ(FieldPathOf(renamed), "max_tokens");
  EXPECT_EQ(renamed.message(), "max_tokens: must be <= 8");
  EXPECT_EQ(FieldPathOf(ToOpenAiParam(FieldError("sampling.top_logprobs", "x"), *chat)),
            "top_logprobs");
  EXPECT_EQ(FieldPathOf(ToOpenAiParam(FieldError("prefix", "x"), *chat)), "kvserve.prefix");
  absl::StatusOr<OpenAiRequest> completion = Completion(R"({"model": "m", "prompt": "a"})");
  ASSERT_TRUE(completion.ok());
  EXPECT_EQ(FieldPathOf(ToOpenAiParam(FieldError("sampling.top_logprobs", "x"), *completion)),
            "logprobs");
  EXPECT_EQ(FieldPathOf(ToOpenAiParam(FieldError("prompt", "too long"), *completion)), "prompt");
}

}  // namespace
}  // namespace kvserve::server::http_api
