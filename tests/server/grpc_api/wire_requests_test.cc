// Tests of kvserve.v1 requests read by the gRPC adapter (ToInput) and built by the
// RequestBuilder: defaults (generation_config.json's included), tokenization of each input
// kind, template kwargs, session turns and options, and one INVALID_ARGUMENT naming the field
// for every kind of malformed request. (The builder's own tests, on typed inputs without any
// wire type, are tests/server/request_builder_test.cc.)
#include "server/grpc_api/proto_inputs.h"
#include "server/request_builder.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "cache/kv_cache.h"
#include "cache/layer_type.h"
#include "cache/snapshot.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server::grpc_api {
namespace {

// What a call knows of itself, as the gRPC services fill BuildContext.
struct ParseContext {
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled;
  std::string tenant = kDefaultTenant;
};

// The wire requests through the adapter's ToInput and the builder, as the services call them.
class RequestParser {
 public:
  RequestParser(const model::ModelInfo& info, const tokenizer::Tokenizer* tokenizer,
                RequestLimits limits, CatalogSource catalog = nullptr,
                SessionSource sessions = nullptr)
      : builder_(info, tokenizer, limits, std::move(catalog), std::move(sessions)) {}

  absl::StatusOr<GenerationRequest> Parse(const v1::GenerateRequest& request,
                                          const ParseContext& context = {}) const {
    return builder_.Generation(ToInput(request), Context(context));
  }
  // The registration's name as the client sent it (the builder qualifies it for the caller).
  absl::StatusOr<PrefixRegistration> ParseRegisterPrefix(
      const v1::RegisterPrefixRequest& request) const {
    absl::StatusOr<PrefixRegistration> built = builder_.Registration(ToInput(request));
    if (built.ok()) built->name = std::string(cache::SplitQualifiedPrefixName(built->name).second);
    return built;
  }
  absl::StatusOr<cache::SessionOptions> ParseSessionOptions(const v1::SessionOptions& options,
                                                            const std::string& tenant) const {
    return builder_.Session(ToInput(options), Context({.tenant = tenant}));
  }
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                                const ParseContext& context = {}) const {
    absl::StatusOr<TokenizeResult> result = builder_.Tokenize(ToInput(request), Context(context));
    if (!result.ok()) return result.status();
    return ToProto(*result);
  }
  std::optional<ResolvedPrefix> ResolvePrefix(const std::string& tenant,
                                              const std::string& name) const {
    return builder_.ResolvePrefix(tenant, name);
  }
  int64_t max_input_bytes() const { return builder_.max_input_bytes(); }

 private:
  static BuildContext Context(const ParseContext& context) {
    return {.deadline = context.deadline,
            .cancelled = context.cancelled,
            .caller = {.tenant = context.tenant, .role = Role::kAdmin}};
  }
  RequestBuilder builder_;
};

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class RequestParserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tokenizer =
        tokenizer::Tokenizer::FromJson(tokenizer::MakeTinyTokenizerJson(512),
                                       tokenizer::MakeTinyTokenizerConfigJson());
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

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
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

