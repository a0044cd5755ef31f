// The Llama-family decoder forward over a ragged batch (see transformer.h).
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/torch_compat.h"
#include "model/attention.h"
#include "model/cascade_attention.h"
#include "model/checkpoint.h"
#include "model/cpu_kernels.h"
#include "model/multi_row_gemv.h"
#include "model/onednn_gemm.h"
#include "model/tiled_attention.h"
#include "model/weight_arena.h"

namespace kvserve::model {
namespace {

// x [rows, in] times w^T [in, out] (+ b) -> [rows, out]. On the CPU with float32 x, up to
// kMultiRowGemvMaxRows rows (a decode step) run MultiRowGemv, which reads the weight once
// for all rows in whatever dtype it is stored, and computes each row the same way whatever
// it is batched with. OpenBLAS's GEMV takes one row only, and its GEMM repacks the weight,
// several times slower for few rows (2 threads, the 32000x512 LM head: 4 rows 7.4 ms vs
// 31 ms, 16 rows 22 vs 28 ms). More rows (a prefill) run GEMM: a bfloat16 weight in
// Bf16Compute::kNative goes to oneDNN's bf16 matmul as it is, other 16-bit weights are
// widened into `scratch` first.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                  at::Tensor* scratch, Bf16Compute bf16) {
  const bool cpu_float = x.device().is_cpu() && x.scalar_type() == at::kFloat &&
                         IsGemvWeightDtype(w.scalar_type()) && w.is_contiguous();
  if (cpu_float && x.size(0) <= kMultiRowGemvMaxRows) {
    at::Tensor y = MultiRowGemv(x.contiguous(), w, bf16);
    if (b.defined()) y.add_(b);
    return y;
  }
  if (cpu_float && w.scalar_type() == at::kBFloat16 && bf16 == Bf16Compute::kNative) {
    at::Tensor y;
    if (OnednnLinear(x.contiguous(), w, &y)) {
      if (b.defined()) y.add_(b);
      return y;
    }
    // Without oneDNN: bfloat16-rounded activations against the widened (exact) weight, so
    // that a prefill computes what a decode step would.
    const at::Tensor xc = x.contiguous();
    at::Tensor rounded = at::empty(xc.sizes(), xc.options().dtype(at::kBFloat16));
    RoundToBf16(xc.data_ptr<float>(), static_cast<uint16_t*>(rounded.data_ptr()), xc.numel());
    rounded = rounded.to(at::kFloat);
    const at::Tensor weight = WidenWeight(w, scratch);
    return b.defined() ? at::addmm(b, rounded, weight.t()) : at::mm(rounded, weight.t());
  }
  at::Tensor weight = w;
  if (w.scalar_type() != x.scalar_type()) {
    weight = cpu_float ? WidenWeight(w, scratch) : w.to(x.scalar_type());
  }
  if (cpu_float && weight.is_contiguous()) {
    at::Tensor y;
    if (OnednnLinear(x.contiguous(), weight, &y)) {
      if (b.defined()) y.add_(b);
      return y;
    }
  }
  return b.defined() ? at::addmm(b, x, weight.t()) : at::mm(x, weight.t());
}

// RMSNorm over the last dimension, computed in float32 as Transformers does. Float32 CPU
// tensors take a fused loop (one pass instead of six kernel launches, which dominate a
// decode step's element-wise work); everything else the ATen expression.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (x.device().is_cpu() && x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
      x.stride(-1) == 1 && weight.is_contiguous()) {
    const int64_t dim = x.size(-1);
    const at::Tensor rows = x.reshape({-1, dim});
    at::Tensor out = at::empty(rows.sizes(), rows.options());
    const float* w = weight.data_ptr<float>();
    for (int64_t r = 0; r < rows.size(0); ++r) {
      const float* in = rows.data_ptr<float>() + r * rows.stride(0);
      float* o = out.data_ptr<float>() + r * dim;
      float sum = 0.0f;
      for (int64_t i = 0; i < dim; ++i) sum += in[i] * in[i];
      const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + static_cast<float>(eps));
      for (int64_t i = 0; i < dim; ++i) o[i] = w[i] * (in[i] * inv);
    }
    return out.view(x.sizes());
  }
  const at::Tensor xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * (normed.scalar_type() == x.scalar_type() ? normed : normed.to(x.scalar_type()));
}

