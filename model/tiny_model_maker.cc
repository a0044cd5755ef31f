// Seeded tiny Hugging Face checkpoints (see tiny_model_maker.h).
#include "model/tiny_model_maker.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/safetensors.h"
#include "tokenizer/tiny_tokenizer.h"

namespace kvserve::model {
namespace {

// The tiny tokenizer's ids (its special tokens last) must fit the vocabulary.
absl::Status CheckTinyVocab(int64_t vocab_size) {
  if (vocab_size < tokenizer::kTinyEosId + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size must be at least ", tokenizer::kTinyEosId + 1, " for the tiny tokenizer"));
  }
  return absl::OkStatus();
}

// splitmix64: a small, portable generator, so the same seed gives the same bytes with any
// compiler, standard library or LibTorch version.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal by Box-Muller (both values used).
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(Uniform()));
    const double theta = 2.0 * std::numbers::pi * Uniform();
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

uint16_t ToBf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t ToF16(float f) {
  // IEEE binary16 with round to nearest even; the tiny weights are well inside its range.
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exponent = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = x & 0x7fffff;
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rem = mantissa & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rem = mantissa & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

struct TensorData {
  std::string name;
  std::vector<int64_t> shape;
  std::string bytes;
};

class WeightWriter {
 public:
  WeightWriter(uint64_t seed, WeightsDtype dtype) : rng_(seed), dtype_(dtype) {}

  void Normal(const std::string& name, std::vector<int64_t> shape, double stddev) {
    Add(name, std::move(shape), [&] { return static_cast<float>(rng_.Normal() * stddev); });
  }
  void Ones(const std::string& name, std::vector<int64_t> shape) {
    Add(name, std::move(shape), [] { return 1.0f; });
  }
  // Values from `value(rng)`, in order.
  template <typename Value>
  void Draw(const std::string& name, std::vector<int64_t> shape, Value value) {
    Add(name, std::move(shape), [&] { return static_cast<float>(value(rng_)); });
  }

  std::string Serialize() const {
    std::vector<TensorToWrite> tensors;
    for (const TensorData& t : tensors_) {
      tensors.push_back({t.name, SafetensorsType(), t.shape,
                         std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(t.bytes.data()),
                                                  t.bytes.size())});
    }
    return SerializeSafetensors(tensors, {{"format", "pt"}});
  }

 private:
  SafetensorsDtype SafetensorsType() const {
    switch (dtype_) {
      case WeightsDtype::kBF16:
        return SafetensorsDtype::kBF16;
      case WeightsDtype::kF16:
        return SafetensorsDtype::kF16;
      case WeightsDtype::kF32:
        break;
    }
    return SafetensorsDtype::kF32;
  }

  template <typename Draw>
  void Add(const std::string& name, std::vector<int64_t> shape, Draw draw) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    TensorData t{name, std::move(shape), {}};
    const size_t width = dtype_ == WeightsDtype::kF32 ? 4 : 2;
    t.bytes.resize(static_cast<size_t>(count) * width);
    char* out = t.bytes.data();
    for (int64_t i = 0; i < count; ++i) {
      const float v = draw();
      if (dtype_ == WeightsDtype::kF32) {
        std::memcpy(out + i * 4, &v, 4);
      } else {
        const uint16_t h = dtype_ == WeightsDtype::kBF16 ? ToBf16(v) : ToF16(v);
        std::memcpy(out + i * 2, &h, 2);  // little-endian hosts only, as safetensors
      }
    }
    tensors_.push_back(std::move(t));
  }

  Rng rng_;
  WeightsDtype dtype_;
  std::vector<TensorData> tensors_;
};

struct PresetSizes {
  const char* name;
  int64_t vocab, hidden, layers, heads, kv_heads, intermediate, mistral_window;
};

constexpr PresetSizes kPresets[] = {
    {"tiny", 320, 64, 2, 4, 2, 128, 16},
    {"small", 512, 256, 4, 8, 4, 704, 32},
    {"bench-small", 32000, 512, 8, 8, 4, 1408, 512},
    {"bench-medium", 32000, 1024, 16, 16, 8, 2816, 1024},
};

