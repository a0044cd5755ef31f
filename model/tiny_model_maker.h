// The tiny-model maker: seeded random Llama-family checkpoints in Hugging Face folder format
// (config.json, model.safetensors, tokenizer.json, tokenizer_config.json), for tests,
// benchmarks and the embedded default model. They load through the same code as real ones.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "model/bart_config.h"
#include "model/mamba_config.h"
#include "model/model_config.h"

namespace kvserve::model {

enum class WeightsDtype { kF32, kBF16, kF16 };

struct TinyModelOptions {
  // llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3 | mamba | bart
  std::string arch = "llama";
  std::string preset = "tiny";  // tiny | small | bench-small | bench-medium
  uint64_t seed = 0;            // same seed, same bytes
  WeightsDtype weights_dtype = WeightsDtype::kF32;
};

// The config of a preset for an architecture: tiny (hidden 64, 2 layers, 4 heads, 2 kv
// heads), small (256, 4, 8, 4), bench-small (vocab 32000, 512, 8, 8, 4, intermediate 1408),
// bench-medium (vocab 32000, 1024, 16, 16, 8, 2816); max_position_embeddings 4096; Mistral
// presets slide with a window shorter than the test sequences, and so do the sliding layers of
// gemma2 (sliding and full layers alternating) and gemma3 (model_type gemma3_text; every second
// layer full in tiny and small, every sixth in the bench presets), which tie the LM head to the
// embeddings and use the Gemma tokenizer flavour (MakeTinyGemmaTokenizerJson). InvalidArgument
// naming the unknown arch or preset.
absl::StatusOr<ModelConfig> PresetConfig(const std::string& arch, const std::string& preset);

// The files of a model with `config` and weights drawn from N(0, 0.02) by `seed` (norms are
// ones; lm_head is drawn with std 4/sqrt(hidden) so logits have a standard deviation near 4
// and float rounding cannot flip a greedy choice). Keys are file names.
absl::StatusOr<std::map<std::string, std::string>> MakeModelFiles(const ModelConfig& config,
                                                                  uint64_t seed,
                                                                  WeightsDtype weights_dtype);

// The config of a Mamba preset (MambaForCausalLM, untied LM head, state_size 16, expand 2,
// conv_kernel 4, time_step_rank auto): tiny (vocab 320, hidden 64, 2 layers, state_size 8),
// small (512, 256, 4), bench-small (32000, 512, 14) and bench-medium (32000, 1024, 28), the
// bench ones sized to the Llama presets' parameter counts. InvalidArgument naming an unknown
// preset.
absl::StatusOr<MambaConfig> MambaPresetConfig(const std::string& preset);

// The files of a Mamba model with `config`, seeded as MakeModelFiles: unit-scale projections,
// norms and D near 1, A_log = log(1..state_size), dt_proj's bias the inverse softplus of a
// log-uniform dt in [0.001, 0.1]; the tiny tokenizer.
absl::StatusOr<std::map<std::string, std::string>> MakeMambaModelFiles(const MambaConfig& config,
                                                                       uint64_t seed,
                                                                       WeightsDtype weights_dtype);

// The config of a BART preset (BartForConditionalGeneration, GELU, an untied LM head (random
// weights tied to the embedding make greedy decoding repeat its input token), the tiny
// tokenizer's <bos>/<eos> as bos, eos, decoder_start (eos, as BART's </s>), forced_bos and
// forced_eos): tiny (vocab 320, d_model 64, 2 encoder and 2 decoder layers, 4 heads, ffn 128,
// scale_embedding on), small (512, 256, 3 + 3, 8 heads, ffn 1024) and bench-small (32000, 512,
// 4 + 4, 8 heads, ffn 2048: 63 M parameters, against the Llama bench-small's 56 M);
// max_position_embeddings 1024. InvalidArgument naming an unknown preset (bench-medium has none).
absl::StatusOr<BartConfig> BartPresetConfig(const std::string& preset);

// The files of a BART model with `config`, seeded as MakeModelFiles: unit-scale projections,
// layer norms near (1, 0), the shared embedding and lm_head (when untied) with std
// 4/sqrt(d_model) (logits near 4), a small final_logits_bias; the tiny byte-level BPE
// tokenizer.
absl::StatusOr<std::map<std::string, std::string>> MakeBartModelFiles(const BartConfig& config,
                                                                      uint64_t seed,
                                                                      WeightsDtype weights_dtype);

// PresetConfig + MakeModelFiles (MambaPresetConfig + MakeMambaModelFiles for arch mamba,
// BartPresetConfig + MakeBartModelFiles for arch bart).
absl::StatusOr<std::map<std::string, std::string>> MakeTinyModel(const TinyModelOptions& options);

// Writes `files` into `dir` (created if needed).
absl::Status WriteModelFiles(const std::map<std::string, std::string>& files,
                             const std::string& dir);

}  // namespace kvserve::model