// Beams, several samples and log-probabilities map to the request; early_stopping's enum
// to Transformers' three values; a vocabulary too small for the beams' candidates is refused
// by num_beams.
TEST_F(RequestParserTest, BeamsSequencesAndLogprobsMapFieldByField) {
  absl::StatusOr<GenerationRequest> r = Parse(
      "token_ids { ids: 1 } sampling { num_beams: 8 num_return_sequences: 3 "
      "early_stopping: EARLY_STOPPING_NEVER length_penalty: 0.5 logprobs: true "
      "top_logprobs: 4 num_beam_groups: 1 }");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_beams, 8);
  EXPECT_EQ(r->num_return_sequences, 3);
  EXPECT_EQ(r->early_stopping, model::EarlyStopping::kNever);
  EXPECT_DOUBLE_EQ(r->length_penalty, 0.5);
  EXPECT_EQ(r->top_logprobs, 4);
  r = Parse("token_ids { ids: 1 } sampling { num_beams: 2 early_stopping: EARLY_STOPPING_TRUE }");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->early_stopping, model::EarlyStopping::kTrue);
  EXPECT_EQ(r->num_return_sequences, 1);
  EXPECT_DOUBLE_EQ(r->length_penalty, 1.0);
  EXPECT_EQ(r->top_logprobs, -1);
  r = Parse(
      "token_ids { ids: 1 } sampling { do_sample: true num_return_sequences: 5 logprobs: "
      "true }");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_beams, 1);
  EXPECT_EQ(r->num_return_sequences, 5);
  EXPECT_EQ(r->top_logprobs, 0);
  // 512 ids: 2 candidates per beam for 256 beams at most; the limit of 64 comes first.
  limits_.max_sequences_per_request = 300;
  parser_ = std::make_unique<RequestParser>(info_, tokenizer_.get(), limits_);
  r = Parse("token_ids { ids: 1 } sampling { num_beams: 257 }");
  EXPECT_THAT(std::string(r.status().message()),
              StartsWith("sampling.num_beams: 257 beams need 514"));
  EXPECT_TRUE(Parse("token_ids { ids: 1 } sampling { num_beams: 256 }").ok());
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
  EXPECT_EQ(r->prompt_ids.front(), tokenizer::kTinyBosId);
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
      {"token_ids { ids: 1 } sampling { temperature: -0.5 }", "sampling.temperature"},
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
      {"token_ids { ids: 1 } sampling { num_beams: 0 }", "sampling.num_beams"},
      {"token_ids { ids: 1 } sampling { num_beams: 65 }", "sampling.num_beams"},
      {"token_ids { ids: 1 } sampling { num_beams: 2 num_return_sequences: 3 }",
       "sampling.num_return_sequences"},
      {"token_ids { ids: 1 } sampling { num_return_sequences: 0 }",
       "sampling.num_return_sequences"},
      {"token_ids { ids: 1 } sampling { num_return_sequences: 2 }",
       "sampling.num_return_sequences"},
      {"token_ids { ids: 1 } sampling { num_beams: 2 do_sample: true }", "sampling.do_sample"},
      {"token_ids { ids: 1 } sampling { num_beams: 2 stop: \"x\" }", "sampling.stop"},
      {"token_ids { ids: 1 } sampling { num_beam_groups: 2 }", "sampling.num_beam_groups"},
      {"token_ids { ids: 1 } sampling { length_penalty: inf }", "sampling.length_penalty"},
      {"token_ids { ids: 1 } sampling { logprobs: true top_logprobs: 21 }",
       "sampling.top_logprobs"},
      {"token_ids { ids: 1 } sampling { logprobs: true top_logprobs: -1 }",
       "sampling.top_logprobs"},
      {"token_ids { ids: 1 } sampling { top_logprobs: 2 }", "sampling.top_logprobs"},
      {"token_ids { ids: 1 } sampling { num_beams: 4 } cache { use_cache: false }",
       "cache.use_cache"},
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
  EXPECT_EQ(r->token_ids(0), tokenizer::kTinyBosId);
  EXPECT_EQ(r->tokens(0), "<s>");
  EXPECT_EQ(r->token_ids_size(), r->tokens_size());
  request.set_add_special_tokens(false);
  r = parser_->Tokenize(request);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->token_ids(0), tokenizer::kTinyBosId);
  EXPECT_EQ(parser_->Tokenize(v1::TokenizeRequest()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RequestParserTest, CacheErrorsStartWithTheParameterPathAndSayWhy) {
  absl::StatusOr<GenerationRequest> r = Parse(
      "token_ids { ids: 1 } cache { cache_implementation: \"quantized\" "
      "quantization { q_group_size: 3 } }");
  EXPECT_EQ(r.status().message(),
            "cache.quantization.q_group_size: 3 does not divide head_dim 16; allowed for "
            "per-token grouping: a divisor of head_dim, or >= head_dim (model_type llama)");
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
  info_.model_type = "gemma2";
  RequestParser parser(info_, tokenizer_.get(), limits_);
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(1);
  request.mutable_cache()->set_cache_implementation("quantized");
  absl::StatusOr<GenerationRequest> r = parser.Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              StartsWith("cache.cache_implementation: 'quantized' supports only full_attention "
                         "layers; layer 1 is sliding_attention"));
  // The refusal names the model's family as well as the strategy.
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("(model_type gemma2)"));
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

