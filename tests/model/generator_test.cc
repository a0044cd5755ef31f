// Tests for Generate: stopping rules, argument errors, and seeded sampling.
#include "model/generator.h"

#include <gtest/gtest.h>

#include "tests/model/tiny_models.h"

namespace kvserve::model {
namespace {

using testing::LoadTinyModel;
using testing::Prompt;

TEST(GeneratorTest, StopsAtLengthAndCountsSteps) {
  auto model = LoadTinyModel("llama");
  ASSERT_NE(model, nullptr);
  auto cache = *cache::KvCache::CreateDynamic(model->info().layer_specs);
  GenerateOptions options;
  options.max_new_tokens = 5;
  options.ignore_eos = true;
  auto r = Generate(*model, Prompt(4), cache.get(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens.size(), 5u);
  EXPECT_EQ(r->decode_steps, 4);  // the first token comes from the prefill
  EXPECT_EQ(r->finish_reason, "length");
  EXPECT_EQ(cache->SeqLength(), 4 + 4);  // the last token never gets K/V
  EXPECT_EQ(r->prompt_logits.size(0), model->info().vocab_size);
}

TEST(GeneratorTest, StopsAtEos) {
  auto model = LoadTinyModel("llama");
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 3;
  options.ignore_eos = true;
  auto first = Generate(*model, Prompt(6), nullptr, options);
  ASSERT_TRUE(first.ok());
  // Make the model's second choice its end-of-sequence token: generation stops there.
  ModelInfo& info = const_cast<ModelInfo&>(model->info());
  info.eos_token_ids = {first->tokens[1]};
  options.ignore_eos = false;
  auto r = Generate(*model, Prompt(6), nullptr, options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish_reason, "eos");
  EXPECT_EQ(r->tokens.size(), 2u);
}

TEST(GeneratorTest, SameSeedSameSample) {
  auto model = LoadTinyModel("qwen2");
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 12;
  options.ignore_eos = true;
  options.sampling.do_sample = true;
  options.sampling.temperature = 3.0;  // flatten the peaked logits so seeds matter
  options.sampling.top_k = 0;
  options.sampling.seed = 11;
  auto a = Generate(*model, Prompt(5), nullptr, options);
  auto b = Generate(*model, Prompt(5), nullptr, options);
  options.sampling.seed = 12;
  auto c = Generate(*model, Prompt(5), nullptr, options);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_NE(a->tokens, c->tokens);
}

TEST(GeneratorTest, RejectsBadArguments) {
  auto model = LoadTinyModel("llama");
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  EXPECT_EQ(Generate(*model, {}, nullptr, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.max_new_tokens = -1;
  EXPECT_NE(Generate(*model, Prompt(2), nullptr, options).status().message().find("max_new_tokens"),
            std::string::npos);
  options.max_new_tokens = 2;
  options.sampling.do_sample = true;
  options.sampling.temperature = 0;
  EXPECT_NE(Generate(*model, Prompt(2), nullptr, options).status().message().find("temperature"),
            std::string::npos);
  options.sampling = {};
  auto used = *cache::KvCache::CreateDynamic(model->info().layer_specs);
  ASSERT_TRUE(Generate(*model, Prompt(2), used.get(), options).ok());
  EXPECT_EQ(Generate(*model, Prompt(2), used.get(), options).status().code(),
            absl::StatusCode::kInvalidArgument);  // a cache that is not empty
}

}  // namespace
}  // namespace kvserve::model
