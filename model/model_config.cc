// Parses and writes Hugging Face config.json for llama, mistral, qwen2, qwen3, phi3, gemma2 and
// gemma3_text.
#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/string_cat.h"
#include "tokenizer/tokenizer_json_util.h"

namespace kvserve::model {

using base::Cat;

namespace {

using Json = nlohmann::json;
using cache::LayerType;

// Transformers' defaults that differ between the supported model types.
struct ArchDefaults {
  std::string_view model_type;
  std::string_view architecture;  // the "architectures" entry ToJson writes
  int64_t max_position_embeddings;
  double rms_norm_eps;
  bool attention_bias;
  std::optional<int64_t> head_dim;  // nullopt: hidden_size / num_attention_heads
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
};

constexpr ArchDefaults kArchs[] = {
    {"gemma2", "Gemma2ForCausalLM", 8192, 1e-6, false, 256, 10000.0, true},
    {"gemma3_text", "Gemma3ForCausalLM", 131072, 1e-6, false, 256, 1000000.0, true},
    {"llama", "LlamaForCausalLM", 2048, 1e-6, false, std::nullopt},
    {"mistral", "MistralForCausalLM", 4096 * 32, 1e-6, false, std::nullopt},
    {"phi3", "Phi3ForCausalLM", 4096, 1e-5, false, std::nullopt},
    {"qwen2", "Qwen2ForCausalLM", 32768, 1e-6, true, std::nullopt},
    {"qwen3", "Qwen3ForCausalLM", 32768, 1e-6, false, 128},
};

// Transformers' Gemma defaults.
constexpr int64_t kGemmaSlidingWindow = 4096;
constexpr double kGemmaQueryPreAttnScalar = 256;
constexpr double kGemma2AttnSoftcap = 50.0, kGemma2FinalSoftcap = 30.0;
constexpr double kGemma3LocalRopeBase = 10000.0;
constexpr int64_t kGemma3SlidingPattern = 6;

const ArchDefaults* FindArch(std::string_view model_type) {
  for (const ArchDefaults& arch : kArchs) {
    if (arch.model_type == model_type) return &arch;
  }
  return nullptr;
}

bool IsQwen(std::string_view model_type) { return model_type == "qwen2" || model_type == "qwen3"; }
bool IsGemma(std::string_view model_type) {
  return model_type == "gemma2" || model_type == "gemma3_text";
}

// Upper bounds of the sizes that size allocations: far above every released model of the
// supported types, far below what would overflow or exhaust memory when multiplied.
constexpr int64_t kMaxVocabSize = int64_t{1} << 22;         // 4,194,304
constexpr int64_t kMaxHiddenSize = int64_t{1} << 16;        // 65,536
constexpr int64_t kMaxIntermediateSize = int64_t{1} << 18;  // 262,144
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxPositions = int64_t{1} << 20;  // 1,048,576

// Transformers' default max_window_layers for qwen2 and qwen3.
constexpr int64_t kDefaultMaxWindowLayers = 28;

// `text` cut to 64 bytes with "..." after, so that a huge value cannot flood an error.
std::string Shortened(std::string text) {
  constexpr size_t kMaxBytes = 64;
  if (text.size() <= kMaxBytes) return text;
  text.resize(kMaxBytes);
  return text + "...";
}

// Reads typed fields of one JSON object. The first error sticks: later reads return
// defaults and status() reports that first error, so parsing code reads straight through.
// A field that is present but null counts as absent, as in Transformers.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string prefix, absl::Status* status)
      : object_(object), prefix_(std::move(prefix)), status_(status) {}