TEST_F(RequestParserTest, GenerationConfigSuppliesTheDefaultsOfUnsetFields) {
  info_.generation.do_sample = true;
  info_.generation.temperature = 0.6;
  info_.generation.top_k = 20;
  info_.generation.top_p = 0.95;
  info_.generation.min_p = 0.05;
  info_.generation.repetition_penalty = 1.1;
  info_.generation.max_new_tokens = 24;
  RequestParser parser(info_, tokenizer_.get(), limits_);
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(5);
  absl::StatusOr<GenerationRequest> r = parser.Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_new_tokens, 24);
  EXPECT_TRUE(r->sampling.do_sample);
  EXPECT_EQ(r->sampling.temperature, 0.6);
  EXPECT_EQ(r->sampling.top_k, 20);
  EXPECT_EQ(r->sampling.top_p, 0.95);
  EXPECT_EQ(r->sampling.min_p, 0.05);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.1);

  // Fields the request sets win over the model's defaults.
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(max_new_tokens: 3
           do_sample: false
           temperature: 0.9
           top_k: 5
           top_p: 0.5
           min_p: 0
           repetition_penalty: 1)pb",
      request.mutable_sampling()));
  r = parser.Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_new_tokens, 3);
  EXPECT_FALSE(r->sampling.do_sample);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.9);
  EXPECT_EQ(r->sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.5);
  EXPECT_EQ(r->sampling.min_p, 0.0);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.0);
}

TEST_F(RequestParserTest, GenerationConfigMaxNewTokensIsCappedByTheServerLimit) {
  info_.generation.max_new_tokens = 100;  // above --max-new-tokens-limit 32
  RequestParser parser(info_, tokenizer_.get(), limits_);
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(5);
  absl::StatusOr<GenerationRequest> r = parser.Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_new_tokens, 32);
}

TEST_F(RequestParserTest, GenerationConfigTemperatureZeroIsGreedyUnlessTheRequestSetsOne) {
  info_.generation.do_sample = true;
  info_.generation.temperature = 0;
  RequestParser parser(info_, tokenizer_.get(), limits_);
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(5);
  absl::StatusOr<GenerationRequest> r = parser.Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sampling.do_sample);
  EXPECT_EQ(r->sampling.temperature, 1.0);  // 0 is never a sampling temperature
  // Asking to sample without a temperature of its own is still the model's greedy default.
  request.mutable_sampling()->set_do_sample(true);
  r = parser.Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sampling.do_sample);
  // A temperature of the request's own samples, as the model's do_sample says.
  request.mutable_sampling()->clear_do_sample();
  request.mutable_sampling()->set_temperature(0.8);
  r = parser.Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sampling.do_sample);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.8);
}