constexpr const char* kArchs[] = {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"};

// Gemma presets: the attention and final soft-caps of the tiny and small presets are low
// enough to change their scores and logits (the random weights give attention scores near
// 0.1 and logits near 4), so that tests see them work; the bench presets take Gemma 2's.
struct GemmaCaps {
  double attention, final;
};
GemmaCaps GemmaSoftcaps(const PresetSizes& sizes) {
  if (sizes.hidden <= 256) return {0.1, 5.0};
  return {50.0, 30.0};
}

// The config.json fields of a gemma2 or gemma3_text preset after the common ones.
std::string GemmaPresetFields(const std::string& arch, const PresetSizes& sizes) {
  const int64_t head_dim = sizes.hidden / sizes.heads;
  std::string json = absl::StrCat(
      ", \"hidden_activation\": \"gelu_pytorch_tanh\", \"query_pre_attn_scalar\": ", 2 * head_dim,
      ", \"sliding_window\": ", sizes.mistral_window,
      ", \"tie_word_embeddings\": true, \"eos_token_id\": [", tokenizer::kTinyEosId, ", ",
      tokenizer::TinyGemmaEndOfTurnId(static_cast<int32_t>(sizes.vocab)), "]");
  if (arch == "gemma2") {
    const GemmaCaps caps = GemmaSoftcaps(sizes);
    absl::StrAppend(&json,
                    ", \"rope_theta\": 10000.0, \"attn_logit_softcapping\": ", caps.attention,
                    ", \"final_logit_softcapping\": ", caps.final);
  } else {
    // Gemma 3: every sixth layer full (every second in the 2- and 4-layer presets), local
    // RoPE base 10000, global 1e6 with linear scaling.
    absl::StrAppend(&json, ", \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0",
                    ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}",
                    ", \"sliding_window_pattern\": ", sizes.layers <= 4 ? 2 : 6);
  }
  return json;
}

}  // namespace

absl::StatusOr<ModelConfig> PresetConfig(const std::string& arch, const std::string& preset) {
  const PresetSizes* sizes = nullptr;
  for (const PresetSizes& p : kPresets) {
    if (preset == p.name) sizes = &p;
  }
  if (sizes == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "preset '", preset, "' is unknown; supported: tiny, small, bench-small, bench-medium"));
  }
  if (std::find(std::begin(kArchs), std::end(kArchs), arch) == std::end(kArchs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "arch '", arch,
        "' is unknown; supported: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3, mamba, "
        "bart"));
  }
  // Assemble a config.json and parse it, so presets get exactly the defaults real
  // checkpoints of the architecture get.
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  std::string json = absl::StrCat(
      "{\"model_type\": \"", arch == "gemma3" ? "gemma3_text" : arch,
      "\", \"vocab_size\": ", sizes->vocab, ", \"hidden_size\": ", sizes->hidden,
      ", \"intermediate_size\": ", sizes->intermediate, ", \"num_hidden_layers\": ", sizes->layers,
      ", \"num_attention_heads\": ", sizes->heads, ", \"num_key_value_heads\": ", sizes->kv_heads,
      ", \"head_dim\": ", sizes->hidden / sizes->heads,
      ", \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-6",
      ", \"bos_token_id\": ", tokenizer::kTinyBosId, ", \"torch_dtype\": \"float32\"");
  if (gemma) {
    absl::StrAppend(&json, GemmaPresetFields(arch, *sizes));
  } else {
    absl::StrAppend(&json, ", \"rope_theta\": 10000.0, \"eos_token_id\": ", tokenizer::kTinyEosId,
                    ", \"tie_word_embeddings\": false");
  }
  if (arch == "mistral") {
    absl::StrAppend(&json, ", \"sliding_window\": ", sizes->mistral_window);
  } else if (arch == "qwen2" || arch == "qwen3") {
    absl::StrAppend(&json, ", \"use_sliding_window\": false, \"sliding_window\": null");
  } else if (arch == "phi3") {
    absl::StrAppend(&json, ", \"sliding_window\": null");
  }
  absl::StrAppend(&json, "}");
  return ModelConfig::Parse(json);
}