  bool Has(std::string_view key) const { return Get(key) != nullptr; }
  const Json* Get(std::string_view key) const {
    auto it = object_.find(std::string(key));
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string Name(std::string_view key) const { return Cat(prefix_, key); }

  void Fail(std::string message) {
    if (status_->ok()) *status_ = absl::InvalidArgumentError(Cat("config.json: ", message));
  }
  void WrongType(std::string_view key, std::string_view expected, const Json& value) {
    Fail(Cat("field '", Name(key), "' must be ", expected, ", got ",
             tokenizer::JsonKindPhrase(value), " ", Shortened(value.dump())));
  }

  std::optional<int64_t> OptionalInt(std::string_view key) {
    const Json* value = Get(key);
    if (value == nullptr) return std::nullopt;
    if (value->is_number_unsigned() &&
        value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      WrongType(key, "a 64-bit integer", *value);
      return std::nullopt;
    }
    if (!value->is_number_integer()) {
      WrongType(key, "an integer", *value);
      return std::nullopt;
    }
    return value->get<int64_t>();
  }
  int64_t RequiredInt(std::string_view key) {
    if (!Has(key)) {
      Fail(Cat("required field '", Name(key), "' is missing"));
      return 0;
    }
    return OptionalInt(key).value_or(0);
  }
  int64_t Int(std::string_view key, int64_t default_value) {
    return OptionalInt(key).value_or(default_value);
  }

  std::optional<double> OptionalDouble(std::string_view key) {
    const Json* value = Get(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number()) {
      WrongType(key, "a number", *value);
      return std::nullopt;
    }
    return value->get<double>();
  }
  double RequiredDouble(std::string_view key) {
    if (!Has(key)) {
      Fail(Cat("required field '", Name(key), "' is missing"));
      return 0;
    }
    return OptionalDouble(key).value_or(0);
  }
  double Double(std::string_view key, double default_value) {
    return OptionalDouble(key).value_or(default_value);
  }

  bool Bool(std::string_view key, bool default_value) {
    const Json* value = Get(key);
    if (value == nullptr) return default_value;
    if (!value->is_boolean()) {
      WrongType(key, "a boolean", *value);
      return default_value;
    }
    return value->get<bool>();
  }

  std::optional<std::string> OptionalString(std::string_view key) {
    const Json* value = Get(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string()) {
      WrongType(key, "a string", *value);
      return std::nullopt;
    }
    return value->get<std::string>();
  }

  // A token id: an integer in [0, 2^31).
  std::optional<int32_t> TokenId(std::string_view key, const Json& value) {
    const bool in_range =
        value.is_number_unsigned() &&
        value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
    if (!in_range) {
      WrongType(key, "a token id (an integer in [0, 2^31))", value);
      return std::nullopt;
    }
    return static_cast<int32_t>(value.get<int64_t>());
  }
  std::optional<int32_t> OptionalTokenId(std::string_view key) {
    const Json* value = Get(key);
    if (value == nullptr) return std::nullopt;
    return TokenId(key, *value);
  }

 private:
  const Json& object_;
  std::string prefix_;
  absl::Status* status_;
};

constexpr RopeScaling::Type kRopeTypes[] = {RopeScaling::Type::kNone, RopeScaling::Type::kLinear,
                                            RopeScaling::Type::kDynamic, RopeScaling::Type::kLlama3,
                                            RopeScaling::Type::kYarn};

// Reads rope_scaling / rope_parameters (`fields`, named `what`) into `rope`.
void ReadRopeScaling(FieldReader& fields, std::string_view what, bool type_required,
                     RopeScaling* rope) {
  std::optional<std::string> type_name = fields.OptionalString("rope_type");
  std::string_view type_key = "rope_type";
  if (!type_name.has_value() && !fields.Has("rope_type")) {
    type_name = fields.OptionalString("type");  // the legacy spelling
    type_key = "type";
  }
  if (!type_name.has_value()) {
    if (type_required && !fields.Has("type")) {
      fields.Fail(Cat("field '", what, "' has no 'rope_type'"));
    }
    return;
  }
  std::optional<RopeScaling::Type> type;
  for (RopeScaling::Type t : kRopeTypes) {
    if (*type_name == RopeTypeName(t)) type = t;
  }
  if (!type.has_value()) {
    std::vector<std::string> names;
    for (RopeScaling::Type t : kRopeTypes) names.emplace_back(RopeTypeName(t));
    fields.Fail(Cat("field '", fields.Name(type_key), "' value '", *type_name,
                    "' is not supported; supported: ", absl::StrJoin(names, ", ")));
    return;
  }
  rope->type = *type;
  switch (rope->type) {
    case RopeScaling::Type::kNone:
      return;
    case RopeScaling::Type::kLinear:
      rope->factor = fields.RequiredDouble("factor");
      break;
    case RopeScaling::Type::kDynamic:
      rope->factor = fields.RequiredDouble("factor");
      rope->original_max_position_embeddings = fields.Int("original_max_position_embeddings", 0);
      break;
    case RopeScaling::Type::kLlama3:
      rope->factor = fields.RequiredDouble("factor");
      rope->low_freq_factor = fields.RequiredDouble("low_freq_factor");
      rope->high_freq_factor = fields.RequiredDouble("high_freq_factor");
      rope->original_max_position_embeddings =
          fields.RequiredInt("original_max_position_embeddings");
      if (rope->high_freq_factor <= rope->low_freq_factor) {
        fields.Fail(Cat("field '", fields.Name("high_freq_factor"), "' (", rope->high_freq_factor,
                        ") must exceed low_freq_factor (", rope->low_freq_factor, ")"));
      }
      if (rope->original_max_position_embeddings <= 0) {
        fields.Fail(
            Cat("field '", fields.Name("original_max_position_embeddings"), "' must be positive"));
      }
      break;
    case RopeScaling::Type::kYarn:
      rope->factor = fields.RequiredDouble("factor");
      rope->original_max_position_embeddings = fields.Int("original_max_position_embeddings", 0);
      rope->beta_fast = fields.Double("beta_fast", rope->beta_fast);
      rope->beta_slow = fields.Double("beta_slow", rope->beta_slow);
      rope->attention_factor = fields.OptionalDouble("attention_factor");
      break;
  }
  if (!(rope->factor > 0)) {
    fields.Fail(Cat("field '", fields.Name("factor"), "' must be positive, got ", rope->factor));
  }
  if (rope->original_max_position_embeddings < 0 ||
      rope->original_max_position_embeddings > kMaxPositions) {
    fields.Fail(Cat("field '", fields.Name("original_max_position_embeddings"), "' must be in [0, ",
                    kMaxPositions, "], got ", rope->original_max_position_embeddings));
  }
}

// Resolves per-layer attention kinds as Transformers does (see model_config.h).
std::vector<LayerType> ResolveLayerTypes(FieldReader& fields, const ModelConfig& config) {
  std::vector<LayerType> types;
  if (const Json* listed = fields.Get("layer_types")) {
    if (!listed->is_array()) {
      fields.WrongType("layer_types", "an array of strings", *listed);
      return types;
    }
    if (static_cast<int64_t>(listed->size()) != config.num_hidden_layers) {
      fields.Fail(Cat("field 'layer_types' has ", listed->size(),
                      " entries but num_hidden_layers is ", config.num_hidden_layers));
      return types;
    }
    for (size_t i = 0; i < listed->size(); ++i) {
      const Json& entry = (*listed)[i];
      if (!entry.is_string()) {
        fields.WrongType(Cat("layer_types[", i, "]"), "a string", entry);
        return types;
      }
      absl::StatusOr<LayerType> type = cache::ParseLayerType(entry.get<std::string>());
      if (!type.ok()) {
        fields.Fail(Cat("field 'layer_types[", i, "]': ", type.status().message()));
        return types;
      }
      types.push_back(*type);
    }
    return types;
  }
  if (IsGemma(config.model_type)) {
    // Gemma 2 alternates sliding and full layers, sliding first; Gemma 3 makes every
    // sliding_window_pattern-th layer full.
    const int64_t pattern = config.model_type == "gemma2"
                                ? 2
                                : fields.Int("sliding_window_pattern", kGemma3SlidingPattern);
    if (pattern < 1) {
      fields.Fail(Cat("field 'sliding_window_pattern' must be positive, got ", pattern));
      return types;
    }
    for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
      types.push_back((i + 1) % pattern != 0 ? LayerType::kSlidingAttention
                                             : LayerType::kFullAttention);
    }
    return types;
  }
  const int64_t max_window_layers =
      IsQwen(config.model_type) ? fields.Int("max_window_layers", kDefaultMaxWindowLayers) : 0;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    if (config.sliding_window.has_value()) {
      types.push_back(i >= max_window_layers ? LayerType::kSlidingAttention
                                             : LayerType::kFullAttention);
    } else if (config.attention_chunk_size.has_value()) {
      types.push_back(LayerType::kChunkedAttention);
    } else {
      types.push_back(LayerType::kFullAttention);
    }
  }
  return types;
}