std::string LayerName(int64_t i, std::string_view suffix) {
  return absl::StrCat("model.layers.", i, ".", std::string(suffix));
}

// Cascade attention for the decode rows of a step that read one shared prefix segment: when
// at least two rows (sequences, or one sequence's beam rows) of a full-attention layer read the
// same segment, their outputs are computed together (the segment read once) into *attn,
// allocated [total, heads * head_dim] here when needed. Returns, per sequence, whether its rows
// were done so; the others (prefills, no segment, sliding layers) take the per-row path.
// softcap > 0 caps every score (Gemma 2) as Attend does.
std::vector<bool> CascadeGroups(const at::Tensor& q, const std::vector<cache::LayerView>& views,
                                const Batch& batch, const std::vector<int64_t>& offsets,
                                const std::vector<int64_t>& row_tokens,
                                const std::vector<int64_t>& starts, const cache::LayerSpec& spec,
                                double scale, double softcap, at::Tensor* attn) {
  const size_t num_seqs = views.size();
  std::vector<bool> grouped(num_seqs, false);
  if (spec.type != cache::LayerType::kFullAttention) return grouped;
  std::vector<std::pair<const void*, size_t>> keyed;  // (segment, sequence) of decode rows
  for (size_t s = 0; s < num_seqs; ++s) {
    if (views[s].prefix_length() > 0 && row_tokens[s] <= kMultiRowGemvMaxRows) {
      keyed.emplace_back(views[s].prefix_keys.data_ptr(), s);
    }
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < keyed.size();) {
    size_t j = i;
    int64_t rows = 0;
    while (j < keyed.size() && keyed[j].first == keyed[i].first) {
      rows += batch.sequences[keyed[j].second].rows;
      ++j;
    }
    if (rows >= 2) {
      if (!attn->defined()) {
        *attn = at::empty({q.size(0), q.size(1) * q.size(2)}, q.options());
      }
      std::vector<CascadeMember> members;
      for (size_t m = i; m < j; ++m) {
        const size_t s = keyed[m].second;
        const int64_t n = row_tokens[s];
        for (int64_t r = 0; r < batch.sequences[s].rows; ++r) {
          cache::LayerView row_view = views[s];
          row_view.keys = views[s].keys.narrow(0, r, 1);
          row_view.values = views[s].values.narrow(0, r, 1);
          const int64_t first = offsets[s] + r * n;
          members.push_back(
              {q.narrow(0, first, n), row_view, starts[s], attn->narrow(0, first, n)});
        }
      }
      // CPU float32: the worker pool's kernel; other devices and dtypes (CUDA): tensor ops.
      const bool done = q.device().is_cpu() ? CascadeAttend(members, spec, scale, softcap)
                                            : CascadeAttendTensors(members, spec, scale, softcap);
      if (done) {
        for (size_t m = i; m < j; ++m) grouped[keyed[m].second] = true;
      }
    }
    i = j;
  }
  return grouped;
}

}  // namespace

absl::StatusOr<Bf16Compute> ParseBf16Compute(std::string_view name) {
  if (name == "auto") return Bf16Compute::kNative;
  if (name == "exact") return Bf16Compute::kExact;
  return absl::InvalidArgumentError(
      absl::StrCat("--bf16-compute '", std::string(name), "' is not one of auto, exact"));
}