absl::StatusOr<std::map<std::string, std::string>> MakeModelFiles(const ModelConfig& c,
                                                                  uint64_t seed,
                                                                  WeightsDtype weights_dtype) {
  if (absl::Status s = CheckTinyVocab(c.vocab_size); !s.ok()) return s;
  constexpr double kStd = 0.02;
  constexpr double kGemmaNormStd = 0.1;
  const double head_std = 4.0 / std::sqrt(static_cast<double>(c.hidden_size));
  const int64_t h = c.hidden_size;
  const int64_t q_rows = c.num_attention_heads * c.head_dim;
  const int64_t kv_rows = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;

  WeightWriter w(seed, weights_dtype);
  w.Normal("model.embed_tokens.weight", {c.vocab_size, h}, c.tie_word_embeddings ? head_std : kStd);
  // Gemma's norms scale by (1 + weight): drawn around 0 so that each feature's scale differs.
  const auto norm = [&](const std::string& name, int64_t size) {
    if (c.gemma) {
      w.Normal(name, {size}, kGemmaNormStd);
    } else {
      w.Ones(name, {size});
    }
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    norm(p + "input_layernorm.weight", h);
    if (c.fused_qkv) {
      w.Normal(p + "self_attn.qkv_proj.weight", {q_rows + 2 * kv_rows, h}, kStd);
    } else {
      w.Normal(p + "self_attn.q_proj.weight", {q_rows, h}, kStd);
      w.Normal(p + "self_attn.k_proj.weight", {kv_rows, h}, kStd);
      w.Normal(p + "self_attn.v_proj.weight", {kv_rows, h}, kStd);
      if (c.attention_bias) {
        w.Normal(p + "self_attn.q_proj.bias", {q_rows}, kStd);
        w.Normal(p + "self_attn.k_proj.bias", {kv_rows}, kStd);
        w.Normal(p + "self_attn.v_proj.bias", {kv_rows}, kStd);
      }
    }
    w.Normal(p + "self_attn.o_proj.weight", {h, q_rows}, kStd);
    if (c.attention_bias && c.model_type != "qwen2") {
      w.Normal(p + "self_attn.o_proj.bias", {h}, kStd);
    }
    if (c.qk_norm) {
      norm(p + "self_attn.q_norm.weight", c.head_dim);
      norm(p + "self_attn.k_norm.weight", c.head_dim);
    }
    norm(p + "post_attention_layernorm.weight", h);
    if (c.gemma) {
      norm(p + "pre_feedforward_layernorm.weight", h);
      norm(p + "post_feedforward_layernorm.weight", h);
    }
    if (c.fused_gate_up) {
      w.Normal(p + "mlp.gate_up_proj.weight", {2 * inter, h}, kStd);
    } else {
      w.Normal(p + "mlp.gate_proj.weight", {inter, h}, kStd);
      w.Normal(p + "mlp.up_proj.weight", {inter, h}, kStd);
    }
    w.Normal(p + "mlp.down_proj.weight", {h, inter}, kStd);
  }
  norm("model.norm.weight", h);
  if (!c.tie_word_embeddings) w.Normal("lm_head.weight", {c.vocab_size, h}, head_std);

  std::map<std::string, std::string> files;
  files["config.json"] = c.ToJson();
  files["model.safetensors"] = w.Serialize();
  if (c.gemma) {
    files["tokenizer.json"] =
        tokenizer::MakeTinyGemmaTokenizerJson(static_cast<int32_t>(c.vocab_size));
    files["tokenizer_config.json"] = tokenizer::MakeTinyGemmaTokenizerConfigJson();
  } else {
    files["tokenizer.json"] = tokenizer::MakeTinyTokenizerJson(static_cast<int32_t>(c.vocab_size));
    files["tokenizer_config.json"] = tokenizer::MakeTinyTokenizerConfigJson();
  }
  return files;
}