// Checks the sizes that size allocations (and the layer_types loop) against their bounds.
void CheckBounds(FieldReader& fields, const ModelConfig& c) {
  struct Bounded {
    std::string_view name;
    int64_t value, min, max;
  };
  const Bounded sizes[] = {
      {"vocab_size", c.vocab_size, 1, kMaxVocabSize},
      {"hidden_size", c.hidden_size, 1, kMaxHiddenSize},
      {"intermediate_size", c.intermediate_size, 1, kMaxIntermediateSize},
      {"num_hidden_layers", c.num_hidden_layers, 1, kMaxLayers},
      {"num_attention_heads", c.num_attention_heads, 1, kMaxHeads},
      {"num_key_value_heads", c.num_key_value_heads, 1, kMaxHeads},
      {"head_dim", c.head_dim, 1, kMaxHeadDim},
      {"max_position_embeddings", c.max_position_embeddings, 1, kMaxPositions},
      {"sliding_window", c.sliding_window.value_or(2), 2, kMaxPositions},
      {"attention_chunk_size", c.attention_chunk_size.value_or(2), 2, kMaxPositions},
  };
  for (const Bounded& size : sizes) {
    if (size.value < size.min || size.value > size.max) {
      fields.Fail(Cat("field '", size.name, "' must be in [", size.min, ", ", size.max, "], got ",
                      size.value));
      return;
    }
  }
}

