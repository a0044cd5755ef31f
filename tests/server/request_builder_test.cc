// Tests of RequestBuilder on typed inputs, without any wire type: each input (a generation, a
// session turn, a registration, a deletion's target, a session, a tokenization) built, and each
// refusal naming its field by message and by field path, with its canonical code. The gRPC
// adapter's reading of kvserve.v1 messages is tested in grpc_api/wire_requests_test.cc.
#include "server/request_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "cache/kv_cache.h"
#include "cache/snapshot.h"
#include "model/model.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::shared_ptr<const cache::Snapshot> Snapshot(const std::vector<int32_t>& tokens) {
  auto kv = *cache::KvCache::CreateDynamic({cache::LayerSpec{}, cache::LayerSpec{}});
  const at::Tensor k = at::ones({1, 1, static_cast<int64_t>(tokens.size()), 2});
  for (int layer = 0; layer < 2; ++layer) EXPECT_TRUE(kv->Update(layer, k, -k).ok());
  return *cache::Snapshot::Capture(*kv, tokens, "m");
}

class RequestBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = *tokenizer::Tokenizer::FromJson(tokenizer::MakeTinyTokenizerJson(512),
                                                 tokenizer::MakeTinyTokenizerConfigJson());
    info_.model_type = "llama";
    info_.vocab_size = 512;
    info_.num_layers = 2;
    info_.max_position_embeddings = 64;
    info_.head_dim = 16;
    info_.layer_specs.resize(2);
    info_.eos_token_ids = {tokenizer::kTinyEosId};
    limits_.max_new_tokens_limit = 32;
    prefixes_["sys"] = Snapshot({100, 101, 102});
    prefixes_["acme/own"] = Snapshot({200, 201});
    auto session = std::make_shared<cache::SessionOptions>();
    session->tenant = "acme";
    sessions_["s1"] = session;
    Rebuild();
  }

  void Rebuild() {
    builder_ = std::make_unique<RequestBuilder>(
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

  static GenerationInput Ids(std::vector<int32_t> ids) {
    GenerationInput in;
    in.input = PromptInput::TokenIds(std::move(ids));
    return in;
  }

  // The refusal's code, and that its message starts with its field path, which it carries.
  static void ExpectRefused(const absl::Status& status, absl::StatusCode code,
                            const std::string& path) {
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_THAT(std::string(status.message()), StartsWith(path + ": ")) << status;
    EXPECT_EQ(FieldPathOf(status), path) << status;
  }

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  model::ModelInfo info_;
  RequestLimits limits_;
  std::map<std::string, std::shared_ptr<const cache::Snapshot>> prefixes_;
  std::map<std::string, std::shared_ptr<const cache::SessionOptions>> sessions_;
  std::unique_ptr<RequestBuilder> builder_;
};

TEST_F(RequestBuilderTest, EachInputKindIsTokenized) {
  GenerationInput text;
  text.input = PromptInput::Text("hi");
  absl::StatusOr<GenerationRequest> r = builder_->Generation(text);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_ids.front(), tokenizer::kTinyBosId);
  EXPECT_EQ(r->prompt_ids.size(), 3u);

  r = builder_->Generation(Ids({5, 6, 7}));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->prompt_ids, ElementsAre(5, 6, 7));
  EXPECT_EQ(r->max_new_tokens, 16);
  EXPECT_EQ(r->tenant, kDefaultTenant);

  GenerationInput chat;
  chat.input = PromptInput::Messages({{"user", "hi"}});
  r = builder_->Generation(chat);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->prompt_ids.size(), 3u);
}

