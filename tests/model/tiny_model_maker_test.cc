// Tests for the tiny-model maker: determinism, presets, peaked logits, files on disk.
#include "model/tiny_model_maker.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "model/checkpoint.h"
#include "model/transformer.h"
#include "tests/model/tiny_models.h"

namespace kvserve::model {
namespace {

TEST(TinyModelMakerTest, SameSeedSameBytesOtherSeedOtherBytes) {
  auto a = MakeTinyModel({.arch = "qwen2", .preset = "tiny", .seed = 5});
  auto b = MakeTinyModel({.arch = "qwen2", .preset = "tiny", .seed = 5});
  auto c = MakeTinyModel({.arch = "qwen2", .preset = "tiny", .seed = 6});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE((*a)["model.safetensors"], (*c)["model.safetensors"]);
  EXPECT_EQ((*a)["config.json"], (*c)["config.json"]);
  for (const char* f :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(a->contains(f)) << f;
  }
}

TEST(TinyModelMakerTest, PresetsHaveTheDocumentedSizes) {
  auto tiny = *PresetConfig("llama", "tiny");
  EXPECT_EQ(tiny.hidden_size, 64);
  EXPECT_EQ(tiny.num_hidden_layers, 2);
  EXPECT_EQ(tiny.num_attention_heads, 4);
  EXPECT_EQ(tiny.num_key_value_heads, 2);
  auto small = *PresetConfig("qwen3", "small");
  EXPECT_EQ(small.hidden_size, 256);
  EXPECT_EQ(small.num_hidden_layers, 4);
  EXPECT_EQ(small.head_dim, 32);
  EXPECT_TRUE(small.qk_norm);
  auto bench = *PresetConfig("llama", "bench-small");
  EXPECT_EQ(bench.vocab_size, 32000);
  EXPECT_EQ(bench.hidden_size, 512);
  EXPECT_EQ(bench.num_hidden_layers, 8);
  EXPECT_EQ(bench.intermediate_size, 1408);
  auto medium = *PresetConfig("phi3", "bench-medium");
  EXPECT_EQ(medium.hidden_size, 1024);
  EXPECT_EQ(medium.num_hidden_layers, 16);
  EXPECT_EQ(medium.num_key_value_heads, 8);
  EXPECT_EQ(medium.intermediate_size, 2816);
  EXPECT_TRUE(medium.fused_qkv);
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "phi3"}) {
    EXPECT_EQ(PresetConfig(arch, "tiny")->max_position_embeddings, 4096) << arch;
  }
  auto mistral = *PresetConfig("mistral", "tiny");
  ASSERT_TRUE(mistral.sliding_window.has_value());
  EXPECT_LT(*mistral.sliding_window, 64);
  EXPECT_EQ(mistral.LayerSpecs()[0].type, cache::LayerType::kSlidingAttention);
}

TEST(TinyModelMakerTest, UnknownArchOrPresetIsNamed) {
  auto r = PresetConfig("gpt2", "tiny");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("gpt2"), std::string::npos);
  r = PresetConfig("llama", "huge");
  EXPECT_NE(r.status().message().find("huge"), std::string::npos);
}

TEST(TinyModelMakerTest, LogitsArePeaked) {
  auto model = testing::LoadTinyModel("llama", "small");
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> ids = testing::Prompt(16);
  Batch batch;
  batch.sequences.push_back({ids, nullptr, true});
  auto out = model->Forward(batch);
  ASSERT_TRUE(out.ok());
  const float stddev = out->logits[0].std().item<float>();
  EXPECT_GT(stddev, 2.5f);
  EXPECT_LT(stddev, 6.0f);
}

TEST(TinyModelMakerTest, WritesAFolderThatLoads) {
  const std::string dir = ::testing::TempDir() + "/kvserve_maker_test";
  std::filesystem::remove_all(dir);
  auto files = MakeTinyModel({.arch = "phi3", .preset = "tiny", .seed = 1});
  ASSERT_TRUE(files.ok());
  ASSERT_TRUE(WriteModelFiles(*files, dir).ok());
  auto source = base::ModelSource::FromDirectory(dir);
  ASSERT_TRUE(source.ok());
  auto model = Transformer::Load(*source, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().model_type, "phi3");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvserve::model