// Checks that the sizes agree and that every sliding or chunked layer has its window.
void Validate(FieldReader& fields, const ModelConfig& c, bool head_dim_written) {
  if (!head_dim_written && c.hidden_size % c.num_attention_heads != 0) {
    fields.Fail(Cat("field 'num_attention_heads' (", c.num_attention_heads,
                    ") does not divide hidden_size (", c.hidden_size, ")"));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    fields.Fail(Cat("field 'num_key_value_heads' (", c.num_key_value_heads,
                    ") does not divide num_attention_heads (", c.num_attention_heads, ")"));
  }
  const double rotary_dim = std::floor(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1) || rotary_dim < 2 ||
      static_cast<int64_t>(rotary_dim) % 2 != 0) {
    fields.Fail(Cat("field 'partial_rotary_factor' (", c.partial_rotary_factor, ") with head_dim ",
                    c.head_dim, " must give an even rotary dimension of at least 2"));
  }
  if (!(c.rms_norm_eps > 0)) {
    fields.Fail(Cat("field 'rms_norm_eps' must be positive, got ", c.rms_norm_eps));
  }
  if (!(c.rope_theta > 0)) {
    fields.Fail(Cat("field 'rope_theta' must be positive, got ", c.rope_theta));
  }
  const std::pair<std::string_view, std::optional<double>> positives[] = {
      {"query_pre_attn_scalar",
       c.gemma ? std::optional<double>(c.query_pre_attn_scalar) : std::nullopt},
      {"attn_logit_softcapping", c.attn_logit_softcapping},
      {"final_logit_softcapping", c.final_logit_softcapping},
      {"rope_local_base_freq", c.rope_local_base_freq},
  };
  for (const auto& [name, value] : positives) {
    if (value.has_value() && !(*value > 0 && std::isfinite(*value))) {
      fields.Fail(Cat("field '", name, "' must be positive, got ", *value));
    }
  }
  if (c.bos_token_id.has_value() && *c.bos_token_id >= c.vocab_size) {
    fields.Fail(Cat("field 'bos_token_id' (", *c.bos_token_id, ") must be below vocab_size (",
                    c.vocab_size, ")"));
  }
  const bool any_sliding =
      std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kSlidingAttention) > 0;
  const bool any_chunked =
      std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kChunkedAttention) > 0;
  if (any_chunked && !c.attention_chunk_size.has_value()) {
    fields.Fail("field 'attention_chunk_size' is required by chunked_attention layers");
  }
  if (any_sliding && !any_chunked && !c.sliding_window.has_value()) {
    fields.Fail(IsQwen(c.model_type)
                    ? "field 'sliding_window' (with use_sliding_window true) is required by "
                      "sliding_attention layers"
                    : "field 'sliding_window' is required by sliding_attention layers");
  }
}