TEST_F(RequestParserTest, RequestTemperatureZeroIsGreedyAndNegativeIsRefused) {
  absl::StatusOr<GenerationRequest> r =
      Parse("token_ids { ids: 1 } sampling { do_sample: true temperature: 0 }");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sampling.do_sample);
  EXPECT_EQ(r->sampling.temperature, 1.0);
  // Also over a model whose generation_config.json samples by default.
  info_.generation.do_sample = true;
  info_.generation.temperature = 0.7;
  RequestParser parser(info_, tokenizer_.get(), limits_);
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(1);
  request.mutable_sampling()->set_temperature(0);
  r = parser.Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sampling.do_sample);

  r = Parse("token_ids { ids: 1 } sampling { temperature: -1 }");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "sampling.temperature: must be >= 0 (got -1)");
  r = Parse("token_ids { ids: 1 } sampling { do_sample: false temperature: -0.25 }");
  EXPECT_EQ(r.status().message(), "sampling.temperature: must be >= 0 (got -0.25)");
}

// A parser over the tiny tokenizer whose chat template prints `greeting` when it is defined.
class TemplateKwargsTest : public RequestParserTest {
 protected:
  void SetUp() override {
    RequestParserTest::SetUp();
    parser_.reset();  // it reads the tokenizer replaced below
    nlohmann::json config = nlohmann::json::parse(tokenizer::MakeTinyTokenizerConfigJson());
    config["chat_template"] =
        "{{ bos_token }}{% if greeting is defined %}{{ greeting }}{% endif %}"
        "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + "
        "eos_token }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}";
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tokenizer =
        tokenizer::Tokenizer::FromJson(tokenizer::MakeTinyTokenizerJson(512), config.dump());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    parser_ = std::make_unique<RequestParser>(info_, tokenizer_.get(), limits_);
  }

  // What the chat {user: hello} is, rendered with `kwargs` and tokenized.
  std::vector<int32_t> Expected(const std::string& kwargs) {
    absl::StatusOr<std::string> text = tokenizer_->ApplyChatTemplate(
        {{"user", "hello"}}, /*add_generation_prompt=*/true, tokenizer::RenderBudget(), kwargs);
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) return {};
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(*text, false);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>();
  }
};

TEST_F(TemplateKwargsTest, KwargsReachTheChatTemplateOfGenerateAndTokenize) {
  const std::string kwargs = R"({"greeting": "Good morning! "})";
  ASSERT_NE(Expected(kwargs), Expected(""));
  v1::GenerateRequest request;
  v1::ChatMessage* message = request.mutable_messages()->add_messages();
  message->set_role("user");
  message->set_content("hello");
  absl::StatusOr<GenerationRequest> r = parser_->Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_ids, Expected(""));
  request.set_template_kwargs(kwargs);
  r = parser_->Parse(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_ids, Expected(kwargs));

  v1::TokenizeRequest tokenize;
  *tokenize.mutable_messages() = request.messages();
  tokenize.set_template_kwargs(kwargs);
  absl::StatusOr<v1::TokenizeResponse> t = parser_->Tokenize(tokenize);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->token_ids(), ElementsAreArray(Expected(kwargs)));
}

TEST_F(TemplateKwargsTest, KwargsApplyOnlyToMessagesInput) {
  for (const char* text :
       {R"pb(prompt: "hi" template_kwargs: "{}")pb", R"pb(token_ids { ids: 1 }
                                                          template_kwargs: "{\"a\": 1}")pb"}) {
    absl::StatusOr<GenerationRequest> r = Parse(text);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(r.status().message(), "template_kwargs: applies only to messages input") << text;
  }
  v1::TokenizeRequest tokenize;
  tokenize.set_text("hi");
  tokenize.set_template_kwargs("{}");
  absl::StatusOr<v1::TokenizeResponse> t = parser_->Tokenize(tokenize);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(), "template_kwargs: applies only to messages input");
}

