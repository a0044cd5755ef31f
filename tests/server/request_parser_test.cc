// Tests of RequestParser: defaults, tokenization of each input kind, and one INVALID_ARGUMENT
// naming the field for every kind of malformed request.
#include "server/request_parser.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/layer_type.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class RequestParserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer = model::Tokenizer::FromJson(
        model::MakeTinyTokenizerJson(512), model::MakeTinyTokenizerConfigJson());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    info_.model_type = "llama";
    info_.vocab_size = 512;
    info_.num_layers = 2;
    info_.max_position_embeddings = 64;
    info_.head_dim = 16;
    info_.layer_specs.resize(2);
    limits_.max_new_tokens_limit = 32;
    parser_ = std::make_unique<RequestParser>(info_, tokenizer_.get(), limits_);
  }

  absl::StatusOr<GenerationRequest> Parse(const std::string& text) {
    v1::GenerateRequest request;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &request)) << text;
    return parser_->Parse(request);
  }

  std::unique_ptr<model::Tokenizer> tokenizer_;
  model::ModelInfo info_;
  RequestLimits limits_;
  std::unique_ptr<RequestParser> parser_;
};

TEST_F(RequestParserTest, UnsetFieldsTakeTheReferenceDefaults) {
  absl::StatusOr<GenerationRequest> r = Parse("token_ids { ids: [5, 6, 7] }");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->prompt_ids, ElementsAre(5, 6, 7));
  EXPECT_EQ(r->max_new_tokens, 16);
  EXPECT_FALSE(r->sampling.do_sample);
  EXPECT_EQ(r->sampling.temperature, 1.0);
  EXPECT_EQ(r->sampling.top_k, 50);
  EXPECT_EQ(r->sampling.top_p, 1.0);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.0);
  EXPECT_EQ(r->sampling.seed, 0u);
  EXPECT_FALSE(r->ignore_eos);
  EXPECT_TRUE(r->stop_strings.empty());
  EXPECT_EQ(r->cache_spec.implementation, cache::CacheImplementation::kDynamic);
  EXPECT_FALSE(r->skip_prefix_reuse);
}

TEST_F(RequestParserTest, SetFieldsAreKept) {
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(
    token_ids { ids: [ 1, 2 ] }
    sampling {
      max_new_tokens: 9
      do_sample: true
      temperature: 0.5
      top_k: 0
      top_p: 0.9
      min_p: 0.1
      repetition_penalty: 1.3
      seed: 42
      stop: "x"
      stop_token_ids: 3
      ignore_eos: true
    }
    cache { cache_implementation: "static" max_cache_len: 20 skip_prefix_reuse: true }
  )pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_new_tokens, 9);
  EXPECT_TRUE(r->sampling.do_sample);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.1);
  EXPECT_FLOAT_EQ(r->sampling.repetition_penalty, 1.3);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_THAT(r->stop_strings, ElementsAre("x"));
  EXPECT_THAT(r->stop_token_ids, ElementsAre(3));
  EXPECT_TRUE(r->ignore_eos);
  EXPECT_EQ(r->cache_spec.implementation, cache::CacheImplementation::kStatic);
  EXPECT_EQ(r->cache_spec.max_cache_len, 20);
  EXPECT_TRUE(r->skip_prefix_reuse);
}

TEST_F(RequestParserTest, StaticCacheIsSizedLikeTheReference) {
  // max(prompt + max_new_tokens - 1, max_cache_len)
  absl::StatusOr<GenerationRequest> r =
      Parse(R"pb(token_ids { ids: [ 1, 2, 3 ] }
                 sampling { max_new_tokens: 5 }
                 cache { cache_implementation: "offloaded_static" })pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cache_spec.max_cache_len, 7);
  EXPECT_TRUE(r->cache_spec.offload_only_non_sliding);
}

TEST_F(RequestParserTest, QuantizationConfigMapsFieldByField) {
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(
    token_ids { ids: [ 1 ] }
    cache {
      cache_implementation: "quantized"
      quantization { backend: "hqq" nbits: 8 axis_key: 1 q_group_size: 32 residual_length: 4 }
    })pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cache_spec.quantized.backend, cache::QuantizationBackend::kHqq);
  EXPECT_EQ(r->cache_spec.quantized.nbits, 8);
  EXPECT_EQ(r->cache_spec.quantized.axis_key, 1);
  EXPECT_EQ(r->cache_spec.quantized.axis_value, 0);
  EXPECT_EQ(r->cache_spec.quantized.q_group_size, 32);
  EXPECT_EQ(r->cache_spec.quantized.residual_length, 4);
}

TEST_F(RequestParserTest, PromptIsTokenizedWithBos) {
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(prompt: "hi")pb");
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::vector<int32_t>> expected = tokenizer_->Encode("hi", true);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(r->prompt_ids, *expected);
  EXPECT_EQ(r->prompt_ids.front(), model::kTinyBosId);
}