absl::StatusOr<std::optional<at::ScalarType>> ParseWeightDtype(std::string_view name) {
  if (name == "auto") return std::optional<at::ScalarType>();
  if (name == "float32" || name == "fp32") return std::optional<at::ScalarType>(at::kFloat);
  if (name == "bfloat16" || name == "bf16") return std::optional<at::ScalarType>(at::kBFloat16);
  if (name == "float16" || name == "fp16") return std::optional<at::ScalarType>(at::kHalf);
  return absl::InvalidArgumentError(absl::StrCat(
      "--weight-dtype '", std::string(name), "' is not one of auto, float32, bfloat16, float16"));
}

Transformer::Transformer(ModelConfig config, ModelInfo info, RotaryEmbedding rope,
                         std::optional<RotaryEmbedding> local_rope)
    : config_(std::move(config)),
      info_(std::move(info)),
      rope_(std::move(rope)),
      local_rope_(std::move(local_rope)) {}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(const base::ModelSource& source,
                                                               const TransformerOptions& options) {
  absl::StatusOr<std::string> config_text = source.ReadText("config.json");
  if (!config_text.ok()) return config_text.status();
  absl::StatusOr<ModelConfig> config = ModelConfig::Parse(*config_text);
  if (!config.ok()) {
    return absl::Status(
        config.status().code(),
        // The message starts with "config.json".
        absl::StrCat(source.Describe(), "/", std::string(config.status().message())));
  }
  if (!at::isFloatingType(options.dtype)) {
    return absl::InvalidArgumentError("dtype must be a floating-point type");
  }
  if (options.weight_dtype.has_value() && *options.weight_dtype != options.dtype) {
    if (!IsGemvWeightDtype(*options.weight_dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("weight_dtype ",
                                                     c10::toString(*options.weight_dtype),
                                                     " is not float32, bfloat16 or float16"));
    }
    if (!options.device.is_cpu() || options.dtype != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight_dtype ", c10::toString(*options.weight_dtype), " differs from dtype ",
          c10::toString(options.dtype),
          ", which only CPU float32 inference supports; on this device set dtype instead"));
    }
  }
  absl::StatusOr<RotaryEmbedding> rope =
      RotaryEmbedding::Create(*config, options.dtype, options.device);
  if (!rope.ok()) return rope.status();
  std::optional<RotaryEmbedding> local_rope;
  if (config->rope_local_base_freq.has_value()) {
    ModelConfig local = *config;
    local.rope_theta = *config->rope_local_base_freq;
    local.rope_scaling = RopeScaling();
    absl::StatusOr<RotaryEmbedding> made =
        RotaryEmbedding::Create(local, options.dtype, options.device);
    if (!made.ok()) return made.status();
    local_rope = *std::move(made);
  }

  ModelInfo info;
  info.model_type = config->model_type;
  info.vocab_size = config->vocab_size;
  info.num_layers = config->num_hidden_layers;
  info.num_kv_heads = config->num_key_value_heads;
  info.head_dim = config->head_dim;
  info.max_position_embeddings = config->max_position_embeddings;
  info.layer_specs = config->LayerSpecs();
  info.eos_token_ids = config->eos_token_ids;
  info.bos_token_id = config->bos_token_id;
  // As generate(): generation_config.json's values are the defaults of every call, its
  // end-of-sequence list included.
  if (source.Has("generation_config.json")) {
    absl::StatusOr<std::string> text = source.ReadText("generation_config.json");
    if (!text.ok()) return text.status();
    absl::StatusOr<GenerationConfig> generation =
        GenerationConfig::Parse(*text, config->vocab_size);
    if (!generation.ok()) {
      return absl::Status(generation.status().code(),
                          absl::StrCat(source.Describe(), "/", generation.status().message()));
    }
    info.generation = *std::move(generation);
    if (!info.generation.eos_token_ids.empty()) info.eos_token_ids = info.generation.eos_token_ids;
  }
  info.dtype = options.dtype;
  info.device = options.device;

  std::unique_ptr<Transformer> model(new Transformer(*std::move(config), std::move(info),
                                                     *std::move(rope), std::move(local_rope)));
  if (absl::Status s = model->LoadWeights(source, options); !s.ok()) return s;
  return model;
}