TEST_F(TemplateKwargsTest, MalformedKwargsNameTheirOwnField) {
  v1::GenerateRequest request;
  v1::ChatMessage* message = request.mutable_messages()->add_messages();
  message->set_role("user");
  message->set_content("hello");
  request.set_template_kwargs("{\"greeting\": ");
  absl::StatusOr<GenerationRequest> r = parser_->Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("template_kwargs: not valid JSON"));
  request.set_template_kwargs("[1, 2]");
  r = parser_->Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "template_kwargs: must be a JSON object");
  request.set_template_kwargs(R"({"messages": []})");
  r = parser_->Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "template_kwargs.messages: is set by the request, not by template_kwargs");

  v1::TokenizeRequest tokenize;
  *tokenize.mutable_messages() = request.messages();
  tokenize.set_template_kwargs("[1, 2]");
  EXPECT_EQ(parser_->Tokenize(tokenize).status().message(),
            "template_kwargs: must be a JSON object");
}

TEST_F(TemplateKwargsTest, KwargsCountAgainstTheInputBound) {
  const int64_t bound = parser_->max_input_bytes();
  // {"k":"aaa..."}: 8 bytes around the a's.
  auto kwargs_of_size = [](int64_t bytes) {
    return "{\"k\":\"" + std::string(static_cast<size_t>(bytes - 8), 'a') + "\"}";
  };
  v1::GenerateRequest request;
  v1::ChatMessage* message = request.mutable_messages()->add_messages();
  message->set_role("user");
  message->set_content("x");
  request.set_template_kwargs(kwargs_of_size(bound + 1));
  absl::StatusOr<GenerationRequest> r = parser_->Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("template_kwargs: more than the ", bound,
                         " bytes that any input fitting the model's context can have"));
  v1::TokenizeRequest tokenize;
  *tokenize.mutable_messages() = request.messages();
  tokenize.set_template_kwargs(request.template_kwargs());
  EXPECT_THAT(std::string(parser_->Tokenize(tokenize).status().message()),
              StartsWith("template_kwargs: more than the "));

  // Within the bound alone, but not with the 5 bytes of the message ("user", "x").
  request.set_template_kwargs(kwargs_of_size(bound - 4));
  r = parser_->Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("messages.messages: more than the ", bound,
                         " bytes that any input fitting the model's context of 64 tokens can "
                         "have"));
  // One byte less fits (the template does not print `k`).
  request.set_template_kwargs(kwargs_of_size(bound - 5));
  r = parser_->Parse(request);
  EXPECT_TRUE(r.ok()) << r.status();
}

// A one-layer snapshot of `tokens` (the parser reads only its token ids).
std::shared_ptr<const cache::Snapshot> MakeSnapshot(const std::vector<int32_t>& tokens) {
  absl::StatusOr<std::unique_ptr<cache::KvCache>> cache =
      cache::KvCache::CreateDynamic({cache::LayerSpec{}});
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return nullptr;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const at::Tensor k = at::ones({1, 1, n, 2});
  EXPECT_TRUE((*cache)->Update(0, k, -k).ok());
  absl::StatusOr<std::shared_ptr<const cache::Snapshot>> s =
      cache::Snapshot::Capture(**cache, tokens, "test-model");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : nullptr;
}

// A parser with open sessions (by id) and a catalog of named prefixes, both edited by the test.
class SessionParserTest : public RequestParserTest {
 protected:
  void SetUp() override {
    RequestParserTest::SetUp();
    parser_ = std::make_unique<RequestParser>(
        info_, tokenizer_.get(), limits_,
        [this] {
          auto catalog = std::make_shared<cache::PrefixCatalog>();
          for (const auto& [name, snapshot] : prefixes_) {
            (*catalog)[name].info.name = name;
            (*catalog)[name].snapshot = snapshot;
          }
          return std::shared_ptr<const cache::PrefixCatalog>(std::move(catalog));
        },
        [this](const std::string& id) -> std::shared_ptr<const cache::SessionOptions> {
          auto it = sessions_.find(id);
          return it == sessions_.end() ? nullptr : it->second;
        });
  }

  // Opens session `id` with `options`.
  // A session of the default tenant (the parser's callers').
  void Open(const std::string& id, cache::SessionOptions options) {
    if (options.tenant.empty()) options.tenant = "default";
    sessions_[id] = std::make_shared<const cache::SessionOptions>(std::move(options));
  }