TEST_F(RequestBuilderTest, EveryRefusalNamesItsField) {
  using Code = absl::StatusCode;
  ExpectRefused(builder_->Generation(GenerationInput{}).status(), Code::kInvalidArgument, "input");
  ExpectRefused(builder_->Generation(Ids({5, 600})).status(), Code::kInvalidArgument,
                "token_ids.ids[1]");
  GenerationInput in = Ids({5});
  in.sampling.top_p = 1.5;
  ExpectRefused(builder_->Generation(in).status(), Code::kInvalidArgument, "sampling.top_p");
  in = Ids({5});
  in.sampling.max_new_tokens = 33;
  ExpectRefused(builder_->Generation(in).status(), Code::kInvalidArgument,
                "sampling.max_new_tokens");
  in = Ids({5});
  in.sampling.stop = {"a", ""};
  ExpectRefused(builder_->Generation(in).status(), Code::kInvalidArgument, "sampling.stop[1]");
  in = Ids({5});
  in.sampling.early_stopping = EarlyStoppingInput::kInvalid;
  in.sampling.early_stopping_value = 9;
  ExpectRefused(builder_->Generation(in).status(), Code::kInvalidArgument,
                "sampling.early_stopping");
  in = Ids({5});
  in.cache = CacheInput{.cache_implementation = "nope"};
  ExpectRefused(builder_->Generation(in).status(), Code::kInvalidArgument,
                "cache.cache_implementation");
  in = Ids({5});
  in.cache = CacheInput{.quantization = QuantizationInput{.backend = "quanto", .nbits = 5}};
  in.cache->cache_implementation = "quantized";
  ExpectRefused(builder_->Generation(in).status(), Code::kInvalidArgument,
                "cache.quantization.nbits");
  in = Ids({5});
  in.prefix = "bad name";
  ExpectRefused(builder_->Generation(in).status(), Code::kInvalidArgument, "prefix");
  in.prefix = "missing";
  ExpectRefused(builder_->Generation(in).status(), Code::kNotFound, "prefix");
  GenerationInput chat;
  chat.input = PromptInput::Messages({{"user", "a"}, {"", "b"}});
  ExpectRefused(builder_->Generation(chat).status(), Code::kInvalidArgument,
                "messages.messages[1].role");
  chat.input = PromptInput::Text("x");
  chat.input.template_kwargs = "{}";
  ExpectRefused(builder_->Generation(chat).status(), Code::kInvalidArgument, "template_kwargs");
}

// A prompt that alone fills the context is the prompt's fault, named as it was sent; one that
// leaves room but not for max_new_tokens is max_new_tokens'.
TEST_F(RequestBuilderTest, APromptThatAloneFillsTheContextIsNamed) {
  absl::Status status = builder_->Generation(Ids(std::vector<int32_t>(64, 5))).status();
  ExpectRefused(status, absl::StatusCode::kInvalidArgument, "token_ids.ids");
  EXPECT_THAT(status.message(), HasSubstr("leave no room in the model's context of 64"));
  GenerationInput text;
  text.input = PromptInput::Text(std::string(70, 'a'));
  ExpectRefused(builder_->Generation(text).status(), absl::StatusCode::kInvalidArgument, "prompt");
  GenerationInput fits = Ids(std::vector<int32_t>(60, 5));
  fits.sampling.max_new_tokens = 8;
  ExpectRefused(builder_->Generation(fits).status(), absl::StatusCode::kInvalidArgument,
                "sampling.max_new_tokens");
}