absl::Status Transformer::LoadWeights(const base::ModelSource& source,
                                      const TransformerOptions& options) {
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(source);
  if (!checkpoint.ok()) return checkpoint.status();
  const ModelConfig& c = config_;
  const bool o_bias = c.attention_bias && c.model_type != "qwen2";

  std::set<std::string> expected = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!c.tie_word_embeddings || checkpoint->Has("lm_head.weight")) {
    expected.insert("lm_head.weight");
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    for (const char* name : {"input_layernorm.weight", "post_attention_layernorm.weight",
                             "self_attn.o_proj.weight", "mlp.down_proj.weight"}) {
      expected.insert(LayerName(i, name));
    }
    if (c.gemma) {
      expected.insert(LayerName(i, "pre_feedforward_layernorm.weight"));
      expected.insert(LayerName(i, "post_feedforward_layernorm.weight"));
    }
    if (c.fused_qkv) {
      expected.insert(LayerName(i, "self_attn.qkv_proj.weight"));
    } else {
      for (const char* p : {"q", "k", "v"}) {
        expected.insert(LayerName(i, absl::StrCat("self_attn.", p, "_proj.weight")));
        if (c.attention_bias) {
          expected.insert(LayerName(i, absl::StrCat("self_attn.", p, "_proj.bias")));
        }
      }
    }
    if (o_bias) expected.insert(LayerName(i, "self_attn.o_proj.bias"));
    if (c.qk_norm) {
      expected.insert(LayerName(i, "self_attn.q_norm.weight"));
      expected.insert(LayerName(i, "self_attn.k_norm.weight"));
    }
    if (c.fused_gate_up) {
      expected.insert(LayerName(i, "mlp.gate_up_proj.weight"));
    } else {
      expected.insert(LayerName(i, "mlp.gate_proj.weight"));
      expected.insert(LayerName(i, "mlp.up_proj.weight"));
    }
  }
  // Old Llama checkpoints carry precomputed RoPE frequencies; they are recomputed here.
  for (const std::string& name : checkpoint->TensorNames()) {
    if (name.ends_with("rotary_emb.inv_freq")) expected.insert(name);
  }
  if (absl::Status s = checkpoint->CheckNames(expected); !s.ok()) return s;

  // Projection and embedding weights may stay narrower than the activations (see
  // TransformerOptions::weight_dtype); norms and biases always take the runtime dtype.
  const bool narrow_allowed = options.device.is_cpu() && options.dtype == at::kFloat;
  auto weight_dtype = [&](const std::string& name) -> at::ScalarType {
    if (!narrow_allowed) return options.dtype;
    if (options.weight_dtype.has_value()) return *options.weight_dtype;
    switch (checkpoint->Dtype(name).value_or(SafetensorsDtype::kF32)) {
      case SafetensorsDtype::kBF16:
        return at::kBFloat16;
      case SafetensorsDtype::kF16:
        return at::kHalf;
      default:
        return options.dtype;
    }
  };

  absl::Status status;
  auto load = [&](const std::string& name, std::vector<int64_t> shape,
                  bool projection = false) -> at::Tensor {
    if (!status.ok()) return at::Tensor();
    absl::StatusOr<at::Tensor> t =
        checkpoint->LoadShaped(name, projection ? weight_dtype(name) : options.dtype, shape);
    if (!t.ok()) {
      status = t.status();
      return at::Tensor();
    }
    return t->to(options.device);
  };

  // Gemma's RMSNorm scales by (1 + weight): the sum is taken once here, in float32.
  auto load_norm = [&](const std::string& name, int64_t size) -> at::Tensor {
    at::Tensor t = load(name, {size});
    if (!c.gemma || !t.defined()) return t;
    return (t.to(at::kFloat) + 1.0).to(options.dtype);
  };

  const int64_t hidden = c.hidden_size;
  const int64_t q_rows = c.num_attention_heads * c.head_dim;
  const int64_t kv_rows = c.num_key_value_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  embed_ = load("model.embed_tokens.weight", {c.vocab_size, hidden}, true);
  final_norm_ = load_norm("model.norm.weight", hidden);
  lm_head_ = expected.contains("lm_head.weight")
                 ? load("lm_head.weight", {c.vocab_size, hidden}, true)
                 : embed_;
  layers_.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers && status.ok(); ++i) {
    Layer& l = layers_[i];
    l.input_norm = load_norm(LayerName(i, "input_layernorm.weight"), hidden);
    if (c.gemma) {
      l.post_attn_norm = load_norm(LayerName(i, "post_attention_layernorm.weight"), hidden);
      l.post_norm = load_norm(LayerName(i, "pre_feedforward_layernorm.weight"), hidden);
      l.post_ff_norm = load_norm(LayerName(i, "post_feedforward_layernorm.weight"), hidden);
    } else {
      l.post_norm = load_norm(LayerName(i, "post_attention_layernorm.weight"), hidden);
    }
    if (c.fused_qkv) {
      l.qkv_weight =
          load(LayerName(i, "self_attn.qkv_proj.weight"), {q_rows + 2 * kv_rows, hidden}, true);
    } else {
      l.qkv_weight =
          at::cat({load(LayerName(i, "self_attn.q_proj.weight"), {q_rows, hidden}, true),
                   load(LayerName(i, "self_attn.k_proj.weight"), {kv_rows, hidden}, true),
                   load(LayerName(i, "self_attn.v_proj.weight"), {kv_rows, hidden}, true)},
                  0);
      if (c.attention_bias) {
        l.qkv_bias = at::cat({load(LayerName(i, "self_attn.q_proj.bias"), {q_rows}),
                              load(LayerName(i, "self_attn.k_proj.bias"), {kv_rows}),
                              load(LayerName(i, "self_attn.v_proj.bias"), {kv_rows})},
                             0);
      }
    }
    if (!status.ok()) break;
    l.o_weight = load(LayerName(i, "self_attn.o_proj.weight"), {hidden, q_rows}, true);
    if (o_bias) l.o_bias = load(LayerName(i, "self_attn.o_proj.bias"), {hidden});
    if (c.qk_norm) {
      l.q_norm = load_norm(LayerName(i, "self_attn.q_norm.weight"), c.head_dim);
      l.k_norm = load_norm(LayerName(i, "self_attn.k_norm.weight"), c.head_dim);
    }
    if (c.fused_gate_up) {
      l.gate_up_weight = load(LayerName(i, "mlp.gate_up_proj.weight"), {2 * inter, hidden}, true);
    } else {
      at::Tensor gate = load(LayerName(i, "mlp.gate_proj.weight"), {inter, hidden}, true);
      at::Tensor up = load(LayerName(i, "mlp.up_proj.weight"), {inter, hidden}, true);
      if (status.ok()) l.gate_up_weight = at::cat({gate, up}, 0);
    }
    l.down_weight = load(LayerName(i, "mlp.down_proj.weight"), {hidden, inter}, true);
  }
  if (status.ok() && options.device.is_cpu()) {
    // The projection and embedding weights into one huge-page arena (weight_arena.h).
    std::vector<at::Tensor*> weights = {&embed_, &lm_head_};
    for (Layer& l : layers_) {
      for (at::Tensor* w : {&l.qkv_weight, &l.o_weight, &l.gate_up_weight, &l.down_weight}) {
        weights.push_back(w);
      }
    }
    MoveToHugePageArena(weights);
  }
  if (status.ok()) {
    info_.weight_dtype = lm_head_.scalar_type();
    bf16_compute_ = ResolveBf16Compute(options.bf16_compute);
    info_.bf16_activations =
        bf16_compute_ == Bf16Compute::kNative && info_.weight_dtype == at::kBFloat16;
  }
  return status;
}

