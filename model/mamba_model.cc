// The Mamba-1 forward and its loading (see mamba_model.h).
#include "model/mamba_model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/mamba_state_layer.h"
#include "model/bart_model.h"
#include "model/checkpoint.h"
#include "model/family_loading.h"
#include "model/multi_row_gemv.h"
#include "model/onednn_gemm.h"
#include "model/worker_pool.h"

namespace kvserve::model {
namespace {

std::string LayerName(int64_t i, const char* name) {
  return absl::StrCat("backbone.layers.", i, ".", name);
}

// RMSNorm in float32: x * rsqrt(mean(x^2) + eps) * weight.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

// x [..., in] times w^T [in, out] (+ b) -> [..., out], float32. Up to kMultiRowGemvMaxRows
// rows (a decode step) run MultiRowGemv on the model's worker pool, which reads the weight
// once; more rows oneDNN's GEMM where available, else OpenBLAS's. (OpenBLAS for a decode
// step's small GEMVs synchronises its threads per call, which on an oversubscribed machine
// made a step 10 times slower than the Llama family's.)
at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  const at::Tensor rows = x.reshape({-1, x.size(-1)}).contiguous();
  at::Tensor y;
  if (rows.size(0) <= kMultiRowGemvMaxRows) {
    y = MultiRowGemv(rows, w);
  } else if (!OnednnLinear(rows, w, &y)) {
    y = at::mm(rows, w.t());
  }
  if (b.defined()) y.add_(b);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  return y.view(sizes);
}

// e^x for x <= 0 (the scan's decay exponents dt * A), relative error about 2e-7: x = n ln 2
// + r with |r| <= ln 2 / 2, e^r by its Taylor series to r^6, 2^n in the exponent bits. Plain
// arithmetic, so the compiler vectorises the loop it sits in (libm's expf is a call).
inline float DecayExp(float x) {
  x = std::max(x, -87.0f);
  constexpr float kLog2e = 1.44269504f, kRound = 12582912.0f;  // 1.5 * 2^23
  const float shifted = x * kLog2e + kRound;                   // n in the low mantissa bits
  const float n = shifted - kRound;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  const float p =
      1.0f +
      r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r / 720)))));
  const int32_t exponent = (std::bit_cast<int32_t>(shifted) - 0x4B400000 + 127) << 23;
  return p * std::bit_cast<float>(exponent);
}

// The selective scan of `rows` rows of n tokens, all float32 and contiguous: u and dt
// [rows, d_inner, n] (channel-major, so that a channel's tokens are adjacent), b and c
// [rows, n, state], a [d_inner, state], d [d_inner]; `state` [rows, d_inner, state] is read
// and updated in place; returns y [rows, d_inner, n]. Channels are independent, so they are
// split over the model's worker pool.
at::Tensor SelectiveScan(const at::Tensor& u, const at::Tensor& dt, const at::Tensor& b,
                         const at::Tensor& c, const at::Tensor& a, const at::Tensor& d,
                         at::Tensor& state) {
  const int64_t rows = u.size(0), channels = u.size(1), n = u.size(2), width = b.size(2);
  at::Tensor y = at::empty_like(u);
  const float* pu = u.data_ptr<float>();
  const float* pdt = dt.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  const float* pc = c.data_ptr<float>();
  const float* pa = a.data_ptr<float>();
  const float* pd = d.data_ptr<float>();
  float* ps = state.data_ptr<float>();
  float* py = y.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * width));
  ParallelForRange(rows * channels, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> decay(width);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = i / channels, ch = i % channels;
      float* s = ps + i * width;
      const float* ach = pa + ch * width;
      const float* u_ch = pu + i * n;
      const float* dt_ch = pdt + i * n;
      float* y_ch = py + i * n;
      for (int64_t t = 0; t < n; ++t) {
        const float delta = dt_ch[t];
        const float x = u_ch[t];
        const float* bt = pb + (row * n + t) * width;
        const float* ct = pc + (row * n + t) * width;
        for (int64_t k = 0; k < width; ++k) decay[k] = DecayExp(delta * ach[k]);
        float acc = 0.0f;
        for (int64_t k = 0; k < width; ++k) {
          s[k] = decay[k] * s[k] + delta * bt[k] * x;
          acc += s[k] * ct[k];
        }
        y_ch[t] = acc + pd[ch] * x;
      }
    }
  });
  return y;
}

}  // namespace

