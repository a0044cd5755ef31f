// Tests for model/model_config: config.json parsing, defaults, layer types and errors.
#include "model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace kvserve::model {
namespace {

using cache::LayerSpec;
using cache::LayerType;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr LayerType kFull = LayerType::kFullAttention;
constexpr LayerType kSliding = LayerType::kSlidingAttention;
constexpr LayerType kChunked = LayerType::kChunkedAttention;

// A minimal valid config of `model_type` with 4 layers, edited by the test.
Json BaseConfig(const std::string& model_type) {
  return {{"model_type", model_type}, {"vocab_size", 300},      {"hidden_size", 64},
          {"intermediate_size", 128}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}};
}

ModelConfig ParseOk(const Json& json) {
  absl::StatusOr<ModelConfig> config = ModelConfig::Parse(json.dump());
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : ModelConfig();
}

// Parsing must fail with InvalidArgument and a message containing `problem`.
void ExpectError(const Json& json, const std::string& problem) {
  absl::StatusOr<ModelConfig> config = ModelConfig::Parse(json.dump());
  ASSERT_FALSE(config.ok()) << "expected an error containing: " << problem;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(problem));
}

void ExpectRoundTrip(const ModelConfig& config) {
  absl::StatusOr<ModelConfig> again = ModelConfig::Parse(config.ToJson());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << config.ToJson();
  EXPECT_TRUE(*again == config) << config.ToJson() << "\nreads back as\n" << again->ToJson();
}

TEST(ModelConfigTest, ParsesLlamaWithDefaults) {
  ModelConfig c = ParseOk(BaseConfig("llama"));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(c.partial_rotary_factor, 1.0);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.fused_qkv);
  EXPECT_FALSE(c.fused_gate_up);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, std::nullopt);
  EXPECT_EQ(c.layer_types, std::vector<LayerType>(4, kFull));
  EXPECT_EQ(c.LayerSpecs(), std::vector<LayerSpec>(4, LayerSpec{kFull, 0}));
  EXPECT_EQ(c.bos_token_id, std::nullopt);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.torch_dtype, "");

  Json json = BaseConfig("llama");
  json.erase("num_key_value_heads");
  EXPECT_EQ(ParseOk(json).num_key_value_heads, 4);
}

TEST(ModelConfigTest, ParsesLlama3Config) {
  Json json = BaseConfig("llama");
  json.update({{"rope_scaling",
                {{"factor", 32.0},
                 {"high_freq_factor", 4.0},
                 {"low_freq_factor", 1.0},
                 {"original_max_position_embeddings", 8192},
                 {"rope_type", "llama3"}}},
               {"rope_theta", 500000.0},
               {"max_position_embeddings", 131072},
               {"rms_norm_eps", 1e-5},
               {"tie_word_embeddings", true},
               {"vocab_size", 128256},
               {"bos_token_id", 128000},
               {"eos_token_id", {128001, 128008, 128009}},
               {"torch_dtype", "bfloat16"},
               {"head_dim", 16}});
  ModelConfig c = ParseOk(json);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  ExpectRoundTrip(c);
}

TEST(ModelConfigTest, EosTokenIdIsAnIntAListOrNull) {
  Json json = BaseConfig("llama");
  json["eos_token_id"] = 2;
  EXPECT_EQ(ParseOk(json).eos_token_ids, (std::vector<int32_t>{2}));
  json["eos_token_id"] = {1, 2};
  EXPECT_EQ(ParseOk(json).eos_token_ids, (std::vector<int32_t>{1, 2}));
  json["eos_token_id"] = nullptr;
  EXPECT_TRUE(ParseOk(json).eos_token_ids.empty());
  json["eos_token_id"] = "2";
  ExpectError(json, "field 'eos_token_id' must be a token id");
  json["eos_token_id"] = {1, -2};
  ExpectError(json, "field 'eos_token_id[1]' must be a token id");
  json["eos_token_id"] = 1;
  json["pad_token_id"] = 1.5;
  ExpectError(json, "field 'pad_token_id' must be a token id");
}

