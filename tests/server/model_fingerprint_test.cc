// Tests of ModelFingerprint: stable for the same model, changed by any byte of weights, config
// or tokenizer and by the runtime dtype and layer types.
#include "server/model_fingerprint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "model/tiny_model_maker.h"

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;

using Files = std::map<std::string, std::string>;

Files TinyFiles(uint64_t seed = 1) {
  absl::StatusOr<Files> files =
      model::MakeTinyModel({.arch = "llama", .preset = "tiny", .seed = seed});
  EXPECT_TRUE(files.ok()) << files.status();
  return files.ok() ? *std::move(files) : Files();
}

// What the tiny llama loads as: two full-attention layers in float32.
model::ModelInfo TinyInfo() {
  model::ModelInfo info;
  info.model_type = "llama";
  info.num_layers = 2;
  info.layer_specs = {{}, {}};
  info.dtype = at::kFloat;
  return info;
}

std::string Fingerprint(const Files& files, const model::ModelInfo& info = TinyInfo()) {
  absl::StatusOr<std::string> fingerprint =
      ModelFingerprint(base::ModelSource::FromMemory(files), info);
  EXPECT_TRUE(fingerprint.ok()) << fingerprint.status();
  return fingerprint.ok() ? *fingerprint : "<error>";
}

TEST(ModelFingerprintTest, SameModelGivesTheSameSixteenHexDigits) {
  const Files files = TinyFiles();
  ASSERT_TRUE(files.contains("model.safetensors"));
  const std::string fingerprint = Fingerprint(files);
  ASSERT_EQ(fingerprint.size(), 16u) << fingerprint;
  EXPECT_EQ(fingerprint.find_first_not_of("0123456789abcdef"), std::string::npos) << fingerprint;
  EXPECT_EQ(Fingerprint(files), fingerprint);
  // Made again from the same seed: the same bytes, the same fingerprint.
  EXPECT_EQ(Fingerprint(TinyFiles()), fingerprint);
}

TEST(ModelFingerprintTest, AnotherSeedChangesIt) {
  EXPECT_NE(Fingerprint(TinyFiles(2)), Fingerprint(TinyFiles(1)));
}

TEST(ModelFingerprintTest, OneWeightByteChangesIt) {
  const Files files = TinyFiles();
  const std::string original = Fingerprint(files);
  for (size_t offset : {size_t{0}, files.at("model.safetensors").size() / 2,
                        files.at("model.safetensors").size() - 1}) {
    Files changed = files;
    changed["model.safetensors"][offset] ^= 0x01;
    EXPECT_NE(Fingerprint(changed), original) << "byte " << offset;
  }
}

TEST(ModelFingerprintTest, ConfigAndTokenizerFilesChangeIt) {
  const Files files = TinyFiles();
  const std::string original = Fingerprint(files);
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    ASSERT_TRUE(files.contains(name)) << name;
    Files changed = files;
    changed[name] += " ";
    EXPECT_NE(Fingerprint(changed), original) << name;
  }
}

TEST(ModelFingerprintTest, RuntimeDtypeChangesIt) {
  const Files files = TinyFiles();
  model::ModelInfo bf16 = TinyInfo();
  bf16.dtype = at::kBFloat16;
  model::ModelInfo f16 = TinyInfo();
  f16.dtype = at::kHalf;
  const std::string original = Fingerprint(files);
  EXPECT_NE(Fingerprint(files, bf16), original);
  EXPECT_NE(Fingerprint(files, f16), original);
  EXPECT_NE(Fingerprint(files, f16), Fingerprint(files, bf16));
  model::ModelInfo bf16_weights = TinyInfo();  // float32 compute over bfloat16 weights
  bf16_weights.weight_dtype = at::kBFloat16;
  EXPECT_NE(Fingerprint(files, bf16_weights), original);
}

TEST(ModelFingerprintTest, LayerTypesAndWindowsChangeIt) {
  const Files files = TinyFiles();
  model::ModelInfo sliding = TinyInfo();
  sliding.layer_specs[1] = {cache::LayerType::kSlidingAttention, 4};
  model::ModelInfo wider = sliding;
  wider.layer_specs[1].window = 8;
  model::ModelInfo chunked = sliding;
  chunked.layer_specs[1].type = cache::LayerType::kChunkedAttention;
  const std::string original = Fingerprint(files);
  EXPECT_NE(Fingerprint(files, sliding), original);
  EXPECT_NE(Fingerprint(files, wider), Fingerprint(files, sliding));
  EXPECT_NE(Fingerprint(files, chunked), Fingerprint(files, sliding));
}

TEST(ModelFingerprintTest, MissingWeightsAreAnErrorNamingTheFile) {
  Files files = TinyFiles();
  files.erase("model.safetensors");
  absl::StatusOr<std::string> fingerprint =
      ModelFingerprint(base::ModelSource::FromMemory(files), TinyInfo());
  EXPECT_FALSE(fingerprint.ok());
  EXPECT_THAT(std::string(fingerprint.status().message()), HasSubstr("model.safetensors"));
}

TEST(ModelFingerprintTest, ShardedWeightsAreReadThroughTheIndex) {
  Files files = TinyFiles();
  files["model-00001-of-00001.safetensors"] = files.at("model.safetensors");
  files.erase("model.safetensors");
  files["model.safetensors.index.json"] =
      R"({"weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"}})";
  const std::string original = Fingerprint(files);
  Files changed = files;
  changed["model-00001-of-00001.safetensors"].back() ^= 0x01;
  EXPECT_NE(Fingerprint(changed), original);

  Files missing = files;
  missing.erase("model-00001-of-00001.safetensors");
  absl::StatusOr<std::string> fingerprint =
      ModelFingerprint(base::ModelSource::FromMemory(missing), TinyInfo());
  EXPECT_FALSE(fingerprint.ok());
  EXPECT_THAT(std::string(fingerprint.status().message()),
              HasSubstr("model-00001-of-00001.safetensors"));
}

}  // namespace
}  // namespace kvserve::server