MambaModel::MambaModel(MambaConfig config, ModelInfo info)
    : config_(std::move(config)), info_(std::move(info)) {}

absl::StatusOr<std::unique_ptr<MambaModel>> MambaModel::Load(const base::ModelSource& source,
                                                             const TransformerOptions& options) {
  absl::StatusOr<MambaConfig> config = LoadFamilyConfig<MambaConfig>(source);
  if (!config.ok()) return config.status();
  if (absl::Status s = CheckFloat32OnCpu("mamba", options); !s.ok()) return s;
  const MambaConfig& c = *config;
  ModelInfo info;
  info.model_type = "mamba";
  info.vocab_size = c.vocab_size;
  info.num_layers = c.num_hidden_layers;
  // The cache manager sizes a state layer as one token's K/V (see KvCacheManager::EstimateBytes):
  // one head of half the state's elements gives its bytes.
  info.num_kv_heads = 1;
  info.head_dim = (c.intermediate_size() * (c.conv_kernel - 1 + c.state_size) + 1) / 2;
  info.max_position_embeddings = int64_t{1} << 20;  // no positions: any length
  info.layer_specs.assign(c.num_hidden_layers,
                          cache::LayerSpec{.type = cache::LayerType::kMambaState, .window = 0});
  info.eos_token_ids = c.eos_token_ids;
  info.bos_token_id = c.bos_token_id;
  if (absl::Status s = ApplyFamilyGenerationConfig(source, c.vocab_size, &info); !s.ok()) return s;
  info.dtype = at::kFloat;
  info.weight_dtype = at::kFloat;
  info.device = options.device;
  std::unique_ptr<MambaModel> model(new MambaModel(*std::move(config), std::move(info)));
  if (absl::Status s = model->LoadWeights(source); !s.ok()) return s;
  return model;
}

absl::Status MambaModel::LoadWeights(const base::ModelSource& source) {
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(source);
  if (!checkpoint.ok()) return checkpoint.status();
  const MambaConfig& c = config_;
  std::set<std::string> expected = {"backbone.embeddings.weight", "backbone.norm_f.weight"};
  if (!c.tie_word_embeddings || checkpoint->Has("lm_head.weight")) {
    expected.insert("lm_head.weight");
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    for (const char* name : {"norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight",
                             "mixer.x_proj.weight", "mixer.dt_proj.weight", "mixer.dt_proj.bias",
                             "mixer.out_proj.weight", "mixer.A_log", "mixer.D"}) {
      expected.insert(LayerName(i, name));
    }
    if (c.use_bias) {
      expected.insert(LayerName(i, "mixer.in_proj.bias"));
      expected.insert(LayerName(i, "mixer.out_proj.bias"));
    }
    if (c.use_conv_bias) expected.insert(LayerName(i, "mixer.conv1d.bias"));
  }
  if (absl::Status s = checkpoint->CheckNames(expected); !s.ok()) return s;

  absl::Status status;
  auto load = [&](const std::string& name, std::vector<int64_t> shape) -> at::Tensor {
    if (!status.ok()) return at::Tensor();
    absl::StatusOr<at::Tensor> t = checkpoint->LoadShaped(name, at::kFloat, shape);
    if (!t.ok()) {
      status = t.status();
      return at::Tensor();
    }
    return t->contiguous();
  };
  const int64_t hidden = c.hidden_size, inner = c.intermediate_size();
  const int64_t rank = c.time_step_rank, width = c.state_size;
  embed_ = load("backbone.embeddings.weight", {c.vocab_size, hidden});
  norm_f_ = load("backbone.norm_f.weight", {hidden});
  lm_head_ =
      expected.contains("lm_head.weight") ? load("lm_head.weight", {c.vocab_size, hidden}) : embed_;
  layers_.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers && status.ok(); ++i) {
    Layer& l = layers_[i];
    l.norm = load(LayerName(i, "norm.weight"), {hidden});
    l.in_proj = load(LayerName(i, "mixer.in_proj.weight"), {2 * inner, hidden});
    l.conv = load(LayerName(i, "mixer.conv1d.weight"), {inner, 1, c.conv_kernel});
    l.x_proj = load(LayerName(i, "mixer.x_proj.weight"), {rank + 2 * width, inner});
    l.dt_proj = load(LayerName(i, "mixer.dt_proj.weight"), {inner, rank});
    l.dt_bias = load(LayerName(i, "mixer.dt_proj.bias"), {inner});
    at::Tensor a_log = load(LayerName(i, "mixer.A_log"), {inner, width});
    if (a_log.defined()) l.a = (-at::exp(a_log)).contiguous();
    l.d = load(LayerName(i, "mixer.D"), {inner});
    l.out_proj = load(LayerName(i, "mixer.out_proj.weight"), {hidden, inner});
    if (c.use_bias) {
      l.in_bias = load(LayerName(i, "mixer.in_proj.bias"), {2 * inner});
      l.out_bias = load(LayerName(i, "mixer.out_proj.bias"), {hidden});
    }
    if (c.use_conv_bias) l.conv_bias = load(LayerName(i, "mixer.conv1d.bias"), {inner});
  }
  return status;
}

