// BART through a real in-process server: the prompt is the encoder input and decoding starts
// from the decoder start tokens (or decoder_prompt_ids); greedy tokens are the same cached,
// for every strategy that applies, and cold; the cross-attention K/V are projected once per
// request (counted by the model), beams included, and once per named prefix (an encoder
// input: requests on it compute none); what does not apply is refused by name.
#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <google/protobuf/text_format.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/model_source.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/prefix.grpc.pb.h"
#include "model/bart_model.h"
#include "model/mamba_model.h"
#include "model/tiny_model_maker.h"
#include "server/encoder_decoder_request.h"
#include "server/kv_server.h"
#include "server/model_fingerprint.h"
#include "server/request_builder.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace bart_serving_test {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<int32_t> Ids(int n, int seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((seed * 131 + i * 17 + 3) % 250);
  return ids;
}

class BartServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::map<std::string, std::string>> files =
        model::MakeTinyModel({.arch = "bart", .preset = "tiny", .seed = 3});
    ASSERT_TRUE(files.ok()) << files.status();
    const base::ModelSource source = base::ModelSource::FromMemory(*files);
    LoadedModel loaded;
    auto model = model::LoadModel(source, {});
    ASSERT_TRUE(model.ok()) << model.status();
    loaded.model = *std::move(model);
    bart_ = dynamic_cast<model::BartModel*>(loaded.model.get());
    ASSERT_NE(bart_, nullptr);
    loaded.tokenizer = *tokenizer::Tokenizer::FromJson(*source.ReadText("tokenizer.json"),
                                                       *source.ReadText("tokenizer_config.json"));
    loaded.fingerprint = *ModelFingerprint(source, loaded.model->info());
    loaded.name = "bart";
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.threads = 1;
    absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const absl::Status serving = server_->Serve(std::move(loaded));
    ASSERT_TRUE(serving.ok()) << serving;
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    generation_ = v1::Generation::NewStub(channel);
    prefixes_ = v1::PrefixCache::NewStub(channel);
  }

  // Greedy generation of `max_new` tokens (`extra`: more request fields in text format).
  grpc::Status Call(const std::vector<int32_t>& encoder, const std::string& extra,
                    v1::GenerateResponse* response, int max_new = 8) {
    v1::GenerateRequest request;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(extra, &request)) << extra;
    request.mutable_token_ids()->mutable_ids()->Add(encoder.begin(), encoder.end());
    request.mutable_sampling()->set_max_new_tokens(max_new);
    request.mutable_sampling()->set_ignore_eos(true);
    grpc::ClientContext context;
    return generation_->Generate(&context, request, response);
  }
  v1::GenerateResponse Generate(const std::vector<int32_t>& encoder, const std::string& extra,
                                int max_new = 8) {
    v1::GenerateResponse response;
    const grpc::Status status = Call(encoder, extra, &response, max_new);
    EXPECT_TRUE(status.ok()) << status.error_message() << " for " << extra;
    return response;
  }

  grpc::Status Register(const std::string& name, const std::vector<int32_t>& encoder,
                        v1::Prefix* prefix, const std::string& cache_implementation = "") {
    v1::RegisterPrefixRequest request;
    request.set_name(name);
    request.mutable_token_ids()->mutable_ids()->Add(encoder.begin(), encoder.end());
    if (!cache_implementation.empty()) {
      request.mutable_options()->set_cache_implementation(cache_implementation);
    }
    grpc::ClientContext context;
    return prefixes_->RegisterPrefix(&context, request, prefix);
  }

  model::BartModel* bart_ = nullptr;  // owned by the server
  std::unique_ptr<KvServer> server_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::unique_ptr<v1::PrefixCache::Stub> prefixes_;
};

TEST_F(BartServingTest, CachedGreedyEqualsColdAndProjectsCrossOnce) {
  const std::vector<int32_t> encoder = Ids(12, 1);
  const int64_t layers = bart_->config().decoder_layers;
  int64_t before = bart_->cross_projections();
  const v1::GenerateResponse cold = Generate(encoder, "cache { use_cache: false }");
  ASSERT_EQ(cold.token_ids_size(), 8);
  // Without a cache every step runs the encoder and the cross projections again.
  EXPECT_EQ(bart_->cross_projections() - before, layers * 8);
  for (const char* strategy : {"dynamic", "static", "offloaded", "offloaded_static"}) {
    before = bart_->cross_projections();
    const v1::GenerateResponse cached =
        Generate(encoder, absl::StrCat("cache { cache_implementation: \"", strategy, "\" }"));
    EXPECT_THAT(cached.token_ids(), ElementsAreArray(cold.token_ids())) << strategy;
    EXPECT_EQ(bart_->cross_projections() - before, layers) << strategy;
  }
  // The tokens are the model's own choices (not one token repeated).
  std::set<int32_t> distinct(cold.token_ids().begin(), cold.token_ids().end());
  EXPECT_GT(distinct.size(), 1u);
}