absl::StatusOr<ForwardOutput> Transformer::Forward(const Batch& batch) {
  const ModelConfig& c = config_;
  const size_t num_seqs = batch.sequences.size();
  if (num_seqs == 0) return ForwardOutput{};

  // Flatten the ragged batch: token ids and absolute positions of every new token.
  std::vector<int64_t> ids;
  std::vector<int64_t> positions;
  std::vector<int64_t> offsets(num_seqs + 1, 0);
  std::vector<int64_t> starts(num_seqs, 0);
  std::vector<int64_t> row_tokens(num_seqs, 0);  // new tokens per batch row
  int64_t longest = 0;
  for (size_t s = 0; s < num_seqs; ++s) {
    const SequenceInput& seq = batch.sequences[s];
    if (seq.token_ids.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " has no tokens to run"));
    }
    const int64_t num_ids = static_cast<int64_t>(seq.token_ids.size());
    if (seq.rows < 1 || num_ids % seq.rows != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", s, " has ", num_ids, " tokens, not a multiple of its ", seq.rows, " rows"));
    }
    if (seq.rows > 1 && seq.cache == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, " has ", seq.rows, " rows but no cache to hold them"));
    }
    row_tokens[s] = num_ids / seq.rows;
    if (seq.cache != nullptr && seq.cache->num_layers() != c.num_hidden_layers) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, "'s cache has ",
                                                     seq.cache->num_layers(), " layers, the model ",
                                                     c.num_hidden_layers));
    }
    starts[s] = seq.cache != nullptr ? seq.cache->SeqLength() : 0;
    for (size_t t = 0; t < seq.token_ids.size(); ++t) {
      const int32_t id = seq.token_ids[t];
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", id, " is outside the vocabulary [0, ", c.vocab_size, ")"));
      }
      ids.push_back(id);
      positions.push_back(starts[s] + static_cast<int64_t>(t) % row_tokens[s]);
    }
    offsets[s + 1] = static_cast<int64_t>(ids.size());
    longest = std::max(longest, positions.back() + 1);
  }
  const int64_t total = static_cast<int64_t>(ids.size());
  const auto long_opts = at::TensorOptions().dtype(at::kLong);
  const at::Tensor ids_t = at::from_blob(ids.data(), {total}, long_opts).to(info_.device);
  const at::Tensor pos_t = at::from_blob(positions.data(), {total}, long_opts).to(info_.device);

  const int64_t heads = c.num_attention_heads;
  const int64_t kv_heads = c.num_key_value_heads;
  const int64_t head_dim = c.head_dim;
  const int64_t inter = c.intermediate_size;
  const double scale = 1.0 / std::sqrt(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar
                                                                   : static_cast<double>(head_dim));
  const double eps = c.rms_norm_eps;
  const double softcap = c.attn_logit_softcapping.value_or(0.0);

  // Offloaded caches start fetching their first layer while the embeddings are gathered.
  for (const SequenceInput& seq : batch.sequences) {
    if (seq.cache != nullptr) seq.cache->PrepareForward();
  }
  const auto [global_cos, global_sin] = rope_.CosSin(pos_t, longest);
  at::Tensor local_cos, local_sin;
  if (local_rope_.has_value()) std::tie(local_cos, local_sin) = local_rope_->CosSin(pos_t, longest);
  std::vector<MaskCache> masks(num_seqs);  // per sequence, shared by its layers
  const SimdLevel tiled_level = TiledAttentionLevel();
  at::Tensor x = embed_.index_select(0, ids_t);  // [total, hidden]
  if (x.scalar_type() != info_.dtype) x = x.to(info_.dtype);
  // Gemma scales the embeddings by sqrt(hidden_size), rounded to the activations' dtype.
  if (c.gemma) {
    x.mul_(at::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), x.options()));
  }
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) {
    const Layer& l = layers_[li];
    const cache::LayerSpec& spec = info_.layer_specs[li];
    const bool local = local_rope_.has_value() && spec.type == cache::LayerType::kSlidingAttention;
    const RotaryEmbedding& rope = local ? *local_rope_ : rope_;
    const at::Tensor& cos = local ? local_cos : global_cos;
    const at::Tensor& sin = local ? local_sin : global_sin;
    const at::Tensor qkv = Linear(RmsNorm(x, l.input_norm, eps), l.qkv_weight, l.qkv_bias,
                                  &widen_scratch_, bf16_compute_);
    at::Tensor q = qkv.narrow(1, 0, heads * head_dim).view({total, heads, head_dim});
    at::Tensor k =
        qkv.narrow(1, heads * head_dim, kv_heads * head_dim).view({total, kv_heads, head_dim});
    const at::Tensor v = qkv.narrow(1, (heads + kv_heads) * head_dim, kv_heads * head_dim)
                             .view({total, kv_heads, head_dim});
    if (l.q_norm.defined()) {
      q = RmsNorm(q, l.q_norm, eps);
      k = RmsNorm(k, l.k_norm, eps);
    }
    if (!FusedRotateHalf(q, cos, sin, rope.rotary_dim())) rope.Rotate(q, cos, sin);
    if (!FusedRotateHalf(k, cos, sin, rope.rotary_dim())) rope.Rotate(k, cos, sin);

    at::Tensor attn;  // [total, heads * head_dim]
    // Every sequence's cache first, so that rows reading one shared prefix segment can attend
    // to it together (cascade attention: the segment is read once for all of them).
    std::vector<cache::LayerView> views(num_seqs);
    for (size_t s = 0; s < num_seqs; ++s) {
      const int64_t begin = offsets[s];
      const int64_t rows = batch.sequences[s].rows;
      const int64_t n = row_tokens[s];
      // [rows * n, kv_heads, d] -> [rows, kv_heads, n, d], the cache's layout.
      const at::Tensor ks =
          k.narrow(0, begin, rows * n).view({rows, n, kv_heads, head_dim}).permute({0, 2, 1, 3});
      const at::Tensor vs =
          v.narrow(0, begin, rows * n).view({rows, n, kv_heads, head_dim}).permute({0, 2, 1, 3});
      views[s] = cache::LayerView{ks, vs, 0, n};
      if (cache::KvCache* kv = batch.sequences[s].cache; kv != nullptr) {
        absl::StatusOr<cache::LayerView> updated = kv->Update(static_cast<int>(li), ks, vs);
        if (!updated.ok()) {
          return absl::Status(updated.status().code(),
                              absl::StrCat("sequence ", s, ", layer ", li, ": ",
                                           std::string(updated.status().message())));
        }
        views[s] = *std::move(updated);
      }
    }
    const std::vector<bool> grouped =
        CascadeGroups(q, views, batch, offsets, row_tokens, starts, spec, scale, softcap, &attn);
    for (size_t s = 0; s < num_seqs; ++s) {
      if (grouped[s]) continue;
      const int64_t begin = offsets[s];
      const int64_t rows = batch.sequences[s].rows;
      const int64_t n = row_tokens[s];
      const cache::LayerView& view = views[s];
      // Each row attends to its own row of the cache, at the same positions.
      for (int64_t r = 0; r < rows; ++r) {
        cache::LayerView row_view = view;
        if (rows > 1) {
          row_view.keys = view.keys.narrow(0, r, 1);
          row_view.values = view.values.narrow(0, r, 1);
        }
        // A few queries (decode) take the fused loop; a prefill's many the tiled kernel
        // (AVX-512), else batched GEMMs.
        at::Tensor out;
        const at::Tensor queries = q.narrow(0, begin + r * n, n);
        const bool fused = n <= kMultiRowGemvMaxRows &&
                           FusedAttend(queries, row_view, starts[s], spec, scale, &out, softcap);
        const bool tiled =
            !fused && n > kMultiRowGemvMaxRows && softcap == 0 &&
            tiled_level == SimdLevel::kAvx512 &&
            TiledAttend(queries, row_view, starts[s], spec, scale, &out, tiled_level);
        if (!fused && !tiled) {
          out = Attend(queries, row_view, starts[s], spec, scale, &masks[s], softcap);
        }
        if (num_seqs == 1 && rows == 1) {
          attn = std::move(out);
        } else {
          if (!attn.defined()) attn = at::empty({total, heads * head_dim}, x.options());
          attn.narrow(0, begin + r * n, n).copy_(out);
        }
      }
    }
    const at::Tensor attn_out = Linear(attn, l.o_weight, l.o_bias, &widen_scratch_, bf16_compute_);
    x.add_(l.post_attn_norm.defined() ? RmsNorm(attn_out, l.post_attn_norm, eps) : attn_out);
    const at::Tensor gate_up =
        Linear(RmsNorm(x, l.post_norm, eps), l.gate_up_weight, {}, &widen_scratch_, bf16_compute_);
    at::Tensor act;
    if (c.gemma) {
      act = at::gelu(gate_up.narrow(1, 0, inter), "tanh") * gate_up.narrow(1, inter, inter);
    } else {
      act = FusedSiluMul(gate_up, inter);
      if (!act.defined()) {
        act = at::silu(gate_up.narrow(1, 0, inter)) * gate_up.narrow(1, inter, inter);
      }
    }
    const at::Tensor mlp_out = Linear(act, l.down_weight, {}, &widen_scratch_, bf16_compute_);
    x.add_(l.post_ff_norm.defined() ? RmsNorm(mlp_out, l.post_ff_norm, eps) : mlp_out);
  }

  // Logits only where asked: the last position of each sequence, or all of its positions.
  std::vector<int64_t> rows;
  for (size_t s = 0; s < num_seqs; ++s) {
    if (batch.sequences[s].all_logits) {
      for (int64_t r = offsets[s]; r < offsets[s + 1]; ++r) rows.push_back(r);
    } else {
      for (int64_t r = 1; r <= batch.sequences[s].rows; ++r) {
        rows.push_back(offsets[s] + r * row_tokens[s] - 1);
      }
    }
  }
  at::Tensor selected;
  if (static_cast<int64_t>(rows.size()) == total) {
    selected = x;
  } else {
    selected =
        x.index_select(0, at::from_blob(rows.data(), {static_cast<int64_t>(rows.size())}, long_opts)
                              .to(info_.device));
  }
  at::Tensor logits =
      Linear(RmsNorm(selected, final_norm_, eps), lm_head_, {}, &widen_scratch_, bf16_compute_)
          .to(at::kFloat)
          .to(at::kCPU);
  if (c.final_logit_softcapping.has_value()) {
    const double cap = *c.final_logit_softcapping;
    logits.div_(cap).tanh_().mul_(cap);
  }

  ForwardOutput output;
  output.logits.reserve(num_seqs);
  int64_t row = 0;
  for (size_t s = 0; s < num_seqs; ++s) {
    const int64_t seq_rows = batch.sequences[s].rows;
    if (batch.sequences[s].all_logits) {
      const int64_t n = offsets[s + 1] - offsets[s];
      at::Tensor all = logits.narrow(0, row, n);
      output.logits.push_back(seq_rows == 1 ? all
                                            : all.view({seq_rows, row_tokens[s], all.size(-1)}));
      row += n;
    } else if (seq_rows == 1) {
      output.logits.push_back(logits.select(0, row));
      ++row;
    } else {
      output.logits.push_back(logits.narrow(0, row, seq_rows));
      row += seq_rows;
    }
  }
  return output;
}

}  // namespace kvserve::model