// An optional number whose explicit null means "off": absent gives `absent_default`.
std::optional<double> NullableDouble(FieldReader& fields, const Json& json, std::string_view key,
                                     std::optional<double> absent_default) {
  if (!json.contains(std::string(key))) return absent_default;
  return fields.OptionalDouble(key);
}

// The Gemma-only fields (see ModelConfig::gemma).
void ReadGemmaFields(FieldReader& fields, const Json& json, ModelConfig* c) {
  c->gemma = true;
  const std::string_view act_key =
      fields.Has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string act = fields.OptionalString(act_key).value_or("gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh") {
    fields.Fail(Cat("field '", act_key, "' value '", Shortened(act), "' is not supported for ",
                    c->model_type, "; supported: gelu_pytorch_tanh"));
  }
  c->query_pre_attn_scalar = fields.Double("query_pre_attn_scalar", kGemmaQueryPreAttnScalar);
  const bool gemma2 = c->model_type == "gemma2";
  c->attn_logit_softcapping =
      NullableDouble(fields, json, "attn_logit_softcapping",
                     gemma2 ? std::optional<double>(kGemma2AttnSoftcap) : std::nullopt);
  c->final_logit_softcapping =
      NullableDouble(fields, json, "final_logit_softcapping",
                     gemma2 ? std::optional<double>(kGemma2FinalSoftcap) : std::nullopt);
  if (!gemma2)
    c->rope_local_base_freq = fields.Double("rope_local_base_freq", kGemma3LocalRopeBase);
}

// config.json's object, type-checked and validated (see ModelConfig::Parse).
absl::StatusOr<ModelConfig> ParseObject(const Json& json);

}  // namespace

double RopeScaling::YarnAttentionFactor() const {
  if (attention_factor.has_value()) return *attention_factor;
  return factor > 1 ? 0.1 * std::log(factor) + 1.0 : 1.0;
}

std::string_view RopeTypeName(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::kNone:
      return "default";
    case RopeScaling::Type::kLinear:
      return "linear";
    case RopeScaling::Type::kDynamic:
      return "dynamic";
    case RopeScaling::Type::kLlama3:
      return "llama3";
    case RopeScaling::Type::kYarn:
      return "yarn";
  }
  return "unknown";
}

const std::vector<std::string>& ModelConfig::SupportedModelTypes() {
  static const auto* const kTypes = [] {
    auto* types = new std::vector<std::string>();
    for (const ArchDefaults& arch : kArchs) types->emplace_back(arch.model_type);
    std::sort(types->begin(), types->end());
    return types;
  }();
  return *kTypes;
}