TEST(ModelConfigTest, MistralSlidingWindow) {
  Json json = BaseConfig("mistral");
  json["sliding_window"] = 8;
  json["head_dim"] = 32;  // explicit, need not be hidden / heads
  ModelConfig c = ParseOk(json);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.layer_types, std::vector<LayerType>(4, kSliding));
  EXPECT_EQ(c.LayerSpecs(), std::vector<LayerSpec>(4, LayerSpec{kSliding, 8}));
  ExpectRoundTrip(c);

  json["sliding_window"] = nullptr;
  json["head_dim"] = nullptr;
  c = ParseOk(json);
  EXPECT_EQ(c.sliding_window, std::nullopt);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.layer_types, std::vector<LayerType>(4, kFull));

  json["sliding_window"] = 1;
  ExpectError(json, "field 'sliding_window' must be in [2, 1048576], got 1");
}

TEST(ModelConfigTest, Qwen2SlidingRules) {
  Json json = BaseConfig("qwen2");
  json["sliding_window"] = 16;
  // use_sliding_window defaults to false: the window is ignored.
  ModelConfig c = ParseOk(json);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, std::nullopt);
  EXPECT_EQ(c.layer_types, std::vector<LayerType>(4, kFull));
  EXPECT_EQ(c.max_position_embeddings, 32768);

  // Layers at or past max_window_layers slide.
  json["use_sliding_window"] = true;
  json["max_window_layers"] = 2;
  c = ParseOk(json);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_types, (std::vector<LayerType>{kFull, kFull, kSliding, kSliding}));
  EXPECT_EQ(c.LayerSpecs(),
            (std::vector<LayerSpec>{{kFull, 0}, {kFull, 0}, {kSliding, 16}, {kSliding, 16}}));
  ExpectRoundTrip(c);

  // The default max_window_layers (28) exceeds 4 layers: nothing slides.
  json.erase("max_window_layers");
  EXPECT_EQ(ParseOk(json).layer_types, std::vector<LayerType>(4, kFull));

  json["max_window_layers"] = 0;
  EXPECT_EQ(ParseOk(json).layer_types, std::vector<LayerType>(4, kSliding));

  json["attention_bias"] = false;
  EXPECT_FALSE(ParseOk(json).attention_bias);

  // Explicit sliding layers need an effective window.
  json["use_sliding_window"] = false;
  json["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  ExpectError(json, "field 'sliding_window' (with use_sliding_window true) is required");
}

TEST(ModelConfigTest, Qwen3HasQkNormAndDefaultHeadDim) {
  Json json = BaseConfig("qwen3");
  ModelConfig c = ParseOk(json);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 128);  // Transformers' Qwen3Config default
  json["head_dim"] = 16;
  json["tie_word_embeddings"] = true;
  c = ParseOk(json);
  EXPECT_EQ(c.head_dim, 16);
  ExpectRoundTrip(c);
}

TEST(ModelConfigTest, Phi3IsFusedAndHonoursSlidingWindow) {
  Json json = BaseConfig("phi3");
  json.update({{"sliding_window", 2047},
               {"partial_rotary_factor", 0.5},
               {"bos_token_id", 1},
               {"eos_token_id", 32000},
               {"pad_token_id", 32000},
               {"rope_scaling", nullptr}});
  ModelConfig c = ParseOk(json);
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_TRUE(c.fused_gate_up);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_EQ(c.sliding_window, 2047);
  EXPECT_EQ(c.layer_types, std::vector<LayerType>(4, kSliding));
  EXPECT_EQ(c.pad_token_id, 32000);
  ExpectRoundTrip(c);

  json["partial_rotary_factor"] = 0.1;  // 16 * 0.1 = 1.6: no even rotary dimension
  ExpectError(json, "field 'partial_rotary_factor'");
}

TEST(ModelConfigTest, UnsupportedRopeTypesAreNamed) {
  Json json = BaseConfig("phi3");
  json["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  ExpectError(json,
              "field 'rope_scaling.type' value 'longrope' is not supported; supported: "
              "default, linear, dynamic, llama3, yarn");
  json["rope_scaling"] = {{"rope_type", "su"}};
  ExpectError(json, "value 'su' is not supported");
  json["rope_scaling"] = {{"factor", 2.0}};
  ExpectError(json, "field 'rope_scaling' has no 'rope_type'");
  json["rope_scaling"] = "linear";
  ExpectError(json, "field 'rope_scaling' must be an object or null");
}