at::Tensor MambaModel::RunLayers(const at::Tensor& ids, std::vector<at::Tensor>* conv_states,
                                 std::vector<at::Tensor>* ssm_states) const {
  const MambaConfig& c = config_;
  const int64_t rows = ids.size(0), n = ids.size(1);
  const int64_t inner = c.intermediate_size(), rank = c.time_step_rank, width = c.state_size;
  const int64_t keep = c.conv_kernel - 1;
  at::Tensor x = embed_.index_select(0, ids.reshape({-1})).view({rows, n, c.hidden_size});
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    const at::Tensor xz = Linear(RmsNorm(x, l.norm, c.layer_norm_epsilon), l.in_proj, l.in_bias);
    const at::Tensor gate = xz.narrow(2, inner, inner);
    // The convolution sees the kept inputs, then the new ones: [rows, inner, keep + n].
    const at::Tensor conv_in =
        at::cat({(*conv_states)[li], xz.narrow(2, 0, inner).transpose(1, 2)}, 2);
    (*conv_states)[li] = conv_in.narrow(2, n, keep).contiguous();
    // The depthwise convolution as a sum over the kernel's taps of shifted inputs (ATen's
    // grouped conv1d runs one tiny convolution per channel on the CPU, far slower).
    at::Tensor conv_out = (conv_in.unfold(2, c.conv_kernel, 1) * l.conv.view({1, inner, 1, -1}))
                              .sum(-1);  // [rows, inner, n]
    if (l.conv_bias.defined()) conv_out = conv_out + l.conv_bias.view({1, inner, 1});
    const at::Tensor u_cm = at::silu(conv_out).contiguous();  // [rows, inner, n]
    const at::Tensor u = u_cm.transpose(1, 2);                // [rows, n, inner]
    const at::Tensor params = Linear(u, l.x_proj);            // [rows, n, rank + 2 * width]
    const at::Tensor dt_cm =                                  // [rows, inner, n]
        at::softplus(Linear(params.narrow(2, 0, rank), l.dt_proj, l.dt_bias))
            .transpose(1, 2)
            .contiguous();
    const at::Tensor b = params.narrow(2, rank, width).contiguous();
    const at::Tensor cm = params.narrow(2, rank + width, width).contiguous();
    at::Tensor& state = (*ssm_states)[li];
    const at::Tensor y =
        SelectiveScan(u_cm, dt_cm, b, cm, l.a, l.d, state).transpose(1, 2) * at::silu(gate);
    x = x + Linear(y, l.out_proj, l.out_bias);
  }
  return x;
}