TEST_F(BartServingTest, DecoderPromptContinuesTheDecoder) {
  const std::vector<int32_t> encoder = Ids(9, 2);
  const v1::GenerateResponse plain = Generate(encoder, "", 6);
  ASSERT_EQ(plain.token_ids_size(), 6);
  // The encoder input and the decoder's two start tokens.
  EXPECT_EQ(plain.usage().prompt_tokens(), 9 + 2);
  // The default decoder prompt is decoder_start_token_id then forced_bos_token_id: naming it
  // plus the first generated token continues with the rest.
  const v1::GenerateResponse continued =
      Generate(encoder,
               absl::StrCat("decoder_prompt_ids { ids: ", tokenizer::kTinyEosId,
                            " ids: ", tokenizer::kTinyBosId, " ids: ", plain.token_ids(0), " }"),
               5);
  EXPECT_THAT(continued.token_ids(),
              ElementsAreArray(plain.token_ids().begin() + 1, plain.token_ids().end()));
  // Another encoder input gives other tokens from the same decoder prompt.
  EXPECT_THAT(Generate(Ids(9, 5), "", 6).token_ids(),
              ::testing::Not(ElementsAreArray(plain.token_ids())));
}

TEST_F(BartServingTest, BeamsShareOneCrossProjection) {
  const std::vector<int32_t> encoder = Ids(10, 3);
  const std::string beams = "sampling { num_beams: 3 num_return_sequences: 3 }";
  const int64_t before = bart_->cross_projections();
  v1::GenerateResponse dynamic, offloaded;
  ASSERT_TRUE(Call(encoder, beams, &dynamic, 6).ok());
  EXPECT_EQ(bart_->cross_projections() - before, bart_->config().decoder_layers);
  ASSERT_TRUE(Call(encoder, absl::StrCat(beams, " cache { cache_implementation: \"offloaded\" }"),
                   &offloaded, 6)
                  .ok());
  ASSERT_EQ(dynamic.sequences_size(), 3);
  ASSERT_EQ(offloaded.sequences_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(offloaded.sequences(i).token_ids(),
                ElementsAreArray(dynamic.sequences(i).token_ids()));
    EXPECT_NEAR(offloaded.sequences(i).score(), dynamic.sequences(i).score(), 1e-4);
  }
  // Beams are reordered rows of one cache: they differ from each other.
  EXPECT_THAT(dynamic.sequences(1).token_ids(),
              ::testing::Not(ElementsAreArray(dynamic.sequences(0).token_ids())));
}

TEST_F(BartServingTest, WhatDoesNotApplyIsRefusedByName) {
  const std::vector<int32_t> encoder = Ids(5, 4);
  v1::GenerateResponse response;
  grpc::Status status = Call(encoder, "cache { cache_implementation: \"quantized\" }", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("'quantized' is not supported for model_type "
                                                "bart (an encoder-decoder model)"));
  status = Call(encoder, "session: \"s1\"", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("session: sessions continue"));
  status = Call(encoder, "decoder_prompt_ids { }", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("decoder_prompt_ids: needs at least one token"));
  status = Call(encoder, "decoder_prompt_ids { ids: 9999 }", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("decoder_prompt_ids.ids"));
  v1::Prefix prefix;
  status = Register("q", encoder, &prefix, "quantized");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("options.cache_implementation: 'quantized'"));
}

// A named prefix is an encoder input: its registration computes the encoder output and the
// cross K/V, which every request on it reads instead of computing them again.
TEST_F(BartServingTest, NamedPrefixReusesItsEncoderOutputAndCrossCache) {
  const std::vector<int32_t> document = Ids(14, 6), other = Ids(14, 7);
  const int64_t layers = bart_->config().decoder_layers;
  const v1::GenerateResponse plain = Generate(document, "", 6);
  v1::Prefix prefix;
  int64_t before = bart_->cross_projections();
  ASSERT_TRUE(Register("doc", document, &prefix).ok());
  EXPECT_EQ(bart_->cross_projections() - before, layers);  // the registration's one step
  before = bart_->cross_projections();
  for (int i = 0; i < 2; ++i) {
    const v1::GenerateResponse on_prefix = Generate({}, "prefix: \"doc\"", 6);
    EXPECT_THAT(on_prefix.token_ids(), ElementsAreArray(plain.token_ids()));
  }
  // Greedy, beams and another decoder prompt on the prefix: no cross projection at all.
  v1::GenerateResponse beams;
  ASSERT_TRUE(
      Call({}, "prefix: \"doc\" sampling { num_beams: 2 num_return_sequences: 2 }", &beams, 4)
          .ok());
  EXPECT_EQ(beams.sequences_size(), 2);
  EXPECT_EQ(bart_->cross_projections() - before, 0);
  // Registered again on another encoder input, the name serves that one.
  ASSERT_TRUE(Register("doc", other, &prefix).ok());
  EXPECT_THAT(Generate({}, "prefix: \"doc\"", 6).token_ids(),
              ElementsAreArray(Generate(other, "", 6).token_ids()));
  // The prefix is the whole encoder input: tokens after it are refused, naming why.
  v1::GenerateResponse response;
  const grpc::Status status = Call({5, 6}, "prefix: \"doc\"", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("is the whole encoder input"));
}

TEST(EncoderDecoderRequestTest, DecoderOnlyModelsRefuseADecoderPrompt) {
  model::ModelInfo llama;
  llama.model_type = "llama";
  GenerationInput input;
  input.decoder_prompt_ids = std::vector<int32_t>{1};
  const absl::Status status = CheckEncoderDecoderInput(llama, input);
  EXPECT_EQ(FieldPathOf(status), "decoder_prompt_ids");
  EXPECT_THAT(status.message(), HasSubstr("model_type llama is decoder-only"));
  GenerationRequest out;
  out.prompt_ids = {5, 6};
  input.decoder_prompt_ids.reset();
  EXPECT_TRUE(ApplyEncoderDecoderInput(llama, input, &out).ok());
  EXPECT_EQ(out.prompt_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(out.encoder_ids.empty());
}

}  // namespace bart_serving_test
}  // namespace kvserve::server