TEST_F(RequestParserTest, MessagesAreRenderedWithTheChatTemplate) {
  absl::StatusOr<GenerationRequest> r =
      Parse(R"pb(messages { messages { role: "user" content: "hello" } })pb");
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::string> text =
      tokenizer_->ApplyChatTemplate({{"user", "hello"}}, /*add_generation_prompt=*/true);
  ASSERT_TRUE(text.ok());
  absl::StatusOr<std::vector<int32_t>> expected = tokenizer_->Encode(*text, false);
  ASSERT_TRUE(expected.ok());
  EXPECT_THAT(r->prompt_ids, ElementsAreArray(*expected));
}

TEST_F(RequestParserTest, UnknownPrefixIsNotFound) {
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(prefix: "sys" prompt: "x")pb");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("'sys'"));
}

struct Malformed {
  std::string request;  // text-format GenerateRequest
  std::string field;    // what the message must start with
};

TEST_F(RequestParserTest, EveryMalformedFieldIsInvalidArgumentNamingIt) {
  const std::vector<Malformed> cases = {
      {"", "input"},
      {"token_ids {}", "token_ids.ids"},
      {"token_ids { ids: [1, 512] }", "token_ids.ids[1]"},
      {"token_ids { ids: -1 }", "token_ids.ids[0]"},
      {"prompt: \"\\xff\\xfe\"", "prompt"},
      {"messages {}", "messages.messages"},
      {"messages { messages { content: \"x\" } }", "messages.messages[0].role"},
      {"prefix: \"bad name!\" prompt: \"x\"", "prefix"},
      {"token_ids { ids: 1 } sampling { max_new_tokens: 0 }", "sampling.max_new_tokens"},
      {"token_ids { ids: 1 } sampling { max_new_tokens: -3 }", "sampling.max_new_tokens"},
      {"token_ids { ids: 1 } sampling { max_new_tokens: 33 }", "sampling.max_new_tokens"},
      {"token_ids { ids: 1 } sampling { temperature: 0 }", "sampling.temperature"},
      {"token_ids { ids: 1 } sampling { do_sample: true temperature: -1 }", "sampling.temperature"},
      {"token_ids { ids: 1 } sampling { temperature: nan }", "sampling.temperature"},
      {"token_ids { ids: 1 } sampling { top_k: -1 }", "sampling.top_k"},
      {"token_ids { ids: 1 } sampling { top_p: 0 }", "sampling.top_p"},
      {"token_ids { ids: 1 } sampling { top_p: 1.5 }", "sampling.top_p"},
      {"token_ids { ids: 1 } sampling { min_p: -0.1 }", "sampling.min_p"},
      {"token_ids { ids: 1 } sampling { min_p: 2 }", "sampling.min_p"},
      {"token_ids { ids: 1 } sampling { repetition_penalty: 0 }", "sampling.repetition_penalty"},
      {"token_ids { ids: 1 } sampling { stop: \"\" }", "sampling.stop[0]"},
      {"token_ids { ids: 1 } sampling { stop: \"a\" stop: \"\" }", "sampling.stop[1]"},
      {"token_ids { ids: 1 } sampling { stop_token_ids: 9999 }", "sampling.stop_token_ids[0]"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"paged\" }",
       "cache.cache_implementation"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"Dynamic\" }",
       "cache.cache_implementation"},
      {"token_ids { ids: 1 } cache { quantization { nbits: 4 } }", "cache.quantization"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"quantized\" "
       "quantization { backend: \"quanto\" nbits: 3 } }",
       "cache.quantization.nbits"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"quantized\" "
       "quantization { backend: \"fp8\" q_group_size: 32 } }",
       "cache.quantization.q_group_size"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"quantized\" "
       "quantization { backend: \"nf4\" } }",
       "cache.quantization.backend"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"static\" max_cache_len: 0 }",
       "cache.max_cache_len"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"quantized\" "
       "quantization { q_group_size: 3 } }",
       "cache.quantization.q_group_size"},
      {"token_ids { ids: 1 } cache { use_cache: false cache_implementation: \"static\" }",
       "cache.cache_implementation"},
      {"token_ids { ids: 1 } cache { use_cache: false max_cache_len: 8 }", "cache.max_cache_len"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"dynamic\" max_cache_len: 8 }",
       "cache.max_cache_len"},
      {"token_ids { ids: 1 } cache { max_cache_len: 8 }", "cache.max_cache_len"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"static\" max_cache_len: 100000 }",
       "cache.max_cache_len"},
      {"token_ids { ids: 1 } cache { cache_implementation: \"dynamic\" "
       "offload_only_non_sliding: true }",
       "cache.offload_only_non_sliding"},
  };
  int checked = 0;
  for (const Malformed& c : cases) {
    if (c.field.empty()) continue;  // built below
    absl::StatusOr<GenerationRequest> r = Parse(c.request);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.request;
    EXPECT_THAT(std::string(r.status().message()), StartsWith(c.field + ":")) << c.request;
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

TEST_F(RequestParserTest, PromptPlusMaxNewTokensBeyondTheContextIsRefused) {
  v1::GenerateRequest request;
  for (int i = 0; i < 60; ++i) request.mutable_token_ids()->add_ids(1);
  request.mutable_sampling()->set_max_new_tokens(5);
  absl::StatusOr<GenerationRequest> r = parser_->Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("sampling.max_new_tokens:"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("context of 64"));
  request.mutable_sampling()->set_max_new_tokens(4);
  EXPECT_TRUE(parser_->Parse(request).ok());
}

TEST_F(RequestParserTest, TokenizeTextAndMessages) {
  v1::TokenizeRequest request;
  request.set_text("hi");
  absl::StatusOr<v1::TokenizeResponse> r = parser_->Tokenize(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token_ids(0), model::kTinyBosId);
  EXPECT_EQ(r->tokens(0), "<s>");
  EXPECT_EQ(r->token_ids_size(), r->tokens_size());
  request.set_add_special_tokens(false);
  r = parser_->Tokenize(request);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->token_ids(0), model::kTinyBosId);
  EXPECT_EQ(parser_->Tokenize(v1::TokenizeRequest()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RequestParserTest, CacheErrorsStartWithTheParameterPathAndSayWhy) {
  absl::StatusOr<GenerationRequest> r = Parse(
      "token_ids { ids: 1 } cache { cache_implementation: \"quantized\" "
      "quantization { q_group_size: 3 } }");
  EXPECT_EQ(r.status().message(),
            "cache.quantization.q_group_size: 3 does not divide head_dim 16; allowed for "
            "per-token grouping: a divisor of head_dim, or >= head_dim");
  r = Parse("token_ids { ids: 1 } cache { use_cache: false cache_implementation: \"static\" }");
  EXPECT_EQ(r.status().message(),
            "cache.cache_implementation: cannot be used with use_cache false (no cache is kept)");
  r = Parse("token_ids { ids: 1 } cache { max_cache_len: 8 }");
  EXPECT_EQ(r.status().message(),
            "cache.max_cache_len: applies only to the static and offloaded_static caches, not "
            "'dynamic'");
  // use_cache false alone, and a group that divides head_dim, are fine.
  EXPECT_TRUE(Parse("token_ids { ids: 1 } cache { use_cache: false }").ok());
  EXPECT_TRUE(Parse("token_ids { ids: 1 } cache { cache_implementation: \"quantized\" "
                    "quantization { q_group_size: 8 } }")
                  .ok());
}

TEST_F(RequestParserTest, AQuantizedCacheOnAModelWithSlidingLayersIsRefusedAtValidation) {
  info_.layer_specs[1] = {cache::LayerType::kSlidingAttention, 8};
  RequestParser parser(info_, tokenizer_.get(), limits_);
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(1);
  request.mutable_cache()->set_cache_implementation("quantized");
  absl::StatusOr<GenerationRequest> r = parser.Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              StartsWith("cache.cache_implementation: 'quantized' supports only full_attention "
                         "layers; layer 1 is sliding_attention"));
}

TEST_F(RequestParserTest, InputTextIsBoundedByWhatTheContextCanHold) {
  // 64 tokens of context: the bound is 64 x the longest token string (at least 16 bytes) x 4.
  const int64_t bound = parser_->max_input_bytes();
  EXPECT_GE(bound, 64 * 16 * 4);
  EXPECT_LE(bound, 64 * 64 * 4);
  v1::GenerateRequest request;
  request.set_prompt(std::string(static_cast<size_t>(bound) + 1, 'a'));
  absl::StatusOr<GenerationRequest> r = parser_->Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("prompt: ", bound + 1, " bytes is more than the ", bound,
                         " bytes that any input fitting the model's context of 64 tokens can "
                         "have"));
  v1::TokenizeRequest tokenize;
  tokenize.set_text(std::string(static_cast<size_t>(bound) + 1, 'a'));
  EXPECT_THAT(std::string(parser_->Tokenize(tokenize).status().message()), StartsWith("text: "));
  v1::GenerateRequest chat;
  v1::ChatMessage* message = chat.mutable_messages()->add_messages();
  message->set_role("user");
  message->set_content(std::string(static_cast<size_t>(bound), 'a'));
  EXPECT_THAT(std::string(parser_->Parse(chat).status().message()),
              StartsWith("messages.messages: more than the "));
}

TEST_F(RequestParserTest, ACancelledOrExpiredCallStopsTheChatTemplate) {
  v1::GenerateRequest chat;
  v1::ChatMessage* message = chat.mutable_messages()->add_messages();
  message->set_role("user");
  message->set_content("hi");
  ASSERT_TRUE(parser_->Parse(chat).ok());
  EXPECT_EQ(parser_->Parse(chat, {.cancelled = [] { return true; }}).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(parser_->Parse(chat, {.deadline = absl::InfinitePast()}).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(RequestParserTest, WithoutATokenizerOnlyTokenIdsAreAccepted) {
  RequestParser parser(info_, nullptr, limits_);
  v1::GenerateRequest request;
  request.set_prompt("hi");
  absl::StatusOr<GenerationRequest> r = parser.Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("prompt:"));
  request.mutable_token_ids()->add_ids(4);
  EXPECT_TRUE(parser.Parse(request).ok());
}

}  // namespace
}  // namespace kvserve::server
