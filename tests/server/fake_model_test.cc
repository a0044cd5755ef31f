// Tests of FakeModel: exact predictions, cache growth and contents, validation.
#include "tests/support/fake_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/kv_cache.h"

namespace kvserve::server {
namespace {

using model::testing::FakeModel;
using model::testing::FakeModelOptions;
using ::testing::HasSubstr;

std::unique_ptr<FakeModel> MakeModel(FakeModelOptions options = {}) {
  absl::StatusOr<std::unique_ptr<FakeModel>> model = FakeModel::Create(std::move(options));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<cache::KvCache> MakeDynamicCache(const FakeModel& model) {
  auto cache = cache::KvCache::CreateDynamic(model.info().layer_specs);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

std::unique_ptr<cache::KvCache> MakeStaticCache(const FakeModel& model, int64_t max_cache_len) {
  auto spec = cache::CacheSpec::Parse("static", {}, true, max_cache_len);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto cache = cache::MakeCache(*spec, model.info().layer_specs);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

int32_t Argmax(const at::Tensor& row) { return static_cast<int32_t>(row.argmax().item<int64_t>()); }

TEST(FakeModelTest, CreateRejectsBadOptions) {
  const auto expect_invalid = [](FakeModelOptions options, const char* field) {
    absl::StatusOr<std::unique_ptr<FakeModel>> model = FakeModel::Create(std::move(options));
    ASSERT_FALSE(model.ok()) << field;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(model.status().message()), HasSubstr(field));
  };
  expect_invalid({.vocab_size = 1}, "vocab_size");
  expect_invalid({.num_layers = 0}, "num_layers");
  expect_invalid({.num_kv_heads = 0}, "num_kv_heads");
  expect_invalid({.head_dim = 0}, "head_dim");
  expect_invalid({.max_position_embeddings = 0}, "max_position_embeddings");
  expect_invalid({.num_layers = 2, .layer_specs = {cache::LayerSpec{}}}, "layer_specs");
  expect_invalid({.num_layers = 1,
                  .layer_specs = {{.type = cache::LayerType::kSlidingAttention, .window = 1}}},
                 "window");
  expect_invalid({.vocab_size = 8, .eos_token_ids = {8}}, "eos_token_ids");
  expect_invalid({.vocab_size = 8, .bos_token_id = -1}, "bos_token_id");
  expect_invalid({.dtype = at::kInt}, "dtype");
}

TEST(FakeModelTest, InfoComesFromOptions) {
  std::unique_ptr<FakeModel> model = MakeModel(
      {.model_type = "fake-llama",
       .vocab_size = 100,
       .num_layers = 3,
       .num_kv_heads = 4,
       .head_dim = 8,
       .max_position_embeddings = 256,
       .layer_specs = {{}, {.type = cache::LayerType::kSlidingAttention, .window = 4}, {}},
       .eos_token_ids = {2, 7},
       .bos_token_id = 1,
       .dtype = at::kBFloat16});
  ASSERT_NE(model, nullptr);
  const model::ModelInfo& info = model->info();
  EXPECT_EQ(info.model_type, "fake-llama");
  EXPECT_EQ(info.vocab_size, 100);
  EXPECT_EQ(info.num_layers, 3);
  EXPECT_EQ(info.num_kv_heads, 4);
  EXPECT_EQ(info.head_dim, 8);
  EXPECT_EQ(info.max_position_embeddings, 256);
  ASSERT_EQ(info.layer_specs.size(), 3u);
  EXPECT_EQ(info.layer_specs[1].type, cache::LayerType::kSlidingAttention);
  EXPECT_EQ(info.layer_specs[1].window, 4);
  EXPECT_EQ(info.eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(info.bos_token_id, 1);
  EXPECT_EQ(info.dtype, at::kBFloat16);
  EXPECT_TRUE(info.device.is_cpu());

  // Empty layer_specs: full attention on every layer.
  std::unique_ptr<FakeModel> plain = MakeModel({.num_layers = 2});
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->info().layer_specs, std::vector<cache::LayerSpec>(2));
}

TEST(FakeModelTest, DefaultRuleIsTokenPlusPositionPlusOneModVocab) {
  EXPECT_EQ(FakeModel::DefaultNextToken(5, 0, 64), 6);
  EXPECT_EQ(FakeModel::DefaultNextToken(5, 10, 64), 16);
  EXPECT_EQ(FakeModel::DefaultNextToken(60, 10, 64), 7);
}

TEST(FakeModelTest, LastPositionLogitsWithoutCache) {
  std::unique_ptr<FakeModel> model = MakeModel({.vocab_size = 32});
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> tokens = {3, 9, 4};
  auto out = model->Forward({.sequences = {{.token_ids = tokens}}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->logits.size(), 1u);
  const at::Tensor& logits = out->logits[0];
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{32}));
  EXPECT_EQ(logits.scalar_type(), at::kFloat);
  EXPECT_TRUE(logits.device().is_cpu());
  // Last token 4 at position 2: 4 + 2 + 1 = 7.
  EXPECT_EQ(Argmax(logits), 7);
  EXPECT_FLOAT_EQ(logits[7].item<float>(), FakeModel::kPeakLogit);
  EXPECT_FLOAT_EQ(logits.sum().item<float>(), FakeModel::kPeakLogit);
}

TEST(FakeModelTest, AllLogitsPredictEveryPosition) {
  std::unique_ptr<FakeModel> model = MakeModel({.vocab_size = 16});
  ASSERT_NE(model, nullptr);
  auto cache = MakeDynamicCache(*model);
  const std::vector<int32_t> first = {1, 2};
  ASSERT_TRUE(model->Forward({.sequences = {{.token_ids = first, .cache = cache.get()}}}).ok());
  const std::vector<int32_t> tokens = {10, 11, 12};  // positions 2, 3, 4
  auto out = model->Forward(
      {.sequences = {{.token_ids = tokens, .cache = cache.get(), .all_logits = true}}});
  ASSERT_TRUE(out.ok()) << out.status();
  const at::Tensor& logits = out->logits[0];
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{3, 16}));
  EXPECT_EQ(Argmax(logits[0]), 13);  // 10 + 2 + 1
  EXPECT_EQ(Argmax(logits[1]), 15);  // 11 + 3 + 1
  EXPECT_EQ(Argmax(logits[2]), 1);   // (12 + 4 + 1) % 16
}

TEST(FakeModelTest, PrefillThenDecodeGrowsTheCacheAndContinuesPositions) {
  std::unique_ptr<FakeModel> model = MakeModel({.vocab_size = 64});
  ASSERT_NE(model, nullptr);
  auto cache = MakeDynamicCache(*model);
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  auto out = model->Forward({.sequences = {{.token_ids = prompt, .cache = cache.get()}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(cache->SeqLength(), 4);
  EXPECT_EQ(cache->layer(1).SeqLength(), 4);
  int32_t next = Argmax(out->logits[0]);
  EXPECT_EQ(next, 12);  // 8 + 3 + 1

  // Greedy decoding continues from the cache's length: 12 at position 4 -> 17, 17 at 5 -> 23.
  std::vector<int32_t> generated;
  for (int step = 0; step < 2; ++step) {
    const std::vector<int32_t> input = {next};
    auto step_out = model->Forward({.sequences = {{.token_ids = input, .cache = cache.get()}}});
    ASSERT_TRUE(step_out.ok()) << step_out.status();
    next = Argmax(step_out->logits[0]);
    generated.push_back(next);
  }
  EXPECT_EQ(generated, (std::vector<int32_t>{17, 23}));
  EXPECT_EQ(cache->SeqLength(), 6);
  EXPECT_EQ(model->num_forward_calls(), 3);
  EXPECT_EQ(model->num_tokens_run(), 6);
}

TEST(FakeModelTest, CacheHoldsTokenIdsAsKeysAndPositionsAsValues) {
  std::unique_ptr<FakeModel> model =
      MakeModel({.vocab_size = 64, .num_layers = 2, .num_kv_heads = 2, .head_dim = 4});
  ASSERT_NE(model, nullptr);
  auto cache = MakeStaticCache(*model, 8);
  EXPECT_EQ(cache->Memory().total(), 0);  // storage is allocated on the first update
  const std::vector<int32_t> prompt = {30, 31, 32};
  ASSERT_TRUE(model->Forward({.sequences = {{.token_ids = prompt, .cache = cache.get()}}}).ok());
  const std::vector<int32_t> decode = {40};
  ASSERT_TRUE(model->Forward({.sequences = {{.token_ids = decode, .cache = cache.get()}}}).ok());
  EXPECT_EQ(cache->SeqLength(), 4);
  // 2 layers x (keys + values) x [1, 2, 8, 4] float32.
  EXPECT_EQ(cache->Memory().total(), 2 * 2 * (1 * 2 * 8 * 4) * 4);

  for (int layer = 0; layer < 2; ++layer) {
    std::vector<at::Tensor> stored;  // keys, values: [1, 2, 8, 4]
    ASSERT_TRUE(cache->layer(layer).ForEachTensor([&](at::Tensor& t) { stored.push_back(t); }));
    ASSERT_EQ(stored.size(), 2u);
    const at::Tensor keys = stored[0].narrow(2, 0, 4);
    const at::Tensor values = stored[1].narrow(2, 0, 4);
    const at::Tensor want_keys =
        at::tensor({30.0f, 31.0f, 32.0f, 40.0f}).view({1, 1, 4, 1}).expand({1, 2, 4, 4});
    const at::Tensor want_values =
        at::tensor({0.0f, 1.0f, 2.0f, 3.0f}).view({1, 1, 4, 1}).expand({1, 2, 4, 4});
    EXPECT_TRUE(at::equal(keys, want_keys)) << "layer " << layer << "\n" << keys;
    EXPECT_TRUE(at::equal(values, want_values)) << "layer " << layer << "\n" << values;
  }
}

TEST(FakeModelTest, CacheDtypeFollowsOptions) {
  std::unique_ptr<FakeModel> model =
      MakeModel({.num_layers = 1, .num_kv_heads = 1, .head_dim = 2, .dtype = at::kBFloat16});
  ASSERT_NE(model, nullptr);
  auto cache = MakeStaticCache(*model, 4);
  const std::vector<int32_t> prompt = {3};
  ASSERT_TRUE(model->Forward({.sequences = {{.token_ids = prompt, .cache = cache.get()}}}).ok());
  // keys + values, [1, 1, 4, 2] in 2-byte bfloat16.
  EXPECT_EQ(cache->Memory().total(), 2 * (1 * 1 * 4 * 2) * 2);
  std::vector<at::ScalarType> dtypes;
  cache->layer(0).ForEachTensor([&](at::Tensor& t) { dtypes.push_back(t.scalar_type()); });
  EXPECT_EQ(dtypes, (std::vector<at::ScalarType>{at::kBFloat16, at::kBFloat16}));
}

TEST(FakeModelTest, RaggedBatchAdvancesEachSequenceOnItsOwnCache) {
  std::unique_ptr<FakeModel> model = MakeModel({.vocab_size = 50});
  ASSERT_NE(model, nullptr);
  auto a = MakeDynamicCache(*model);
  auto b = MakeDynamicCache(*model);
  const std::vector<int32_t> a_prompt = {1, 2, 3, 4, 5};
  ASSERT_TRUE(model->Forward({.sequences = {{.token_ids = a_prompt, .cache = a.get()}}}).ok());

  // One step: a decodes one token at position 5, b prefills three from position 0, and a
  // third sequence runs without a cache.
  const std::vector<int32_t> a_step = {20};
  const std::vector<int32_t> b_step = {7, 8, 9};
  const std::vector<int32_t> c_step = {40, 41};
  auto out = model->Forward({.sequences = {{.token_ids = a_step, .cache = a.get()},
                                           {.token_ids = b_step, .cache = b.get()},
                                           {.token_ids = c_step}}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->logits.size(), 3u);
  EXPECT_EQ(Argmax(out->logits[0]), 26);  // 20 + 5 + 1
  EXPECT_EQ(Argmax(out->logits[1]), 12);  // 9 + 2 + 1
  EXPECT_EQ(Argmax(out->logits[2]), 43);  // 41 + 1 + 1
  EXPECT_EQ(a->SeqLength(), 6);
  EXPECT_EQ(b->SeqLength(), 3);
  EXPECT_EQ(model->num_tokens_run(), 5 + 1 + 3 + 2);
}

TEST(FakeModelTest, CustomRuleDecidesTheToken) {
  std::unique_ptr<FakeModel> model = MakeModel(
      {.vocab_size = 10, .eos_token_ids = {9}, .next_token = [](int32_t last, int64_t position) {
         return position >= 3 ? 9 : (last * 2) % 10;
       }});
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->NextToken(4, 0), 8);
  EXPECT_EQ(model->NextToken(4, 3), 9);
  auto cache = MakeDynamicCache(*model);
  const std::vector<int32_t> prompt = {1, 3};
  auto out = model->Forward({.sequences = {{.token_ids = prompt, .cache = cache.get()}}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Argmax(out->logits[0]), 6);
  const std::vector<int32_t> step = {6};
  const std::vector<int32_t> step2 = {2};
  ASSERT_TRUE(model->Forward({.sequences = {{.token_ids = step, .cache = cache.get()}}}).ok());
  out = model->Forward({.sequences = {{.token_ids = step2, .cache = cache.get()}}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Argmax(out->logits[0]), 9);  // position 3
}

TEST(FakeModelTest, InvalidInputsChangeNoCache) {
  std::unique_ptr<FakeModel> model =
      MakeModel({.vocab_size = 10, .next_token = [](int32_t last, int64_t position) {
                   return last == 5 ? 10 : 0;  // 10 is outside the vocabulary
                 }});
  ASSERT_NE(model, nullptr);
  auto good = MakeDynamicCache(*model);
  auto other = MakeDynamicCache(*model);
  const std::vector<int32_t> ok_tokens = {1, 2};
  const std::vector<int32_t> empty;
  const std::vector<int32_t> out_of_vocab = {3, 10};
  const std::vector<int32_t> negative = {-1};
  const std::vector<int32_t> bad_rule = {5};

  const auto expect_invalid = [&](const std::vector<int32_t>& second, const char* what) {
    auto out = model->Forward({.sequences = {{.token_ids = ok_tokens, .cache = good.get()},
                                             {.token_ids = second, .cache = other.get()}}});
    ASSERT_FALSE(out.ok()) << what;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(what));
    EXPECT_EQ(good->SeqLength(), 0) << what;
    EXPECT_EQ(other->SeqLength(), 0) << what;
  };
  expect_invalid(empty, "no tokens");
  expect_invalid(out_of_vocab, "token id 10");
  expect_invalid(negative, "token id -1");
  expect_invalid(bad_rule, "next_token rule returned 10");

  std::unique_ptr<FakeModel> three_layers = MakeModel({.vocab_size = 10, .num_layers = 3});
  ASSERT_NE(three_layers, nullptr);
  auto out = three_layers->Forward({.sequences = {{.token_ids = ok_tokens, .cache = good.get()}}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("layers"));
  EXPECT_EQ(model->num_forward_calls(), 0);
  EXPECT_EQ(model->num_tokens_run(), 0);
}

TEST(FakeModelTest, FullStaticCacheErrorNamesSequenceAndLayer) {
  std::unique_ptr<FakeModel> model = MakeModel({.vocab_size = 10});
  ASSERT_NE(model, nullptr);
  auto cache = MakeStaticCache(*model, 2);
  const std::vector<int32_t> tokens = {1, 2, 3};
  auto out = model->Forward({.sequences = {{.token_ids = tokens, .cache = cache.get()}}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("sequence 0, layer 0"));
}

TEST(FakeModelTest, EmptyBatchGivesNoLogits) {
  std::unique_ptr<FakeModel> model = MakeModel();
  ASSERT_NE(model, nullptr);
  auto out = model->Forward({});
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->logits.empty());
}

}  // namespace
}  // namespace kvserve::server