absl::StatusOr<MambaConfig> MambaPresetConfig(const std::string& preset) {
  // Layers chosen so that each bench preset has about the parameters of the Llama preset of
  // the same name (bench-small: 14 layers, 56 M against 56 M; bench-medium: 28, 252 M
  // against 252 M); vocabularies as the Llama presets'.
  struct Sizes {
    const char* name;
    int64_t vocab, hidden, layers, state;
  };
  constexpr Sizes kMambaPresets[] = {{"tiny", 320, 64, 2, 8},
                                     {"small", 512, 256, 4, 16},
                                     {"bench-small", 32000, 512, 14, 16},
                                     {"bench-medium", 32000, 1024, 28, 16}};
  for (const Sizes& p : kMambaPresets) {
    if (preset != p.name) continue;
    return MambaConfig::Parse(absl::StrCat(
        "{\"model_type\": \"mamba\", \"vocab_size\": ", p.vocab, ", \"hidden_size\": ", p.hidden,
        ", \"num_hidden_layers\": ", p.layers, ", \"state_size\": ", p.state,
        ", \"expand\": 2, \"conv_kernel\": 4, \"time_step_rank\": \"auto\"",
        ", \"layer_norm_epsilon\": 1e-5, \"use_bias\": false, \"use_conv_bias\": true",
        ", \"tie_word_embeddings\": false, \"bos_token_id\": ", tokenizer::kTinyBosId,
        ", \"eos_token_id\": ", tokenizer::kTinyEosId, ", \"torch_dtype\": \"float32\"}"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "preset '", preset, "' is unknown; supported: tiny, small, bench-small, bench-medium"));
}

absl::StatusOr<std::map<std::string, std::string>> MakeMambaModelFiles(const MambaConfig& c,
                                                                       uint64_t seed,
                                                                       WeightsDtype weights_dtype) {
  if (absl::Status s = CheckTinyVocab(c.vocab_size); !s.ok()) return s;
  const int64_t h = c.hidden_size, inner = c.intermediate_size(), rank = c.time_step_rank;
  const int64_t width = c.state_size, kernel = c.conv_kernel;
  // Unit-scale projections, so that every mixer's output moves the residual stream and the
  // tests see each part of the layer; the SSM parameters as Transformers initialises them.
  auto normal = [](double stddev) { return [stddev](Rng& r) { return r.Normal() * stddev; }; };
  auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  WeightWriter w(seed, weights_dtype);
  w.Draw("backbone.embeddings.weight", {c.vocab_size, h},
         normal(c.tie_word_embeddings ? 4 * inv_sqrt(h) : 1.0));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("backbone.layers.", i, ".");
    w.Draw(p + "norm.weight", {h}, [](Rng& r) { return 1.0 + 0.1 * r.Normal(); });
    w.Draw(p + "mixer.in_proj.weight", {2 * inner, h}, normal(inv_sqrt(h)));
    if (c.use_bias) w.Draw(p + "mixer.in_proj.bias", {2 * inner}, normal(0.1));
    w.Draw(p + "mixer.conv1d.weight", {inner, 1, kernel}, normal(inv_sqrt(kernel)));
    if (c.use_conv_bias) w.Draw(p + "mixer.conv1d.bias", {inner}, normal(0.1));
    w.Draw(p + "mixer.x_proj.weight", {rank + 2 * width, inner}, normal(inv_sqrt(inner)));
    w.Draw(p + "mixer.dt_proj.weight", {inner, rank}, normal(inv_sqrt(rank)));
    // dt = softplus(bias) log-uniform in [0.001, 0.1]: the bias is softplus's inverse.
    w.Draw(p + "mixer.dt_proj.bias", {inner}, [](Rng& r) {
      const double dt = std::exp(std::log(0.001) + r.Uniform() * (std::log(0.1) - std::log(0.001)));
      return dt + std::log(-std::expm1(-dt));
    });
    int64_t k = 0;
    w.Draw(p + "mixer.A_log", {inner, width},
           [&](Rng&) { return std::log(static_cast<double>(k++ % width + 1)); });
    w.Draw(p + "mixer.D", {inner}, [](Rng& r) { return 1.0 + 0.1 * r.Normal(); });
    w.Draw(p + "mixer.out_proj.weight", {h, inner}, normal(inv_sqrt(inner)));
    if (c.use_bias) w.Draw(p + "mixer.out_proj.bias", {h}, normal(0.1));
  }
  w.Draw("backbone.norm_f.weight", {h}, [](Rng& r) { return 1.0 + 0.1 * r.Normal(); });
  if (!c.tie_word_embeddings) w.Draw("lm_head.weight", {c.vocab_size, h}, normal(4 * inv_sqrt(h)));
  std::map<std::string, std::string> files;
  files["config.json"] = c.ToJson();
  files["model.safetensors"] = w.Serialize();
  files["tokenizer.json"] = tokenizer::MakeTinyTokenizerJson(static_cast<int32_t>(c.vocab_size));
  files["tokenizer_config.json"] = tokenizer::MakeTinyTokenizerConfigJson();
  return files;
}