  absl::StatusOr<cache::SessionOptions> ParseOptions(const std::string& text) {
    v1::SessionOptions options;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &options)) << text;
    return parser_->ParseSessionOptions(options, "default");
  }

  std::map<std::string, std::shared_ptr<const cache::SessionOptions>> sessions_;
  std::map<std::string, std::shared_ptr<const cache::Snapshot>> prefixes_;
};

TEST_F(SessionParserTest, ATurnOnASessionThatIsNotOpenIsNotFound) {
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(session: "abc" prompt: "hi")pb");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "session: no open session 'abc' (closed, expired or never created)");
  // A long id is cut in the message.
  const std::string long_id(100, 'f');
  r = Parse(absl::StrCat("session: \"", long_id, "\" prompt: \"hi\""));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("session: no open session '", std::string(64, 'f'),
                         "... (100 bytes)' (closed, expired or never created)"));
  // Without a session source no session is open.
  RequestParser no_sessions(info_, tokenizer_.get(), limits_);
  Open("abc", {});
  v1::GenerateRequest request;
  request.set_session("abc");
  request.mutable_token_ids()->add_ids(1);
  EXPECT_EQ(no_sessions.Parse(request).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(parser_->Parse(request).ok());
}

TEST_F(SessionParserTest, ATurnUsesItsSessionsCacheAndPrefix) {
  Open("plain", {});
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(session: "plain"
                                                   token_ids { ids: 1 }
                                                   cache { cache_implementation: "static" })pb");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "cache: a session turn uses its session's cache; leave cache unset");
  r = Parse(R"pb(session: "plain"
                 token_ids { ids: 1 }
                 cache {})pb");
  EXPECT_EQ(r.status().message(),
            "cache: a session turn uses its session's cache; leave cache unset");
  r = Parse(R"pb(session: "plain"
                 prefix: "sys"
                 token_ids { ids: 1 })pb");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "prefix: the session starts with no prefix");

  cache::SessionOptions with_prefix;
  with_prefix.prefix_name = "sys";
  with_prefix.prefix_tokens = {100, 101, 102};
  Open("sys-session", with_prefix);
  r = Parse(R"pb(session: "sys-session"
                 prefix: "other"
                 token_ids { ids: 1 })pb");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "prefix: the session starts with prefix 'sys'; leave prefix unset");
  // Naming the session's own prefix is allowed.
  r = Parse(R"pb(session: "sys-session"
                 prefix: "sys"
                 token_ids { ids: 1 })pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prefix, "sys");
}

TEST_F(SessionParserTest, MessagesAreTheWholeConversationAfterThePrefixTokens) {
  cache::SessionOptions options;
  options.cache.implementation = cache::CacheImplementation::kStatic;
  options.cache.max_cache_len = 48;
  options.prefix_name = "sys";
  options.prefix_tokens = {100, 101, 102};
  Open("s1", options);
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(
    session: "s1"
    messages { messages { role: "user" content: "hello" } }
    sampling { max_new_tokens: 4 }
  )pb");
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::string> text =
      tokenizer_->ApplyChatTemplate({{"user", "hello"}}, /*add_generation_prompt=*/true);
  ASSERT_TRUE(text.ok());
  absl::StatusOr<std::vector<int32_t>> rendered = tokenizer_->Encode(*text, false);
  ASSERT_TRUE(rendered.ok());
  std::vector<int32_t> expected = {100, 101, 102};
  expected.insert(expected.end(), rendered->begin(), rendered->end());
  EXPECT_EQ(r->prompt_ids, expected);
  EXPECT_EQ(r->session, "s1");
  EXPECT_FALSE(r->session_append);
  EXPECT_TRUE(r->first_turn_ids.empty());
  EXPECT_EQ(r->prefix, "sys");
  EXPECT_EQ(r->cache_spec.implementation, cache::CacheImplementation::kStatic);
  EXPECT_EQ(r->cache_spec.max_cache_len, 48);
  EXPECT_EQ(r->max_new_tokens, 4);
  // No catalog entry: no snapshot to copy.
  EXPECT_EQ(r->prefix_snapshot, nullptr);

  // The prefix still holds the session's tokens: the first turn can copy its snapshot.
  prefixes_["sys"] = MakeSnapshot({100, 101, 102});
  r = Parse(R"pb(session: "s1"
                 messages { messages { role: "user" content: "hello" } })pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prefix_snapshot, prefixes_["sys"]);
  // Re-registered with other content: not the session's prefix any more.
  prefixes_["sys"] = MakeSnapshot({100, 101, 7});
  r = Parse(R"pb(session: "s1"
                 messages { messages { role: "user" content: "hello" } })pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prefix_snapshot, nullptr);
  EXPECT_EQ(r->prompt_ids, expected);
}