namespace {

// Every model_type kvserve serves, for the messages that list them: the Transformer families
// parsed here, and those whose own loaders LoadModel dispatches to first (bart_model.h,
// mamba_model.h).
std::string ServedModelTypes() {
  std::vector<std::string> types = ModelConfig::SupportedModelTypes();
  types.insert(types.end(), {"bart", "mamba"});
  std::sort(types.begin(), types.end());
  return absl::StrJoin(types, ", ");
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::Parse(std::string_view json_text) {
  if (absl::Status s = tokenizer::CheckJsonDepth(json_text, tokenizer::kMaxJsonDepth); !s.ok()) {
    return absl::InvalidArgumentError(Cat("config.json: ", s.message()));
  }
  Json json;
  try {
    json = Json::parse(json_text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(Cat("config.json is not valid JSON: ", e.what()));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        Cat("config.json must be a JSON object, got ", tokenizer::JsonKindPhrase(json)));
  }
  // Every read is type-checked first; this is the safety net that keeps a missed check from
  // ending the process.
  try {
    return ParseObject(json);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(Cat("config.json: unexpected value: ", e.what()));
  }
}

namespace {

absl::StatusOr<ModelConfig> ParseObject(const Json& json) {
  absl::Status status;
  FieldReader fields(json, "", &status);
  ModelConfig c;

  std::optional<std::string> model_type = fields.OptionalString("model_type");
  if (!status.ok()) return status;
  if (!model_type.has_value()) {
    return absl::InvalidArgumentError(Cat(
        "config.json: required field 'model_type' is missing; supported: ", ServedModelTypes()));
  }
  const ArchDefaults* arch = FindArch(*model_type);
  if (arch == nullptr) {
    return absl::InvalidArgumentError(Cat("config.json: model_type '", *model_type,
                                          "' is not supported; supported: ", ServedModelTypes()));
  }
  c.model_type = *model_type;

  c.vocab_size = fields.RequiredInt("vocab_size");
  c.hidden_size = fields.RequiredInt("hidden_size");
  c.intermediate_size = fields.RequiredInt("intermediate_size");
  c.num_hidden_layers = fields.RequiredInt("num_hidden_layers");
  c.num_attention_heads = fields.RequiredInt("num_attention_heads");
  c.num_key_value_heads = fields.Int("num_key_value_heads", c.num_attention_heads);
  std::optional<int64_t> head_dim = fields.OptionalInt("head_dim");
  if (!head_dim.has_value()) head_dim = arch->head_dim;
  if (head_dim.has_value()) {
    c.head_dim = *head_dim;
  } else if (c.num_attention_heads > 0) {
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.max_position_embeddings = fields.Int("max_position_embeddings", arch->max_position_embeddings);
  c.rms_norm_eps = fields.Double("rms_norm_eps", arch->rms_norm_eps);

  c.rope_theta = fields.Double("rope_theta", arch->rope_theta);
  c.partial_rotary_factor = fields.Double("partial_rotary_factor", 1.0);
  std::optional<double> v5_local_rope_base;  // gemma3_text's rope_parameters.sliding_attention
  if (const Json* params = fields.Get("rope_parameters")) {  // Transformers v5
    if (!params->is_object()) {
      fields.WrongType("rope_parameters", "an object", *params);
    } else if (IsGemma(c.model_type) &&
               (params->contains("full_attention") || params->contains("sliding_attention"))) {
      // Gemma's v5 form: one set of parameters per layer type.
      FieldReader by_type(*params, "rope_parameters.", &status);
      if (const Json* full = by_type.Get("full_attention"); full && full->is_object()) {
        FieldReader rope_fields(*full, "rope_parameters.full_attention.", &status);
        c.rope_theta = rope_fields.Double("rope_theta", c.rope_theta);
        ReadRopeScaling(rope_fields, "rope_parameters.full_attention", false, &c.rope_scaling);
      } else if (full != nullptr) {
        by_type.WrongType("full_attention", "an object", *full);
      }
      if (const Json* local = by_type.Get("sliding_attention"); local && local->is_object()) {
        FieldReader rope_fields(*local, "rope_parameters.sliding_attention.", &status);
        v5_local_rope_base = rope_fields.Double("rope_theta", kGemma3LocalRopeBase);
        RopeScaling local_scaling;
        ReadRopeScaling(rope_fields, "rope_parameters.sliding_attention", false, &local_scaling);
        if (local_scaling.type != RopeScaling::Type::kNone) {
          rope_fields.Fail(
              "field 'rope_parameters.sliding_attention.rope_type' must be default: kvserve "
              "rotates Gemma's sliding layers without scaling");
        }
      } else if (local != nullptr) {
        by_type.WrongType("sliding_attention", "an object", *local);
      }
    } else {
      FieldReader rope_fields(*params, "rope_parameters.", &status);
      c.rope_theta = rope_fields.Double("rope_theta", c.rope_theta);
      c.partial_rotary_factor =
          rope_fields.Double("partial_rotary_factor", c.partial_rotary_factor);
      ReadRopeScaling(rope_fields, "rope_parameters", /*type_required=*/false, &c.rope_scaling);
    }
  } else if (const Json* scaling = fields.Get("rope_scaling")) {
    if (!scaling->is_object()) {
      fields.WrongType("rope_scaling", "an object or null", *scaling);
    } else {
      FieldReader rope_fields(*scaling, "rope_scaling.", &status);
      ReadRopeScaling(rope_fields, "rope_scaling", /*type_required=*/true, &c.rope_scaling);
    }
  }

  c.attention_bias = fields.Bool("attention_bias", arch->attention_bias);
  if (fields.Bool("mlp_bias", false)) {
    fields.Fail("field 'mlp_bias' true is not supported");
  }
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "gemma3_text";
  c.fused_qkv = c.fused_gate_up = c.model_type == "phi3";
  c.tie_word_embeddings = fields.Bool("tie_word_embeddings", arch->tie_word_embeddings);
  if (IsGemma(c.model_type)) ReadGemmaFields(fields, json, &c);
  if (v5_local_rope_base.has_value() && c.model_type == "gemma3_text") {
    c.rope_local_base_freq = v5_local_rope_base;
  }

  c.sliding_window = fields.OptionalInt("sliding_window");
  if (c.gemma && !fields.Has("sliding_window")) c.sliding_window = kGemmaSlidingWindow;
  if (IsQwen(c.model_type) && !fields.Bool("use_sliding_window", false)) {
    c.sliding_window.reset();
  }
  c.attention_chunk_size = fields.OptionalInt("attention_chunk_size");
  if (!status.ok()) return status;
  CheckBounds(fields, c);
  if (!status.ok()) return status;
  c.layer_types = ResolveLayerTypes(fields, c);

  c.bos_token_id = fields.OptionalTokenId("bos_token_id");
  c.pad_token_id = fields.OptionalTokenId("pad_token_id");
  if (const Json* eos = fields.Get("eos_token_id")) {
    if (eos->is_array()) {
      for (size_t i = 0; i < eos->size(); ++i) {
        std::optional<int32_t> id = fields.TokenId(Cat("eos_token_id[", i, "]"), (*eos)[i]);
        if (id.has_value()) c.eos_token_ids.push_back(*id);
      }
    } else if (std::optional<int32_t> id = fields.TokenId("eos_token_id", *eos)) {
      c.eos_token_ids.push_back(*id);
    }
  }
  if (fields.Has("torch_dtype")) {
    c.torch_dtype = fields.OptionalString("torch_dtype").value_or("");
  } else {
    c.torch_dtype = fields.OptionalString("dtype").value_or("");  // Transformers v5
  }
  if (!status.ok()) return status;

  Validate(fields, c, head_dim.has_value());
  if (!status.ok()) return status;
  return c;
}

}  // namespace

std::string ModelConfig::ToJson() const {
  Json json = Json::object();
  const ArchDefaults* arch = FindArch(model_type);
  if (arch != nullptr) json["architectures"] = {std::string(arch->architecture)};
  json["model_type"] = model_type;
  if (gemma) {
    json["hidden_activation"] = "gelu_pytorch_tanh";
    json["query_pre_attn_scalar"] = query_pre_attn_scalar;
    json["attn_logit_softcapping"] =
        attn_logit_softcapping.has_value() ? Json(*attn_logit_softcapping) : Json(nullptr);
    json["final_logit_softcapping"] =
        final_logit_softcapping.has_value() ? Json(*final_logit_softcapping) : Json(nullptr);
    if (rope_local_base_freq.has_value()) json["rope_local_base_freq"] = *rope_local_base_freq;
  } else {
    json["hidden_act"] = "silu";
  }
  json["vocab_size"] = vocab_size;
  json["hidden_size"] = hidden_size;
  json["intermediate_size"] = intermediate_size;
  json["num_hidden_layers"] = num_hidden_layers;
  json["num_attention_heads"] = num_attention_heads;
  json["num_key_value_heads"] = num_key_value_heads;
  json["head_dim"] = head_dim;
  json["max_position_embeddings"] = max_position_embeddings;
  json["rms_norm_eps"] = rms_norm_eps;
  json["rope_theta"] = rope_theta;
  json["partial_rotary_factor"] = partial_rotary_factor;
  if (rope_scaling.type == RopeScaling::Type::kNone) {
    json["rope_scaling"] = nullptr;
  } else {
    Json rope = {{"rope_type", std::string(RopeTypeName(rope_scaling.type))},
                 {"factor", rope_scaling.factor}};
    switch (rope_scaling.type) {
      case RopeScaling::Type::kLlama3:
        rope["low_freq_factor"] = rope_scaling.low_freq_factor;
        rope["high_freq_factor"] = rope_scaling.high_freq_factor;
        rope["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
        break;
      case RopeScaling::Type::kYarn:
        rope["beta_fast"] = rope_scaling.beta_fast;
        rope["beta_slow"] = rope_scaling.beta_slow;
        if (rope_scaling.attention_factor.has_value()) {
          rope["attention_factor"] = *rope_scaling.attention_factor;
        }
        [[fallthrough]];
      case RopeScaling::Type::kDynamic:
        if (rope_scaling.original_max_position_embeddings != 0) {
          rope["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
        }
        break;
      default:
        break;
    }
    json["rope_scaling"] = rope;
  }
  json["attention_bias"] = attention_bias;
  json["mlp_bias"] = false;
  json["tie_word_embeddings"] = tie_word_embeddings;
  json["sliding_window"] = sliding_window.has_value() ? Json(*sliding_window) : Json(nullptr);
  if (IsQwen(model_type)) json["use_sliding_window"] = sliding_window.has_value();
  if (attention_chunk_size.has_value()) json["attention_chunk_size"] = *attention_chunk_size;
  Json types = Json::array();
  for (LayerType type : layer_types) types.push_back(std::string(cache::LayerTypeName(type)));
  json["layer_types"] = types;
  if (bos_token_id.has_value()) json["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) {
    json["eos_token_id"] = eos_token_ids[0];
  } else if (!eos_token_ids.empty()) {
    json["eos_token_id"] = eos_token_ids;
  }
  if (pad_token_id.has_value()) json["pad_token_id"] = *pad_token_id;
  if (!torch_dtype.empty()) json["torch_dtype"] = torch_dtype;
  return json.dump(2) + "\n";
}

std::vector<cache::LayerSpec> ModelConfig::LayerSpecs() const {
  const bool any_chunked =
      std::count(layer_types.begin(), layer_types.end(), LayerType::kChunkedAttention) > 0;
  std::vector<cache::LayerSpec> specs;
  specs.reserve(layer_types.size());
  for (LayerType type : layer_types) {
    cache::LayerSpec spec;
    spec.type = type;
    if (type == LayerType::kChunkedAttention ||
        (type == LayerType::kSlidingAttention && any_chunked)) {
      spec.window = attention_chunk_size.value_or(0);
    } else if (type == LayerType::kSlidingAttention) {
      spec.window = sliding_window.value_or(0);
    }
    specs.push_back(spec);
  }
  return specs;
}

}  // namespace kvserve::model