TEST(ModelConfigTest, RopeScalingTypes) {
  Json json = BaseConfig("llama");
  json["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // legacy key
  ModelConfig c = ParseOk(json);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c.rope_scaling.factor, 2.0);
  ExpectRoundTrip(c);

  json["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  c = ParseOk(json);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kDynamic);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 0);
  ExpectRoundTrip(c);

  json["rope_scaling"] = {{"rope_type", "yarn"},
                          {"factor", 4.0},
                          {"original_max_position_embeddings", 32768},
                          {"beta_fast", 16}};
  c = ParseOk(json);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_EQ(c.rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_EQ(c.rope_scaling.attention_factor, std::nullopt);
  EXPECT_DOUBLE_EQ(c.rope_scaling.YarnAttentionFactor(), 0.1 * std::log(4.0) + 1.0);
  ExpectRoundTrip(c);
  json["rope_scaling"]["attention_factor"] = 1.25;
  c = ParseOk(json);
  EXPECT_EQ(c.rope_scaling.YarnAttentionFactor(), 1.25);
  ExpectRoundTrip(c);

  json["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(ParseOk(json).rope_scaling, RopeScaling());

  json["rope_scaling"] = {{"rope_type", "linear"}};
  ExpectError(json, "required field 'rope_scaling.factor' is missing");
  json["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  ExpectError(json, "required field 'rope_scaling.low_freq_factor' is missing");
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", -1.0}};
  ExpectError(json, "field 'rope_scaling.factor' must be positive");
}

TEST(ModelConfigTest, AcceptsTransformersV5RopeParameters) {
  Json json = BaseConfig("llama");
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  json["dtype"] = "float32";
  ModelConfig c = ParseOk(json);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(c.torch_dtype, "float32");

  json["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e6}};
  c = ParseOk(json);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  json["rope_parameters"] = {{"rope_type", "longrope"}};
  ExpectError(json, "field 'rope_parameters.rope_type' value 'longrope' is not supported");
}

TEST(ModelConfigTest, ExplicitAndChunkedLayerTypes) {
  Json json = BaseConfig("llama");
  json["attention_chunk_size"] = 8;
  ModelConfig c = ParseOk(json);
  EXPECT_EQ(c.layer_types, std::vector<LayerType>(4, kChunked));
  EXPECT_EQ(c.LayerSpecs(), std::vector<LayerSpec>(4, LayerSpec{kChunked, 8}));
  ExpectRoundTrip(c);

  // Both kinds: every sliding layer gets the chunk size, as Transformers does.
  json["sliding_window"] = 4;
  json["layer_types"] = {"chunked_attention", "sliding_attention", "full_attention",
                         "chunked_attention"};
  c = ParseOk(json);
  EXPECT_EQ(c.layer_types, (std::vector<LayerType>{kChunked, kSliding, kFull, kChunked}));
  EXPECT_EQ(c.LayerSpecs(),
            (std::vector<LayerSpec>{{kChunked, 8}, {kSliding, 8}, {kFull, 0}, {kChunked, 8}}));
  ExpectRoundTrip(c);

  json["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  c = ParseOk(json);
  EXPECT_EQ(c.LayerSpecs()[1], (LayerSpec{kSliding, 4}));

  json["layer_types"] = {"full_attention", "sliding_attention"};
  ExpectError(json, "field 'layer_types' has 2 entries but num_hidden_layers is 4");
  json["layer_types"] = {"full_attention", "global", "full_attention", "full_attention"};
  ExpectError(json, "field 'layer_types[1]': layer type 'global' is not supported");
  json.erase("attention_chunk_size");
  json["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
  ExpectError(json, "field 'attention_chunk_size' is required by chunked_attention layers");
  json.erase("sliding_window");
  json["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  ExpectError(json, "field 'sliding_window' is required by sliding_attention layers");
}

TEST(ModelConfigTest, MissingRequiredFieldsAreNamed) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads"}) {
    Json json = BaseConfig("llama");
    json.erase(field);
    ExpectError(json, std::string("required field '") + field + "' is missing");
    json[field] = nullptr;
    ExpectError(json, std::string("required field '") + field + "' is missing");
  }
  Json json = BaseConfig("llama");
  json.erase("model_type");
  ExpectError(json,
              "required field 'model_type' is missing; supported: bart, gemma2, gemma3_text, "
              "llama, mamba, mistral, phi3, qwen2, qwen3");
}

TEST(ModelConfigTest, UnknownModelTypeListsSupported) {
  ExpectError(BaseConfig("gpt2"),
              "model_type 'gpt2' is not supported; supported: bart, gemma2, gemma3_text, llama, "
              "mamba, mistral, phi3, qwen2, qwen3");
  EXPECT_EQ(ModelConfig::SupportedModelTypes(),
            (std::vector<std::string>{"gemma2", "gemma3_text", "llama", "mistral", "phi3", "qwen2",
                                      "qwen3"}));
}

TEST(ModelConfigTest, InconsistentSizesAreNamed) {
  Json json = BaseConfig("llama");
  json["num_attention_heads"] = 5;
  json["num_key_value_heads"] = 5;
  ExpectError(json, "field 'num_attention_heads' (5) does not divide hidden_size (64)");

  json = BaseConfig("llama");
  json["num_key_value_heads"] = 3;
  ExpectError(json, "field 'num_key_value_heads' (3) does not divide num_attention_heads (4)");

  json = BaseConfig("llama");
  json["hidden_size"] = 0;
  ExpectError(json, "field 'hidden_size' must be in [1, 65536], got 0");
  json = BaseConfig("llama");
  json["intermediate_size"] = -128;
  ExpectError(json, "field 'intermediate_size' must be in [1, 262144], got -128");
  json = BaseConfig("llama");
  json["num_key_value_heads"] = 0;
  ExpectError(json, "field 'num_key_value_heads' must be in [1, 1024], got 0");
  json = BaseConfig("llama");
  json["rms_norm_eps"] = 0;
  ExpectError(json, "field 'rms_norm_eps' must be positive");
}

TEST(ModelConfigTest, WrongJsonTypesAreNamed) {
  Json json = BaseConfig("llama");
  json["hidden_size"] = "64";
  ExpectError(json, "field 'hidden_size' must be an integer, got a string");
  json = BaseConfig("llama");
  json["vocab_size"] = 300.5;
  ExpectError(json, "field 'vocab_size' must be an integer, got a float");
  json = BaseConfig("llama");
  json["tie_word_embeddings"] = 1;
  ExpectError(json, "field 'tie_word_embeddings' must be a boolean");
  json = BaseConfig("llama");
  json["model_type"] = 3;
  ExpectError(json, "field 'model_type' must be a string");
  json = BaseConfig("llama");
  json["mlp_bias"] = true;
  ExpectError(json, "field 'mlp_bias' true is not supported");

  absl::StatusOr<ModelConfig> not_json = ModelConfig::Parse("{\"model_type\": ");
  ASSERT_FALSE(not_json.ok());
  EXPECT_THAT(std::string(not_json.status().message()), HasSubstr("not valid JSON"));
  absl::StatusOr<ModelConfig> not_object = ModelConfig::Parse("[]");
  ASSERT_FALSE(not_object.ok());
  EXPECT_THAT(std::string(not_object.status().message()), HasSubstr("must be a JSON object"));
}

// The exact error Parse gives for `json_text`.
std::string ParseError(const std::string& json_text) {
  absl::StatusOr<ModelConfig> config = ModelConfig::Parse(json_text);
  EXPECT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

std::string ReadHostile(const std::string& name) {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/tests/data/hostile/config/" + name,
                   std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ModelConfigTest, SizesThatSizeAllocationsAreBounded) {
  // Each used to reach an allocation: 2^31 + 64 positions ended the process in LibTorch.
  EXPECT_EQ(ParseError(ReadHostile("max_position_embeddings_2e31.json")),
            "config.json: field 'max_position_embeddings' must be in [1, 1048576], got "
            "2147483712");
  // Checked before layer_types is filled in, one entry per layer.
  EXPECT_EQ(ParseError(ReadHostile("num_hidden_layers_2e62.json")),
            "config.json: field 'num_hidden_layers' must be in [1, 1024], got "
            "4611686018427387904");
  EXPECT_EQ(ParseError(ReadHostile("vocab_size_2e24.json")),
            "config.json: field 'vocab_size' must be in [1, 4194304], got 16777216");
  EXPECT_EQ(ParseError(ReadHostile("bos_token_id_beyond_vocab.json")),
            "config.json: field 'bos_token_id' (300) must be below vocab_size (300)");

  const std::pair<std::string, std::string> too_large[] = {
      {"hidden_size", "field 'hidden_size' must be in [1, 65536], got 65537"},
      {"intermediate_size", "field 'intermediate_size' must be in [1, 262144], got 262145"},
      {"num_attention_heads", "field 'num_attention_heads' must be in [1, 1024], got 1025"},
      {"num_key_value_heads", "field 'num_key_value_heads' must be in [1, 1024], got 1025"},
      {"head_dim", "field 'head_dim' must be in [1, 1024], got 1025"},
      {"sliding_window", "field 'sliding_window' must be in [2, 1048576], got 1048577"},
      {"attention_chunk_size", "field 'attention_chunk_size' must be in [2, 1048576], got 1048577"},
  };
  const std::map<std::string, int64_t> limits = {{"hidden_size", 65536},
                                                 {"intermediate_size", 262144},
                                                 {"num_attention_heads", 1024},
                                                 {"num_key_value_heads", 1024},
                                                 {"head_dim", 1024},
                                                 {"sliding_window", 1048576},
                                                 {"attention_chunk_size", 1048576}};
  for (const auto& [field, message] : too_large) {
    Json json = BaseConfig("mistral");
    json[field] = limits.at(field) + 1;
    ExpectError(json, message);
    EXPECT_EQ(ParseError(json.dump()), "config.json: " + message);
  }

  // The largest allowed sizes parse (the products are the checkpoint's business).
  Json largest = BaseConfig("mistral");
  largest["vocab_size"] = 4194304;
  largest["max_position_embeddings"] = 1048576;
  largest["sliding_window"] = 1048576;
  largest["num_hidden_layers"] = 1024;
  largest["num_attention_heads"] = 1024;
  largest["num_key_value_heads"] = 1024;
  largest["hidden_size"] = 65536;
  EXPECT_EQ(ParseOk(largest).max_position_embeddings, 1048576);

  Json rope = BaseConfig("llama");
  rope["rope_scaling"] = {{"rope_type", "yarn"},
                          {"factor", 4.0},
                          {"original_max_position_embeddings", int64_t{1} << 40}};
  ExpectError(rope,
              "field 'rope_scaling.original_max_position_embeddings' must be in [0, 1048576], "
              "got 1099511627776");
}

TEST(ModelConfigTest, HostileJsonDoesNotEndTheProcess) {
  // The dump of a deeply nested value in an error would recurse once per level.
  std::string deep = R"({"model_type": "llama", "hidden_size": )";
  deep += std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(ParseError(deep), "config.json: nested deeper than 64 levels");
  // Brackets inside strings do not count.
  Json json = BaseConfig("llama");
  json["torch_dtype"] = std::string(1000, '[');
  EXPECT_EQ(ParseOk(json).torch_dtype, std::string(1000, '['));
  // A huge wrong value is cut short in the message.
  json = BaseConfig("llama");
  json["hidden_size"] = std::string(1000, 'x');
  ExpectError(json, "field 'hidden_size' must be an integer, got a string \"" +
                        std::string(63, 'x') + "...");
}

TEST(ModelConfigTest, Gemma2Defaults) {
  ModelConfig c = ParseOk(BaseConfig("gemma2"));
  EXPECT_TRUE(c.gemma);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.query_pre_attn_scalar, 256);
  EXPECT_EQ(c.attn_logit_softcapping, 50.0);
  EXPECT_EQ(c.final_logit_softcapping, 30.0);
  EXPECT_EQ(c.rope_local_base_freq, std::nullopt);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 4096);
  // Sliding first, then alternating.
  EXPECT_EQ(c.layer_types, (std::vector<LayerType>{kSliding, kFull, kSliding, kFull}));
  EXPECT_EQ(c.LayerSpecs()[0], (LayerSpec{kSliding, 4096}));
  EXPECT_EQ(c.LayerSpecs()[1], (LayerSpec{kFull, 0}));
  ExpectRoundTrip(c);

  // An explicit null turns a cap off (absent means Gemma 2's default).
  Json json = BaseConfig("gemma2");
  json["attn_logit_softcapping"] = nullptr;
  json["final_logit_softcapping"] = 20.5;
  json["query_pre_attn_scalar"] = 144;
  json["sliding_window"] = 8;
  c = ParseOk(json);
  EXPECT_EQ(c.attn_logit_softcapping, std::nullopt);
  EXPECT_EQ(c.final_logit_softcapping, 20.5);
  EXPECT_EQ(c.query_pre_attn_scalar, 144);
  EXPECT_EQ(c.LayerSpecs()[0], (LayerSpec{kSliding, 8}));
  ExpectRoundTrip(c);

  json["final_logit_softcapping"] = 0;
  ExpectError(json, "field 'final_logit_softcapping' must be positive, got 0");
  json["final_logit_softcapping"] = nullptr;
  json["hidden_activation"] = "silu";
  ExpectError(json,
              "field 'hidden_activation' value 'silu' is not supported for gemma2; supported: "
              "gelu_pytorch_tanh");
}

TEST(ModelConfigTest, Gemma3TextDefaultsAndPattern) {
  Json json = BaseConfig("gemma3_text");
  json["num_hidden_layers"] = 12;
  ModelConfig c = ParseOk(json);
  EXPECT_TRUE(c.gemma);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.attn_logit_softcapping, std::nullopt);
  EXPECT_EQ(c.final_logit_softcapping, std::nullopt);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_local_base_freq, 10000.0);
  // Every sixth layer is full.
  std::vector<LayerType> expected(12, kSliding);
  expected[5] = expected[11] = kFull;
  EXPECT_EQ(c.layer_types, expected);
  ExpectRoundTrip(c);

  json["sliding_window_pattern"] = 3;
  json["rope_local_base_freq"] = 5000.0;
  c = ParseOk(json);
  EXPECT_EQ(c.layer_types[2], kFull);
  EXPECT_EQ(c.layer_types[3], kSliding);
  EXPECT_EQ(c.rope_local_base_freq, 5000.0);
  ExpectRoundTrip(c);

  // Transformers v5: RoPE parameters per layer type.
  Json v5 = BaseConfig("gemma3_text");
  v5["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}};
  c = ParseOk(v5);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_local_base_freq, 20000.0);
  ExpectRoundTrip(c);
  v5["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  v5["rope_parameters"]["sliding_attention"]["factor"] = 2.0;
  ExpectError(v5, "field 'rope_parameters.sliding_attention.rope_type' must be default");

  json["sliding_window_pattern"] = 0;
  ExpectError(json, "field 'sliding_window_pattern' must be positive, got 0");
  json["sliding_window_pattern"] = nullptr;
  json["rope_local_base_freq"] = -1.0;
  ExpectError(json, "field 'rope_local_base_freq' must be positive, got -1");
}

TEST(ModelConfigTest, EveryModelTypeRoundTrips) {
  for (const std::string& type : ModelConfig::SupportedModelTypes()) {
    Json json = BaseConfig(type);
    json["head_dim"] = 16;
    json["eos_token_id"] = {5, 6};
    json["torch_dtype"] = "float32";
    ModelConfig c = ParseOk(json);
    EXPECT_EQ(c.model_type, type);
    ExpectRoundTrip(c);
    Json written = Json::parse(c.ToJson());
    EXPECT_TRUE(written["architectures"].is_array()) << type;
  }
}

}  // namespace
}  // namespace kvserve::model