absl::StatusOr<BartConfig> BartPresetConfig(const std::string& preset) {
  struct Sizes {
    const char* name;
    int64_t vocab, d_model, layers, heads, ffn;
    bool scale_embedding;
  };
  constexpr Sizes kBartPresets[] = {{"tiny", 320, 64, 2, 4, 128, true},
                                    {"small", 512, 256, 3, 8, 1024, false},
                                    {"bench-small", 32000, 512, 4, 8, 2048, false}};
  for (const Sizes& p : kBartPresets) {
    if (preset != p.name) continue;
    return BartConfig::Parse(absl::StrCat(
        "{\"model_type\": \"bart\", \"vocab_size\": ", p.vocab, ", \"d_model\": ", p.d_model,
        ", \"encoder_layers\": ", p.layers, ", \"decoder_layers\": ", p.layers,
        ", \"encoder_attention_heads\": ", p.heads, ", \"decoder_attention_heads\": ", p.heads,
        ", \"encoder_ffn_dim\": ", p.ffn, ", \"decoder_ffn_dim\": ", p.ffn,
        ", \"max_position_embeddings\": 1024, \"activation_function\": \"gelu\"",
        ", \"scale_embedding\": ", p.scale_embedding ? "true" : "false",
        ", \"tie_word_embeddings\": false, \"pad_token_id\": null, \"bos_token_id\": ",
        tokenizer::kTinyBosId, ", \"eos_token_id\": ", tokenizer::kTinyEosId,
        ", \"decoder_start_token_id\": ", tokenizer::kTinyEosId,
        ", \"forced_bos_token_id\": ", tokenizer::kTinyBosId,
        ", \"forced_eos_token_id\": ", tokenizer::kTinyEosId, ", \"torch_dtype\": \"float32\"}"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "preset '", preset, "' is unknown for bart; supported: tiny, small, bench-small"));
}

absl::StatusOr<std::map<std::string, std::string>> MakeBartModelFiles(const BartConfig& c,
                                                                      uint64_t seed,
                                                                      WeightsDtype weights_dtype) {
  if (absl::Status s = CheckTinyVocab(c.vocab_size); !s.ok()) return s;
  const int64_t d = c.d_model;
  auto normal = [](double stddev) { return [stddev](Rng& r) { return r.Normal() * stddev; }; };
  const double unit = 1.0 / std::sqrt(static_cast<double>(d));
  WeightWriter w(seed, weights_dtype);
  auto layer_norm = [&](const std::string& name) {
    w.Draw(name + ".weight", {d}, [](Rng& r) { return 1.0 + 0.1 * r.Normal(); });
    w.Draw(name + ".bias", {d}, normal(0.1));
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    w.Draw(name + ".weight", {out, in}, normal(1.0 / std::sqrt(static_cast<double>(in))));
    w.Draw(name + ".bias", {out}, normal(0.1));
  };
  w.Draw("model.shared.weight", {c.vocab_size, d}, normal(4 * unit));
  for (const char* side : {"encoder", "decoder"}) {
    const bool decoder = std::string(side) == "decoder";
    const std::string p = absl::StrCat("model.", side, ".");
    const int64_t ffn = decoder ? c.decoder_ffn_dim : c.encoder_ffn_dim;
    w.Draw(p + "embed_positions.weight", {c.max_position_embeddings + 2, d}, normal(4 * unit));
    layer_norm(p + "layernorm_embedding");
    const int64_t layers = decoder ? c.decoder_layers : c.encoder_layers;
    for (int64_t i = 0; i < layers; ++i) {
      const std::string l = absl::StrCat(p, "layers.", i, ".");
      for (const char* attention : {"self_attn.", "encoder_attn."}) {
        if (!decoder && std::string(attention) == "encoder_attn.") continue;
        for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
          linear(absl::StrCat(l, attention, proj), d, d);
        }
        layer_norm(std::string(attention) == "self_attn." ? l + "self_attn_layer_norm"
                                                          : l + "encoder_attn_layer_norm");
      }
      linear(l + "fc1", ffn, d);
      linear(l + "fc2", d, ffn);
      layer_norm(l + "final_layer_norm");
    }
  }
  w.Draw("final_logits_bias", {1, c.vocab_size}, normal(0.1));
  if (!c.tie_word_embeddings) w.Draw("lm_head.weight", {c.vocab_size, d}, normal(4 * unit));
  std::map<std::string, std::string> files;
  files["config.json"] = c.ToJson();
  files["model.safetensors"] = w.Serialize();
  files["tokenizer.json"] = tokenizer::MakeTinyTokenizerJson(static_cast<int32_t>(c.vocab_size));
  files["tokenizer_config.json"] = tokenizer::MakeTinyTokenizerConfigJson();
  return files;
}

absl::StatusOr<std::map<std::string, std::string>> MakeTinyModel(const TinyModelOptions& options) {
  if (options.arch == "bart") {
    absl::StatusOr<BartConfig> bart = BartPresetConfig(options.preset);
    if (!bart.ok()) return bart.status();
    return MakeBartModelFiles(*bart, options.seed, options.weights_dtype);
  }
  if (options.arch == "mamba") {
    absl::StatusOr<MambaConfig> mamba = MambaPresetConfig(options.preset);
    if (!mamba.ok()) return mamba.status();
    return MakeMambaModelFiles(*mamba, options.seed, options.weights_dtype);
  }
  absl::StatusOr<ModelConfig> config = PresetConfig(options.arch, options.preset);
  if (!config.ok()) return config.status();
  return MakeModelFiles(*config, options.seed, options.weights_dtype);
}

absl::Status WriteModelFiles(const std::map<std::string, std::string>& files,
                             const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  for (const auto& [name, contents] : files) {
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::model
