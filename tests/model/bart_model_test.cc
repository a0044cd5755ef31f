// BartModel: its config (Transformers' names and defaults, errors naming the field), the
// cached decoder against the cold one for every strategy that applies (and the quantized
// refusal), cross-attention K/V projected once per request (counted), forced BOS/EOS as
// generate() forces them, and beams reordering both the self- and the cross-attention cache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "base/model_source.h"
#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/cross_attention_state.h"
#include "model/bart_model.h"
#include "model/mamba_model.h"
#include "model/tiny_model_maker.h"
#include "tests/model/tiny_models.h"
#include "tokenizer/tiny_tokenizer.h"

namespace kvserve::model {
namespace bart_model_test {

using ::testing::HasSubstr;
using testing::MaxAbsDiff;
using testing::Prompt;

std::unique_ptr<BartModel> LoadTinyBart(const std::string& preset = "tiny") {
  absl::StatusOr<std::map<std::string, std::string>> files =
      MakeTinyModel({.arch = "bart", .preset = preset, .seed = 7});
  EXPECT_TRUE(files.ok()) << files.status();
  if (!files.ok()) return nullptr;
  auto model = BartModel::Load(base::ModelSource::FromMemory(*files), {});
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<cache::EncoderDecoderCache> MakeEdCache(const BartModel& model,
                                                        const std::string& strategy,
                                                        int64_t encoder_len,
                                                        int64_t max_cache_len = 64) {
  auto spec = cache::CacheSpec::Parse(strategy, {}, true, max_cache_len);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  auto made = cache::MakeEncoderDecoderCache(*spec, model.info().layer_specs, encoder_len);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *std::move(made) : nullptr;
}

TEST(BartConfigTest, DefaultsAreTransformers) {
  auto c = BartConfig::Parse(R"({"model_type": "bart"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 50265);
  EXPECT_EQ(c->d_model, 1024);
  EXPECT_EQ(c->encoder_layers, 12);
  EXPECT_EQ(c->decoder_ffn_dim, 4096);
  EXPECT_EQ(c->max_position_embeddings, 1024);
  EXPECT_EQ(c->decoder_start_token_id, 2);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{2});
  EXPECT_FALSE(c->forced_bos_token_id.has_value());
  EXPECT_EQ(c->activation_function, "gelu");
  EXPECT_FALSE(c->scale_embedding);
  auto again = BartConfig::Parse(c->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *c);
  auto preset = BartPresetConfig("small");
  ASSERT_TRUE(preset.ok()) << preset.status();
  EXPECT_EQ(*BartConfig::Parse(preset->ToJson()), *preset);
}

TEST(BartConfigTest, ErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model_type": "bart", "d_model": 60, "encoder_attention_heads": 16})",
       "encoder_attention_heads"},
      {R"({"model_type": "bart", "activation_function": "swish"})", "activation_function"},
      {R"({"model_type": "bart", "decoder_start_token_id": null})", "decoder_start_token_id"},
      {R"({"model_type": "bart", "vocab_size": 10, "forced_bos_token_id": 10})",
       "forced_bos_token_id"},
      {R"({"model_type": "bart", "decoder_layers": "6"})", "decoder_layers"},
      {R"({"model_type": "llama"})", "model_type"},
  };
  for (const auto& [json, field] : cases) {
    auto c = BartConfig::Parse(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_THAT(c.status().message(), HasSubstr(field)) << json;
  }
}

TEST(BartModelTest, LoadsAsAnEncoderDecoderModelInFloat32Only) {
  auto files = MakeTinyModel({.arch = "bart", .preset = "tiny", .seed = 7});
  ASSERT_TRUE(files.ok()) << files.status();
  auto model = LoadModel(base::ModelSource::FromMemory(*files), {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().model_type, "bart");
  EXPECT_TRUE((*model)->info().encoder_decoder());
  // decoder_start_token_id (the tiny <eos>, as BART's </s>), then forced_bos_token_id.
  EXPECT_EQ((*model)->info().decoder_start_ids,
            (std::vector<int32_t>{tokenizer::kTinyEosId, tokenizer::kTinyBosId}));
  EXPECT_EQ((*model)->info().layer_specs.size(), 2u);
  auto bf16 = BartModel::Load(base::ModelSource::FromMemory(*files), {.dtype = at::kBFloat16});
  ASSERT_FALSE(bf16.ok());
  EXPECT_THAT(bf16.status().message(), HasSubstr("float32"));
}

// The engine's Forward: the cross state is computed at a cache's first step and read after,
// and cached steps give the cold forward's logits.
TEST(BartModelTest, ForwardKeepsTheCrossStateWithTheCache) {
  auto model = LoadTinyBart();
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> encoder = Prompt(11, 4);
  const std::vector<int32_t> decoder = {tokenizer::kTinyEosId, tokenizer::kTinyBosId, 50, 51};
  Batch cold_batch;
  cold_batch.sequences.push_back(
      {.token_ids = decoder, .all_logits = true, .encoder_token_ids = encoder});
  auto cold = model->Forward(cold_batch);
  ASSERT_TRUE(cold.ok()) << cold.status();
  auto kv =
      cache::MakeCache(*cache::CacheSpec::Parse("static", {}, true, 16), model->info().layer_specs);
  ASSERT_TRUE(kv.ok()) << kv.status();
  const int64_t before = model->cross_projections();
  for (size_t i = 0; i < decoder.size(); i += (i == 0 ? 2 : 1)) {
    const size_t n = i == 0 ? 2 : 1;
    Batch batch;
    batch.sequences.push_back({.token_ids = absl::MakeConstSpan(decoder).subspan(i, n),
                               .cache = kv->get(),
                               .encoder_token_ids = encoder});
    auto out = model->Forward(batch);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_LT(MaxAbsDiff(out->logits[0], cold->logits[0][i + n - 1]), 1e-4) << "position " << i;
  }
  EXPECT_EQ(model->cross_projections() - before, model->config().decoder_layers);
  ASSERT_NE((*kv)->cross_attention(), nullptr);
  EXPECT_EQ((*kv)->cross_attention()->encoder_ids, encoder);
  // A clone shares it; a reset drops it.
  EXPECT_EQ((*kv)->Clone()->cross_attention(), (*kv)->cross_attention());
  (*kv)->Reset();
  EXPECT_EQ((*kv)->cross_attention(), nullptr);
  // No encoder input: refused, naming why.
  Batch bad;
  bad.sequences.push_back({.token_ids = decoder});
  auto refused = model->Forward(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("no encoder input"));
}

// Cached decoding over the prefilled decoder input and single-token steps gives the cold
// forward's logits at every position, for each strategy of the self-attention cache.
class BartStrategyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BartStrategyTest, CachedGreedyEqualsCold) {
  auto model = LoadTinyBart();
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> encoder = Prompt(13);
  GenerateOptions options;
  options.max_new_tokens = 8;
  options.ignore_eos = true;
  options.record_logits = true;
  auto cache = MakeEdCache(*model, GetParam(), static_cast<int64_t>(encoder.size()));
  ASSERT_NE(cache, nullptr);
  const int64_t before = model->cross_projections();
  auto cached = GenerateBart(*model, encoder, {}, cache.get(), options);
  ASSERT_TRUE(cached.ok()) << cached.status();
  // Cross K/V once per decoder layer for the whole request.
  EXPECT_EQ(model->cross_projections() - before, model->config().decoder_layers);
  EXPECT_EQ(cache->SeqLength(), 1 + options.max_new_tokens - 1);

