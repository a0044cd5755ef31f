// Tests for GenerationConfig (generation_config.json): every applied field, nulls and ignored
// keys, exact errors naming the key, and Transformer::Load putting the file into ModelInfo.
#include "model/generation_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <map>
#include <string>

#include "base/model_source.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"
#include "tokenizer/tiny_tokenizer.h"

namespace kvserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

GenerationConfig ParseOk(const std::string& json, int64_t vocab_size = 512) {
  absl::StatusOr<GenerationConfig> c = GenerationConfig::Parse(json, vocab_size);
  EXPECT_TRUE(c.ok()) << json << ": " << c.status();
  return c.ok() ? *c : GenerationConfig();
}

// The message of a refused text (InvalidArgument required).
std::string Error(const std::string& json, int64_t vocab_size = 512) {
  absl::StatusOr<GenerationConfig> c = GenerationConfig::Parse(json, vocab_size);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << json;
  return std::string(c.status().message());
}

TEST(GenerationConfigTest, ReadsEveryAppliedFieldAndIgnoresTheRest) {
  const GenerationConfig c = ParseOk(R"({
    "_from_model_config": true, "transformers_version": "4.51.0", "pad_token_id": 0,
    "max_length": 4096, "bos_token_id": 1,
    "do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.05,
    "repetition_penalty": 1.1, "max_new_tokens": 40, "eos_token_id": [2, 7]
  })");
  EXPECT_EQ(c.do_sample, true);
  EXPECT_EQ(c.temperature, 0.6);
  EXPECT_EQ(c.top_k, 20);
  EXPECT_EQ(c.top_p, 0.95);
  EXPECT_EQ(c.min_p, 0.05);
  EXPECT_EQ(c.repetition_penalty, 1.1);
  EXPECT_EQ(c.max_new_tokens, 40);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2, 7));
}

TEST(GenerationConfigTest, MissingAndNullFieldsStayUnset) {
  for (const char* json : {"{}", R"({"do_sample": null, "temperature": null, "top_k": null,
                                     "top_p": null, "min_p": null, "repetition_penalty": null,
                                     "max_new_tokens": null, "eos_token_id": null})"}) {
    SCOPED_TRACE(json);
    const GenerationConfig c = ParseOk(json);
    EXPECT_FALSE(c.do_sample.has_value());
    EXPECT_FALSE(c.temperature.has_value());
    EXPECT_FALSE(c.top_k.has_value());
    EXPECT_FALSE(c.top_p.has_value());
    EXPECT_FALSE(c.min_p.has_value());
    EXPECT_FALSE(c.repetition_penalty.has_value());
    EXPECT_FALSE(c.max_new_tokens.has_value());
    EXPECT_THAT(c.eos_token_ids, IsEmpty());
  }
}

TEST(GenerationConfigTest, EosTokenIdIsAnIntOrAList) {
  EXPECT_THAT(ParseOk(R"({"eos_token_id": 5})").eos_token_ids, ElementsAre(5));
  EXPECT_THAT(ParseOk(R"({"eos_token_id": [511, 0, 3]})").eos_token_ids, ElementsAre(511, 0, 3));
  // Greedy by temperature 0 and the bounds of each range are accepted.
  const GenerationConfig c = ParseOk(
      R"({"do_sample": false, "temperature": 0, "top_k": 0, "top_p": 1, "min_p": 1,
          "max_new_tokens": 1})");
  EXPECT_EQ(c.do_sample, false);
  EXPECT_EQ(c.temperature, 0.0);
  EXPECT_EQ(c.top_k, 0);
  EXPECT_EQ(c.top_p, 1.0);
  EXPECT_EQ(c.min_p, 1.0);
  EXPECT_EQ(c.max_new_tokens, 1);
  // Integers are numbers too.
  EXPECT_EQ(ParseOk(R"({"temperature": 2})").temperature, 2.0);
}