// Rows times tokens and the answer's size are bounded up front, naming the flag.
TEST_F(RequestBuilderTest, RowsTimesTokensAndAnswerBytesAreBoundedUpFront) {
  limits_.max_sequences_per_request = 64;
  limits_.max_request_token_rows = 256;
  limits_.max_response_bytes = 4096;
  info_.vocab_size = 512;
  Rebuild();
  GenerationInput beams = Ids({1, 2});
  beams.sampling.num_beams = 16;
  beams.sampling.max_new_tokens = 30;  // 16 x 32 tokens = 512 > 256
  absl::Status status = builder_->Generation(beams).status();
  ExpectRefused(status, absl::StatusCode::kInvalidArgument, "sampling.num_beams");
  EXPECT_THAT(status.message(), HasSubstr("--max-request-token-rows of 256"));
  beams.sampling.num_beams = 4;  // 128 tokens: within
  EXPECT_TRUE(builder_->Generation(beams).ok());
  GenerationInput logprobs = Ids({1});
  logprobs.sampling.max_new_tokens = 30;
  logprobs.sampling.logprobs = true;
  logprobs.sampling.top_logprobs = 20;
  status = builder_->Generation(logprobs).status();
  ExpectRefused(status, absl::StatusCode::kInvalidArgument, "sampling.top_logprobs");
  EXPECT_THAT(status.message(), HasSubstr("--max-response-bytes of 4096"));
  logprobs.sampling.top_logprobs = 0;  // 30 x (24 + 16) = 1200 bytes
  EXPECT_TRUE(builder_->Generation(logprobs).ok());
}

TEST_F(RequestBuilderTest, PrefixesResolveForTheCallersTenantThenTheSharedOnes) {
  GenerationInput in = Ids({7});
  in.prefix = "sys";
  absl::StatusOr<GenerationRequest> r = builder_->Generation(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->prompt_ids, ElementsAre(100, 101, 102, 7));
  EXPECT_EQ(r->prefix, "sys");
  in.prefix = "own";
  BuildContext acme{.caller = {.tenant = "acme", .role = Role::kUser}};
  r = builder_->Generation(in, acme);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prefix, "acme/own");
  EXPECT_EQ(r->tenant, "acme");
  // Another tenant's prefix is as absent as one never registered.
  EXPECT_EQ(builder_->Generation(in, {.caller = {.tenant = "other"}}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RequestBuilderTest, SessionTurnsResolveTheCallersOpenSessions) {
  GenerationInput turn;
  turn.input = PromptInput::Text("hi");
  turn.session = "s1";
  BuildContext acme{.caller = {.tenant = "acme", .role = Role::kUser}};
  absl::StatusOr<GenerationRequest> r = builder_->Generation(turn, acme);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->session_append);
  EXPECT_EQ(r->first_turn_ids.front(), tokenizer::kTinyBosId);
  ExpectRefused(builder_->Generation(turn, {.caller = {.tenant = "other"}}).status(),
                absl::StatusCode::kNotFound, "session");
  turn.cache = CacheInput{};
  ExpectRefused(builder_->Generation(turn, acme).status(), absl::StatusCode::kInvalidArgument,
                "cache");
}

TEST_F(RequestBuilderTest, RegistrationsAreQualifiedForTheCallerAndSharedOnesNeedAnAdmin) {
  RegistrationInput in;
  in.name = "p";
  in.content = PromptInput::TokenIds({1, 2, 3});
  const BuildContext user{.caller = {.tenant = "acme", .role = Role::kUser}};
  absl::StatusOr<PrefixRegistration> r = builder_->Registration(in, user);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name, "acme/p");
  EXPECT_THAT(r->token_ids, ElementsAre(1, 2, 3));
  EXPECT_TRUE(r->options.pinned);
  in.shared = true;
  EXPECT_EQ(builder_->Registration(in, user).status().code(), absl::StatusCode::kPermissionDenied);
  r = builder_->Registration(in, {.caller = {.tenant = "acme", .role = Role::kAdmin}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->name, "p");
  in.name = "";
  ExpectRefused(builder_->Registration(in).status(), absl::StatusCode::kInvalidArgument, "name");
  in.name = "p";
  in.ttl_seconds = -1;
  ExpectRefused(builder_->Registration(in).status(), absl::StatusCode::kInvalidArgument,
                "options.ttl_seconds");
  in.ttl_seconds = 0;
  in.content = PromptInput{};
  ExpectRefused(builder_->Registration(in).status(), absl::StatusCode::kInvalidArgument, "content");
}