  const int64_t cold_before = model->cross_projections();
  auto cold = GenerateBart(*model, encoder, {}, nullptr, options);
  ASSERT_TRUE(cold.ok()) << cold.status();
  // Without a cache every step projects them again.
  EXPECT_EQ(model->cross_projections() - cold_before,
            model->config().decoder_layers * options.max_new_tokens);
  EXPECT_EQ(cached->tokens, cold->tokens);
  ASSERT_EQ(cached->logits.size(), cold->logits.size());
  for (size_t i = 0; i < cold->logits.size(); ++i) {
    EXPECT_LT(MaxAbsDiff(cached->logits[i], cold->logits[i]), 1e-4) << "step " << i;
  }
  // generate()'s forced tokens: BOS first, EOS at the last step max_new_tokens allows.
  EXPECT_EQ(cached->tokens.front(), tokenizer::kTinyBosId);
  EXPECT_EQ(cached->tokens.back(), tokenizer::kTinyEosId);
  // The tokens in between are the model's own choices, not all one token.
  std::set<int32_t> distinct(cached->tokens.begin() + 1, cached->tokens.end() - 1);
  EXPECT_GT(distinct.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Strategies, BartStrategyTest,
                         ::testing::Values("dynamic", "static", "offloaded", "offloaded_static"));

TEST(BartModelTest, QuantizedSelfAttentionIsRefusedByName) {
  auto model = LoadTinyBart();
  ASSERT_NE(model, nullptr);
  auto made = cache::MakeEncoderDecoderCache(*cache::CacheSpec::Parse("quantized"),
                                             model->info().layer_specs, 4);
  ASSERT_FALSE(made.ok());
  EXPECT_THAT(made.status().message(), HasSubstr("'quantized' is not supported for "
                                                 "encoder-decoder models"));
}

TEST(BartModelTest, DecoderPromptContinuesAsTheColdForward) {
  auto model = LoadTinyBart();
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> encoder = Prompt(9, 1);
  auto encoded = model->Encode(encoder);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  const std::vector<int32_t> decoder = {tokenizer::kTinyEosId, tokenizer::kTinyBosId, 40, 41, 42};
  auto cold = model->Decode(decoder, 1, *encoded, nullptr, /*all_logits=*/true);
  ASSERT_TRUE(cold.ok()) << cold.status();
  auto cache = MakeEdCache(*model, "dynamic", 9);
  // A prefill of three, then two single tokens.
  auto first = model->Decode(absl::MakeConstSpan(decoder).first(3), 1, *encoded, cache.get(),
                             /*all_logits=*/true);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_LT(MaxAbsDiff(*first, cold->narrow(0, 0, 3)), 1e-4);
  for (int i = 3; i < 5; ++i) {
    auto step = model->Decode(absl::MakeConstSpan(&decoder[i], 1), 1, *encoded, cache.get());
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_LT(MaxAbsDiff(*step, (*cold)[i]), 1e-4) << "position " << i;
  }
  // Bad input is refused before anything changes.
  auto bad = model->Decode(std::vector<int32_t>{320}, 1, *encoded, cache.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("outside the vocabulary"));
  EXPECT_EQ(cache->SeqLength(), 5);
  auto too_long = model->Encode(std::vector<int32_t>(1025, 5));
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(too_long.status().message(), HasSubstr("max_position_embeddings"));
}

// Two rows with different encoder inputs: reordering the cache swaps both the self- and the
// cross-attention K/V, so each row continues as the cold forward of its new history.
TEST(BartModelTest, BeamReorderMovesBothCaches) {
  auto model = LoadTinyBart();
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> a = Prompt(6, 2), b = Prompt(6, 3);
  std::vector<int32_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  auto encoded = model->Encode(both, 2);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  auto cache = MakeEdCache(*model, "dynamic", 6);
  const int32_t start = model->config().decoder_start_token_id;
  ASSERT_TRUE(model->Decode({start, 70, start, 80}, 2, *encoded, cache.get()).ok());
  ASSERT_TRUE(cache->Reorder(at::tensor(std::vector<int64_t>{1, 0})).ok());
  // Row 0 now holds b's history [start, 80], row 1 a's [start, 70].
  auto step = model->Decode({90, 91}, 2, encoded->flip(0), cache.get());
  ASSERT_TRUE(step.ok()) << step.status();
  auto encoded_a = model->Encode(a);
  auto encoded_b = model->Encode(b);
  auto cold_b = model->Decode({start, 80, 90}, 1, *encoded_b, nullptr);
  auto cold_a = model->Decode({start, 70, 91}, 1, *encoded_a, nullptr);
  ASSERT_TRUE(cold_a.ok() && cold_b.ok());
  EXPECT_LT(MaxAbsDiff((*step)[0], *cold_b), 1e-4);
  EXPECT_LT(MaxAbsDiff((*step)[1], *cold_a), 1e-4);
  // Without the cross cache's reorder, row 0 would read a's encoder.
  EXPECT_GT(MaxAbsDiff(*cold_a, *cold_b), 1e-2);
}

}  // namespace bart_model_test
}  // namespace kvserve::model