TEST(GenerationConfigTest, MalformedValuesAreRefusedNamingTheKey) {
  EXPECT_EQ(Error("{\"top_k\": 5"), "generation_config.json: not valid JSON");
  EXPECT_EQ(Error("[1, 2]"), "generation_config.json: must be a JSON object");
  EXPECT_EQ(Error(R"({"do_sample": "yes"})"),
            "generation_config.json: do_sample: must be true or false");
  EXPECT_EQ(Error(R"({"temperature": "hot"})"),
            "generation_config.json: temperature: must be a number");
  EXPECT_EQ(Error(R"({"temperature": -0.5})"), "generation_config.json: temperature: must be >= 0");
  EXPECT_EQ(Error(R"({"top_p": 0})"), "generation_config.json: top_p: must be in (0, 1]");
  EXPECT_EQ(Error(R"({"top_p": 1.5})"), "generation_config.json: top_p: must be in (0, 1]");
  EXPECT_EQ(Error(R"({"min_p": 1.01})"), "generation_config.json: min_p: must be in [0, 1]");
  EXPECT_EQ(Error(R"({"min_p": -0.1})"), "generation_config.json: min_p: must be in [0, 1]");
  EXPECT_EQ(Error(R"({"repetition_penalty": 0})"),
            "generation_config.json: repetition_penalty: must be > 0");
  EXPECT_EQ(Error(R"({"top_k": -1})"), "generation_config.json: top_k: must be >= 0");
  EXPECT_EQ(Error(R"({"top_k": 2.5})"), "generation_config.json: top_k: must be an integer");
  EXPECT_EQ(Error(R"({"max_new_tokens": 0})"),
            "generation_config.json: max_new_tokens: must be >= 1");
  EXPECT_EQ(Error(R"({"max_new_tokens": "64"})"),
            "generation_config.json: max_new_tokens: must be an integer");
  EXPECT_EQ(Error(R"({"max_new_tokens": 18446744073709551615})"),
            "generation_config.json: max_new_tokens: is out of range");
  EXPECT_EQ(Error(R"({"eos_token_id": []})"),
            "generation_config.json: eos_token_id: must not be an empty list");
  EXPECT_EQ(Error(R"({"eos_token_id": "</s>"})"),
            "generation_config.json: eos_token_id: must be an integer token id or a list of them");
  EXPECT_EQ(Error(R"({"eos_token_id": 512})"),
            "generation_config.json: eos_token_id: 512 is not a token id in [0, 512)");
  EXPECT_EQ(Error(R"({"eos_token_id": [2, -1]})"),
            "generation_config.json: eos_token_id[1]: -1 is not a token id in [0, 512)");
  EXPECT_EQ(Error(R"({"eos_token_id": [2, 3, 9]})", /*vocab_size=*/8),
            "generation_config.json: eos_token_id[2]: 9 is not a token id in [0, 8)");
}

// A tiny llama folder with `generation_config` as its generation_config.json (none when empty),
// loaded through the real loader from disk.
class GenerationConfigLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("kvserve_generation_config_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<std::unique_ptr<Transformer>> Load(const std::string& generation_config) {
    absl::StatusOr<std::map<std::string, std::string>> files =
        MakeTinyModel({.arch = "llama", .preset = "tiny", .seed = 3});
    if (!files.ok()) return files.status();
    if (!generation_config.empty()) (*files)["generation_config.json"] = generation_config;
    if (absl::Status written = WriteModelFiles(*files, dir_.string()); !written.ok()) {
      return written;
    }
    absl::StatusOr<base::ModelSource> source = base::ModelSource::FromDirectory(dir_.string());
    if (!source.ok()) return source.status();
    return Transformer::Load(*source, {});
  }

  std::filesystem::path dir_;
};

TEST_F(GenerationConfigLoadTest, WithoutTheFileConfigJsonsEosAndNoDefaults) {
  absl::StatusOr<std::unique_ptr<Transformer>> model = Load("");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelInfo& info = (*model)->info();
  EXPECT_THAT(info.eos_token_ids, ElementsAre(tokenizer::kTinyEosId));
  EXPECT_FALSE(info.generation.max_new_tokens.has_value());
  EXPECT_FALSE(info.generation.do_sample.has_value());
  EXPECT_THAT(info.generation.eos_token_ids, IsEmpty());
}

TEST_F(GenerationConfigLoadTest, ItsEosListReplacesConfigJsonsAndItsDefaultsReachModelInfo) {
  absl::StatusOr<std::unique_ptr<Transformer>> model = Load(
      R"({"eos_token_id": [5, 257], "max_new_tokens": 40, "do_sample": true, "temperature": 0.7,
          "top_k": 10, "transformers_version": "4.51.0"})");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelInfo& info = (*model)->info();
  EXPECT_THAT(info.eos_token_ids, ElementsAre(5, tokenizer::kTinyEosId));
  EXPECT_THAT(info.generation.eos_token_ids, ElementsAre(5, tokenizer::kTinyEosId));
  EXPECT_EQ(info.generation.max_new_tokens, 40);
  EXPECT_EQ(info.generation.do_sample, true);
  EXPECT_EQ(info.generation.temperature, 0.7);
  EXPECT_EQ(info.generation.top_k, 10);
}

TEST_F(GenerationConfigLoadTest, WithoutAnEosItKeepsConfigJsons) {
  absl::StatusOr<std::unique_ptr<Transformer>> model = Load(R"({"max_new_tokens": 7})");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT((*model)->info().eos_token_ids, ElementsAre(tokenizer::kTinyEosId));
  EXPECT_EQ((*model)->info().generation.max_new_tokens, 7);
}

TEST_F(GenerationConfigLoadTest, AMalformedFileIsALoadErrorNamingTheFileAndKey) {
  // The tiny preset's vocabulary has 320 ids.
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Load(R"({"eos_token_id": [257, 320], "max_new_tokens": 40})");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.status().message(),
            dir_.string() +
                "/generation_config.json: eos_token_id[1]: 320 is not a token id in [0, 320)");

  model = Load(R"({"max_new_tokens": -4})");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(),
            dir_.string() + "/generation_config.json: max_new_tokens: must be >= 1");

  model = Load("not json");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(), dir_.string() + "/generation_config.json: not valid JSON");
}

}  // namespace
}  // namespace kvserve::model