TEST_F(SessionParserTest, TextAndIdsAreAppendedToTheHistory) {
  Open("s2", {});
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(session: "s2" prompt: "hi there")pb");
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::vector<int32_t>> plain = tokenizer_->Encode("hi there", false);
  absl::StatusOr<std::vector<int32_t>> first = tokenizer_->Encode("hi there", true);
  ASSERT_TRUE(plain.ok() && first.ok());
  ASSERT_NE(*plain, *first);
  EXPECT_TRUE(r->session_append);
  EXPECT_EQ(r->session, "s2");
  EXPECT_EQ(r->prompt_ids, *plain);
  EXPECT_EQ(r->first_turn_ids, *first);
  EXPECT_EQ(r->first_turn_ids.front(), tokenizer::kTinyBosId);
  EXPECT_EQ(r->cache_spec.implementation, cache::CacheImplementation::kDynamic);

  r = Parse(R"pb(session: "s2"
                 token_ids { ids: [ 5, 6 ] })pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->session_append);
  EXPECT_THAT(r->prompt_ids, ElementsAre(5, 6));
  EXPECT_THAT(r->first_turn_ids, ElementsAre(5, 6));

  const std::vector<Malformed> cases = {
      {R"pb(session: "s2")pb", "input: one of prompt, token_ids or messages is required"},
      {R"pb(session: "s2"
            token_ids {})pb",
       "token_ids.ids: the input has no tokens; at least one is required"},
      {R"pb(session: "s2" prompt: "")pb",
       "prompt: the input has no tokens; at least one is required"},
      {R"pb(session: "s2"
            token_ids { ids: 512 })pb",
       "token_ids.ids[0]: 512 is outside the vocabulary [0, 512)"},
      {R"pb(session: "s2" prompt: "hi" template_kwargs: "{}")pb",
       "template_kwargs: applies only to messages input"},
      {R"pb(session: "s2"
            token_ids { ids: 1 }
            sampling { temperature: -1 })pb",
       "sampling.temperature: must be >= 0 (got -1)"},
  };
  for (const Malformed& c : cases) {
    r = Parse(c.request);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.request;
    EXPECT_EQ(r.status().message(), c.field) << c.request;
  }
}

TEST_F(SessionParserTest, ATurnTakesTheModelsDefaultsAndFitsTheContext) {
  info_.generation.max_new_tokens = 20;
  info_.generation.do_sample = true;
  Open("s3", {});
  absl::StatusOr<GenerationRequest> r = Parse(R"pb(session: "s3"
                                                   token_ids { ids: 1 })pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_new_tokens, 20);
  EXPECT_TRUE(r->sampling.do_sample);

  // The turn's own tokens and max_new_tokens must fit the model's context of 64.
  v1::GenerateRequest request;
  request.set_session("s3");
  for (int i = 0; i < 60; ++i) request.mutable_token_ids()->add_ids(1);
  request.mutable_sampling()->set_max_new_tokens(5);
  r = parser_->Parse(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "sampling.max_new_tokens: the prompt's 60 tokens + max_new_tokens 5 exceed the "
            "model's context of 64 tokens");
  request.mutable_sampling()->set_max_new_tokens(4);
  EXPECT_TRUE(parser_->Parse(request).ok());
}