TEST_F(RequestBuilderTest, ARegistrationsRetentionClassSetsPinningAndItsWeight) {
  RegistrationInput in;
  in.name = "p";
  in.content = PromptInput::TokenIds({1, 2, 3});
  for (const auto& [name, retention] : {std::pair{"high", cache::RetentionClass::kHigh},
                                        std::pair{"normal", cache::RetentionClass::kNormal},
                                        std::pair{"low", cache::RetentionClass::kLow}}) {
    in.retention = name;
    absl::StatusOr<PrefixRegistration> r = builder_->Registration(in);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->options.pinned) << name;
    EXPECT_EQ(r->options.retention, retention) << name;
  }
  in.retention = "pinned";
  absl::StatusOr<PrefixRegistration> r = builder_->Registration(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->options.pinned);
  in.retention = "forever";
  ExpectRefused(builder_->Registration(in).status(), absl::StatusCode::kInvalidArgument,
                "options.retention");
  // A class that contradicts pinned.
  in.retention = "low";
  in.pinned = true;
  ExpectRefused(builder_->Registration(in).status(), absl::StatusCode::kInvalidArgument,
                "options.retention");
  in.retention = "pinned";
  in.pinned = false;
  ExpectRefused(builder_->Registration(in).status(), absl::StatusCode::kInvalidArgument,
                "options.retention");
}

TEST_F(RequestBuilderTest, ADeletionTargetsTheCallersOwnPrefixElseTheSharedOne) {
  const BuildContext user{.caller = {.tenant = "acme", .role = Role::kUser}};
  EXPECT_EQ(*builder_->DeletionTarget("own", false, user), "acme/own");
  EXPECT_EQ(builder_->DeletionTarget("sys", false, user).status().code(),
            absl::StatusCode::kPermissionDenied);
  const BuildContext admin{.caller = {.tenant = "acme", .role = Role::kAdmin}};
  EXPECT_EQ(*builder_->DeletionTarget("sys", false, admin), "sys");
  EXPECT_EQ(*builder_->DeletionTarget("own", true, admin), "own");
  EXPECT_EQ(*builder_->DeletionTarget("nothing", false, user), "acme/nothing");
}

TEST_F(RequestBuilderTest, SessionsTakeTheCachesOptionsAndARegisteredPrefix) {
  SessionInput in;
  in.cache.cache_implementation = "static";
  in.prefix = "sys";
  in.ttl_seconds = 30;
  absl::StatusOr<cache::SessionOptions> s =
      builder_->Session(in, {.caller = {.tenant = "acme", .role = Role::kUser}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tenant, "acme");
  EXPECT_EQ(s->cache.max_cache_len, 64);
  EXPECT_EQ(s->prefix_name, "sys");
  EXPECT_THAT(s->prefix_tokens, ElementsAre(100, 101, 102));
  EXPECT_EQ(s->ttl, absl::Seconds(30));
  in.cache.use_cache = false;
  ExpectRefused(builder_->Session(in).status(), absl::StatusCode::kInvalidArgument,
                "options.cache.use_cache");
  in.cache = CacheInput{.cache_implementation = "nope"};
  ExpectRefused(builder_->Session(in).status(), absl::StatusCode::kInvalidArgument,
                "options.cache.cache_implementation");
  in.cache = {};
  in.prefix = "missing";
  ExpectRefused(builder_->Session(in).status(), absl::StatusCode::kNotFound, "options.prefix");
}

TEST_F(RequestBuilderTest, TokenizeGivesIdsAndTheirStrings) {
  TokenizeInput in;
  in.input = PromptInput::Text("ab");
  in.add_special_tokens = false;
  absl::StatusOr<TokenizeResult> r = builder_->Tokenize(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token_ids.size(), 2u);
  EXPECT_EQ(r->tokens.size(), 2u);
  ExpectRefused(builder_->Tokenize(TokenizeInput{}).status(), absl::StatusCode::kInvalidArgument,
                "input");
}

}  // namespace
}  // namespace kvserve::server
