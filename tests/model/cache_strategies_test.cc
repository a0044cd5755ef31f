// Every cache strategy generates what the dynamic cache generates: static, offloaded and
// offloaded_static exactly (tokens, logits within 1e-4 in float32; Gemma 2 and 3 too), quantized
// (hqq int8, fp8) the same first 8 greedy tokens; no cache (cold) what each cache does.
#include <gtest/gtest.h>

#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "model/generator.h"
#include "tests/model/tiny_models.h"

namespace kvserve::model {
namespace {

using testing::LoadTinyModel;
using testing::MaxAbsDiff;
using testing::Prompt;

struct StrategyCase {
  std::string arch;
  std::string implementation;
  int prompt_length;
};

std::string CaseName(const ::testing::TestParamInfo<StrategyCase>& info) {
  return info.param.arch + "_" + info.param.implementation + "_prompt" +
         std::to_string(info.param.prompt_length);
}

absl::StatusOr<GenerateResult> GenerateWith(Transformer& model, const std::vector<int32_t>& prompt,
                                            std::string_view implementation,
                                            const cache::QuantizationConfig& config,
                                            const GenerateOptions& options) {
  absl::StatusOr<cache::CacheSpec> spec = cache::CacheSpec::Parse(implementation, config);
  if (!spec.ok()) return spec.status();
  if (spec->is_static()) {
    spec->max_cache_len = cache::StaticCacheLength(
        static_cast<int64_t>(prompt.size()) + options.max_new_tokens, spec->max_cache_len);
  }
  absl::StatusOr<std::unique_ptr<cache::KvCache>> kv =
      cache::MakeCache(*spec, model.info().layer_specs);
  if (!kv.ok()) return kv.status();
  return Generate(model, prompt, kv->get(), options);
}

class ExactStrategyTest : public ::testing::TestWithParam<StrategyCase> {};

TEST_P(ExactStrategyTest, MatchesDynamicCache) {
  const StrategyCase& c = GetParam();
  auto model = LoadTinyModel(c.arch, "tiny");
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 24;
  options.ignore_eos = true;
  options.record_logits = true;
  const std::vector<int32_t> prompt = Prompt(c.prompt_length);
  auto expected = GenerateWith(*model, prompt, "dynamic", {}, options);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = GenerateWith(*model, prompt, c.implementation, {}, options);
  ASSERT_TRUE(actual.ok()) << actual.status();
  EXPECT_EQ(actual->tokens, expected->tokens);
  ASSERT_EQ(actual->logits.size(), expected->logits.size());
  for (size_t i = 0; i < actual->logits.size(); ++i) {
    ASSERT_LE(MaxAbsDiff(actual->logits[i], expected->logits[i]), 1e-4) << "step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    TinyModels, ExactStrategyTest, ::testing::ValuesIn([] {
      std::vector<StrategyCase> cases;
      for (const char* arch : {"llama", "mistral", "qwen3", "gemma2", "gemma3"}) {
        for (const char* impl : {"static", "offloaded", "offloaded_static"}) {
          // A short prompt, and one longer than the mistral preset's sliding
          // window.
          for (int length : {5, 40}) cases.push_back({arch, impl, length});
        }
      }
      return cases;
    }()),
    CaseName);

class QuantizedStrategyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedStrategyTest, FirstEightTokensMatchDynamic) {
  auto model = LoadTinyModel("llama", "small");
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 8;
  options.ignore_eos = true;
  const std::vector<int32_t> prompt = Prompt(24);
  absl::StatusOr<cache::QuantizationConfig> config = cache::ParseQuantizationConfigJson(GetParam());
  ASSERT_TRUE(config.ok()) << config.status();
  // A residual of 2 makes decode steps read re-quantized tokens, not just the exact prefill.
  if (!config->backend || *config->backend != "fp8") config->residual_length = 2;
  auto expected = GenerateWith(*model, prompt, "dynamic", {}, options);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = GenerateWith(*model, prompt, "quantized", *config, options);
  ASSERT_TRUE(actual.ok()) << actual.status();
  EXPECT_EQ(actual->tokens, expected->tokens);
}

INSTANTIATE_TEST_SUITE_P(SmallLlama, QuantizedStrategyTest,
                         ::testing::Values(R"({"backend": "hqq", "nbits": 8, "axis_key": 1,
                                               "axis_value": 1})",
                                           R"({"backend": "fp8"})"));

TEST(QuantizedStrategyRefusalTest, SlidingModelsAreRefused) {
  auto model = LoadTinyModel("mistral", "tiny");
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  auto result = GenerateWith(*model, Prompt(4), "quantized", {}, options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantizedStrategyRefusalTest, GemmaIsRefusedNamingTheStrategyAndLayerType) {
  for (const char* arch : {"gemma2", "gemma3"}) {
    auto model = LoadTinyModel(arch, "tiny");
    ASSERT_NE(model, nullptr);
    auto result = GenerateWith(*model, Prompt(4), "quantized", {}, GenerateOptions());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << arch;
    EXPECT_EQ(result.status().message(),
              "cache_implementation 'quantized' supports only full_attention layers; layer 0 is "
              "sliding_attention")
        << arch;
  }
}

// Cold (no cache: every step recomputes the whole sequence) and cached decoding agree for the
// Gemma presets, past their sliding window of 16.
TEST(NoCacheStrategyTest, GemmaColdMatchesEveryCache) {
  for (const char* arch : {"gemma2", "gemma3"}) {
    auto model = LoadTinyModel(arch, "tiny");
    ASSERT_NE(model, nullptr);
    GenerateOptions options;
    options.max_new_tokens = 10;
    options.ignore_eos = true;
    auto cold = Generate(*model, Prompt(20), nullptr, options);
    ASSERT_TRUE(cold.ok()) << cold.status();
    for (const char* impl : {"dynamic", "static", "offloaded", "offloaded_static"}) {
      auto cached = GenerateWith(*model, Prompt(20), impl, {}, options);
      ASSERT_TRUE(cached.ok()) << arch << " " << impl << ": " << cached.status();
      EXPECT_EQ(cached->tokens, cold->tokens) << arch << " " << impl;
    }
  }
}

TEST(NoCacheStrategyTest, UseCacheFalseMatchesDynamic) {
  auto model = LoadTinyModel("qwen3", "tiny");
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 6;
  options.ignore_eos = true;
  auto spec = cache::CacheSpec::Parse("", {}, /*use_cache=*/false);
  ASSERT_TRUE(spec.ok());
  auto kv = cache::MakeCache(*spec, model->info().layer_specs);
  ASSERT_TRUE(kv.ok());
  auto actual = Generate(*model, Prompt(7), kv->get(), options);
  auto expected = GenerateWith(*model, Prompt(7), "dynamic", {}, options);
  ASSERT_TRUE(actual.ok() && expected.ok());
  EXPECT_EQ(actual->tokens, expected->tokens);
}

}  // namespace
}  // namespace kvserve::model