absl::StatusOr<ForwardOutput> MambaModel::Forward(const Batch& batch) {
  const MambaConfig& c = config_;
  const int64_t inner = c.intermediate_size();
  // Everything is checked before any cache changes.
  std::vector<std::vector<cache::MambaStateLayer*>> state_layers(batch.sequences.size());
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceInput& seq = batch.sequences[s];
    const int64_t num_ids = static_cast<int64_t>(seq.token_ids.size());
    if (num_ids == 0) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " has no tokens to run"));
    }
    if (seq.rows < 1 || num_ids % seq.rows != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", s, " has ", num_ids, " tokens, not a multiple of its ", seq.rows, " rows"));
    }
    if (seq.rows > 1 && seq.cache == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, " has ", seq.rows, " rows but no cache to hold them"));
    }
    for (int32_t id : seq.token_ids) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", id, " is outside the vocabulary [0, ", c.vocab_size, ")"));
      }
    }
    if (seq.cache == nullptr) continue;
    if (seq.cache->num_layers() != c.num_hidden_layers) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, "'s cache has ",
                                                     seq.cache->num_layers(), " layers, the model ",
                                                     c.num_hidden_layers));
    }
    for (int i = 0; i < seq.cache->num_layers(); ++i) {
      auto* layer = dynamic_cast<cache::MambaStateLayer*>(&seq.cache->layer(i));
      if (layer == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", s, "'s cache layer ", i,
            " is not a Mamba state layer (the mamba family caches only with 'dynamic')"));
      }
      if (layer->SeqLength() > 0 && layer->BatchSize() != seq.rows) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", s, " has ", seq.rows, " rows but its cache holds ", layer->BatchSize()));
      }
      state_layers[s].push_back(layer);
    }
  }
  ForwardOutput out;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceInput& seq = batch.sequences[s];
    const int64_t rows = seq.rows;
    const int64_t n = static_cast<int64_t>(seq.token_ids.size()) / rows;
    std::vector<int64_t> id_values(seq.token_ids.begin(), seq.token_ids.end());
    const at::Tensor ids = at::from_blob(id_values.data(), {rows, n}, at::kLong).clone();
    std::vector<at::Tensor> conv(layers_.size()), ssm(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) {
      const bool resume = !state_layers[s].empty() && state_layers[s][i]->SeqLength() > 0;
      conv[i] = resume ? state_layers[s][i]->conv_state()
                       : at::zeros({rows, inner, c.conv_kernel - 1}, at::kFloat);
      // The scan updates its state in place: a copy, so that the cache's stays intact.
      ssm[i] = resume ? state_layers[s][i]->ssm_state().clone()
                      : at::zeros({rows, inner, c.state_size}, at::kFloat);
    }
    at::Tensor hidden = RunLayers(ids, &conv, &ssm);
    if (!seq.all_logits) hidden = hidden.narrow(1, n - 1, 1);
    at::Tensor logits = Linear(RmsNorm(hidden, norm_f_, c.layer_norm_epsilon), lm_head_);
    // [rows, m, vocab] -> [vocab] / [m, vocab] for one row, else [rows, vocab] / [rows, m, vocab]
    if (!seq.all_logits) logits = logits.squeeze(1);
    if (rows == 1) logits = logits.squeeze(0);
    out.logits.push_back(logits.contiguous());
    for (size_t i = 0; i < state_layers[s].size(); ++i) {
      state_layers[s][i]->SetStates(std::move(conv[i]), std::move(ssm[i]), n);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const base::ModelSource& source,
                                                 const TransformerOptions& options) {
  absl::StatusOr<std::string> text = source.ReadText("config.json");
  if (!text.ok()) return text.status();
  absl::StatusOr<std::string> model_type = ReadModelType(*text);
  if (model_type.ok() && *model_type == "bart") {
    absl::StatusOr<std::unique_ptr<BartModel>> bart = BartModel::Load(source, options);
    if (!bart.ok()) return bart.status();
    return std::unique_ptr<Model>(*std::move(bart));
  }
  if (model_type.ok() && *model_type == "mamba") {
    absl::StatusOr<std::unique_ptr<MambaModel>> mamba = MambaModel::Load(source, options);
    if (!mamba.ok()) return mamba.status();
    return std::unique_ptr<Model>(*std::move(mamba));
  }
  absl::StatusOr<std::unique_ptr<Transformer>> transformer = Transformer::Load(source, options);
  if (!transformer.ok()) return transformer.status();
  return std::unique_ptr<Model>(*std::move(transformer));
}

}  // namespace kvserve::model