TEST_F(SessionParserTest, SessionOptionsDefaults) {
  absl::StatusOr<cache::SessionOptions> o = ParseOptions("");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cache.implementation, cache::CacheImplementation::kDynamic);
  EXPECT_EQ(o->ttl, absl::ZeroDuration());  // the server's --session-ttl-seconds
  EXPECT_EQ(o->prefix_name, "");
  EXPECT_TRUE(o->prefix_tokens.empty());

  o = ParseOptions("ttl_seconds: 90 cache { cache_implementation: \"offloaded\" }");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->ttl, absl::Seconds(90));
  EXPECT_EQ(o->cache.implementation, cache::CacheImplementation::kOffloaded);
}

TEST_F(SessionParserTest, AStaticSessionCacheHoldsTheModelsContextUnlessItSays) {
  absl::StatusOr<cache::SessionOptions> o =
      ParseOptions("cache { cache_implementation: \"static\" }");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cache.implementation, cache::CacheImplementation::kStatic);
  EXPECT_EQ(o->cache.max_cache_len, 64);
  o = ParseOptions("cache { cache_implementation: \"offloaded_static\" }");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cache.max_cache_len, 64);
  o = ParseOptions("cache { cache_implementation: \"static\" max_cache_len: 20 }");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cache.max_cache_len, 20);
}

TEST_F(SessionParserTest, MalformedSessionOptionsNameTheirField) {
  const std::vector<Malformed> cases = {
      {"ttl_seconds: -1", "options.ttl_seconds: must be >= 0 (got -1)"},
      {"cache { use_cache: false }",
       "options.cache.use_cache: a session keeps a cache; it cannot be false"},
      {"cache { skip_prefix_reuse: true }",
       "options.cache.skip_prefix_reuse: a session reuses its own cache; it cannot be set"},
      {"cache { cache_implementation: \"static\" max_cache_len: 100 }",
       "options.cache.max_cache_len: 100 is above the model's context of 64 tokens"},
      {"cache { max_cache_len: 8 }",
       "options.cache.max_cache_len: applies only to the static and offloaded_static caches, "
       "not 'dynamic'"},
      {"prefix: \"bad name!\"", "options.prefix: a name is 1 to 128 characters of [A-Za-z0-9._-]"},
  };
  for (const Malformed& c : cases) {
    absl::StatusOr<cache::SessionOptions> o = ParseOptions(c.request);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << c.request;
    EXPECT_EQ(o.status().message(), c.field) << c.request;
  }
  absl::StatusOr<cache::SessionOptions> o =
      ParseOptions("cache { cache_implementation: \"paged\" }");
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()),
              StartsWith("options.cache.cache_implementation: "));
}

TEST_F(SessionParserTest, ASessionPrefixMustBeRegisteredAndItsTokensAreKept) {
  absl::StatusOr<cache::SessionOptions> o = ParseOptions("prefix: \"sys\"");
  EXPECT_EQ(o.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(o.status().message(), "options.prefix: no prefix named 'sys' is registered");
  prefixes_["sys"] = MakeSnapshot({100, 101, 102, 103});
  o = ParseOptions("prefix: \"sys\"");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->prefix_name, "sys");
  EXPECT_THAT(o->prefix_tokens, ElementsAre(100, 101, 102, 103));
  // A catalog entry whose snapshot is gone (evicted) is not registered any more.
  prefixes_["sys"] = nullptr;
  EXPECT_EQ(ParseOptions("prefix: \"sys\"").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvserve::server::grpc_api
