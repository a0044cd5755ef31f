// The BART encoder-decoder forward, its loading and its generation loop (see bart_model.h).
#include "model/bart_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/attention.h"
#include "model/checkpoint.h"
#include "model/family_loading.h"
#include "model/multi_row_gemv.h"
#include "model/onednn_gemm.h"
#include "model/sampler.h"

namespace kvserve::model {
namespace {

// x [..., in] times w^T [in, out] + b -> [..., out], float32: MultiRowGemv for a decode step's
// few rows (it reads the weight once), oneDNN's or OpenBLAS's GEMM for more (as MambaModel).
at::Tensor BartLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
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

// [rows, n, heads * head_dim] -> [rows, heads, n, head_dim], contiguous.
at::Tensor BartSplitHeads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2).contiguous();
}

// Queries [rows, heads, n, head_dim] at positions q_start.. against `kv` (batch rows; full
// attention, so columns past a query's position are hidden, and q_start at or past the
// columns shows them all): [rows, n, heads * head_dim]. `masks` shares the masks between the
// layers of one forward.
at::Tensor BartAttend(const at::Tensor& queries, const cache::LayerView& kv, int64_t q_start,
                      double scale, MaskCache* masks) {
  const cache::LayerSpec full{};
  const int64_t rows = queries.size(0);
  std::vector<at::Tensor> out;
  out.reserve(rows);
  for (int64_t r = 0; r < rows; ++r) {
    cache::LayerView row = kv;
    if (kv.keys.size(0) > 1) {
      row.keys = kv.keys.narrow(0, r, 1);
      row.values = kv.values.narrow(0, r, 1);
    }
    out.push_back(Attend(queries[r].transpose(0, 1), row, q_start, full, scale, masks));
  }
  return at::stack(out);
}

cache::LayerView BartWholeView(const at::Tensor& keys, const at::Tensor& values) {
  cache::LayerView view;
  view.keys = keys;
  view.values = values;
  view.num_valid = keys.size(2);
  return view;
}

double BartMillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

absl::Status BartCheckIds(absl::Span<const int32_t> ids, int64_t rows, int64_t vocab,
                          const char* what) {
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no tokens to run"));
  if (rows < 1 || static_cast<int64_t>(ids.size()) % rows != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", ids.size(), " tokens are not a multiple of ", rows, " rows"));
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

at::Tensor BartIds(absl::Span<const int32_t> ids, int64_t rows) {
  std::vector<int64_t> values(ids.begin(), ids.end());
  return at::from_blob(values.data(), {rows, static_cast<int64_t>(ids.size()) / rows}, at::kLong)
      .clone();
}

}  // namespace

BartModel::BartModel(BartConfig config, ModelInfo info)
    : config_(std::move(config)), info_(std::move(info)) {}

absl::StatusOr<std::unique_ptr<BartModel>> BartModel::Load(const base::ModelSource& source,
                                                           const TransformerOptions& options) {
  absl::StatusOr<BartConfig> config = LoadFamilyConfig<BartConfig>(source);
  if (!config.ok()) return config.status();
  if (absl::Status s = CheckFloat32OnCpu("bart", options); !s.ok()) return s;
  const BartConfig& c = *config;
  ModelInfo info;
  info.model_type = "bart";
  info.vocab_size = c.vocab_size;
  info.num_layers = c.decoder_layers;
  info.num_kv_heads = c.decoder_attention_heads;
  info.head_dim = c.decoder_head_dim();
  info.max_position_embeddings = c.max_position_embeddings;
  info.layer_specs.assign(c.decoder_layers, cache::LayerSpec{});
  info.eos_token_ids = c.eos_token_ids;
  info.bos_token_id = c.bos_token_id;
  info.decoder_start_ids = {c.decoder_start_token_id};
  if (c.forced_bos_token_id) info.decoder_start_ids.push_back(*c.forced_bos_token_id);
  if (absl::Status s = ApplyFamilyGenerationConfig(source, c.vocab_size, &info); !s.ok()) return s;
  info.dtype = at::kFloat;
  info.weight_dtype = at::kFloat;
  info.device = options.device;
  std::unique_ptr<BartModel> model(new BartModel(*std::move(config), std::move(info)));
  if (absl::Status s = model->LoadWeights(source); !s.ok()) return s;
  return model;
}

absl::Status BartModel::LoadWeights(const base::ModelSource& source) {
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(source);
  if (!checkpoint.ok()) return checkpoint.status();
  const BartConfig& c = config_;
  const auto attention_names = [](const std::string& prefix, std::set<std::string>* names) {
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      names->insert(absl::StrCat(prefix, proj, ".weight"));
      names->insert(absl::StrCat(prefix, proj, ".bias"));
    }
  };
  std::set<std::string> expected = {"model.shared.weight"};
  // Copies of the shared embedding that some checkpoints also hold, and the buffers and head
  // a tied checkpoint may leave out.
  for (const char* optional : {"model.encoder.embed_tokens.weight",
                               "model.decoder.embed_tokens.weight", "final_logits_bias"}) {
    if (checkpoint->Has(optional)) expected.insert(optional);
  }
  if (!c.tie_word_embeddings || checkpoint->Has("lm_head.weight")) {
    expected.insert("lm_head.weight");
  }
  for (const char* side : {"encoder", "decoder"}) {
    const std::string p = absl::StrCat("model.", side, ".");
    expected.insert(p + "embed_positions.weight");
    expected.insert(p + "layernorm_embedding.weight");
    expected.insert(p + "layernorm_embedding.bias");
    const bool decoder = std::string(side) == "decoder";
    const int64_t layers = decoder ? c.decoder_layers : c.encoder_layers;
    for (int64_t i = 0; i < layers; ++i) {
      const std::string l = absl::StrCat(p, "layers.", i, ".");
      attention_names(l + "self_attn.", &expected);
      std::vector<const char*> norms = {"self_attn_layer_norm", "final_layer_norm"};
      if (decoder) {
        attention_names(l + "encoder_attn.", &expected);
        norms.push_back("encoder_attn_layer_norm");
      }
      for (const char* name : norms) {
        expected.insert(absl::StrCat(l, name, ".weight"));
        expected.insert(absl::StrCat(l, name, ".bias"));
      }
      for (const char* fc : {"fc1", "fc2"}) {
        expected.insert(absl::StrCat(l, fc, ".weight"));
        expected.insert(absl::StrCat(l, fc, ".bias"));
      }
    }
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
  const int64_t d = c.d_model;
  auto load_norm = [&](const std::string& prefix) {
    return Norm{load(prefix + ".weight", {d}), load(prefix + ".bias", {d})};
  };
  auto load_attention = [&](const std::string& prefix) {
    Attention a;
    a.q = load(prefix + "q_proj.weight", {d, d});
    a.q_bias = load(prefix + "q_proj.bias", {d});
    a.k = load(prefix + "k_proj.weight", {d, d});
    a.k_bias = load(prefix + "k_proj.bias", {d});
    a.v = load(prefix + "v_proj.weight", {d, d});
    a.v_bias = load(prefix + "v_proj.bias", {d});
    a.out = load(prefix + "out_proj.weight", {d, d});
    a.out_bias = load(prefix + "out_proj.bias", {d});
    return a;
  };
  shared_ = load("model.shared.weight", {c.vocab_size, d});
  // Tied, the head is the shared embedding even where the checkpoint also stores one (as
  // Transformers ties it).
  lm_head_ = c.tie_word_embeddings ? shared_ : load("lm_head.weight", {c.vocab_size, d});
  final_logits_bias_ = expected.contains("final_logits_bias")
                           ? load("final_logits_bias", {1, c.vocab_size}).view({c.vocab_size})
                           : at::zeros({c.vocab_size}, at::kFloat);
  for (const char* side : {"encoder", "decoder"}) {
    const bool decoder = std::string(side) == "decoder";
    const std::string p = absl::StrCat("model.", side, ".");
    const int64_t ffn = decoder ? c.decoder_ffn_dim : c.encoder_ffn_dim;
    (decoder ? decoder_positions_ : encoder_positions_) =
        load(p + "embed_positions.weight", {c.max_position_embeddings + 2, d});
    (decoder ? decoder_embedding_norm_ : encoder_embedding_norm_) =
        load_norm(p + "layernorm_embedding");
    std::vector<Layer>& layers = decoder ? decoder_layers_ : encoder_layers_;
    layers.resize(decoder ? c.decoder_layers : c.encoder_layers);
    for (size_t i = 0; i < layers.size() && status.ok(); ++i) {
      const std::string l = absl::StrCat(p, "layers.", i, ".");
      Layer& layer = layers[i];
      layer.self_attn = load_attention(l + "self_attn.");
      layer.self_attn_norm = load_norm(l + "self_attn_layer_norm");
      if (decoder) {
        layer.cross_attn = load_attention(l + "encoder_attn.");
        layer.cross_attn_norm = load_norm(l + "encoder_attn_layer_norm");
      }
      layer.fc1 = load(l + "fc1.weight", {ffn, d});
      layer.fc1_bias = load(l + "fc1.bias", {ffn});
      layer.fc2 = load(l + "fc2.weight", {d, ffn});
      layer.fc2_bias = load(l + "fc2.bias", {d});
      layer.final_norm = load_norm(l + "final_layer_norm");
    }
  }
  return status;
}

at::Tensor BartModel::Embed(const at::Tensor& ids, const at::Tensor& position_table,
                            const Norm& norm, int64_t past) const {
  const int64_t rows = ids.size(0), n = ids.size(1), d = config_.d_model;
  at::Tensor x = shared_.index_select(0, ids.reshape({-1})).view({rows, n, d});
  if (config_.scale_embedding) x = x * std::sqrt(static_cast<double>(d));
  // BART's learned positions start at row 2 of the table.
  x = x + position_table.narrow(0, past + 2, n);
  return at::layer_norm(x, {d}, norm.weight, norm.bias, config_.layer_norm_eps);
}

at::Tensor BartModel::Feedforward(const Layer& layer, const at::Tensor& x) const {
  at::Tensor h = BartLinear(x, layer.fc1, layer.fc1_bias);
  if (config_.activation_function == "relu") {
    h = at::relu(h);
  } else if (config_.activation_function == "gelu_new") {
    h = at::gelu(h, "tanh");
  } else {
    h = at::gelu(h);
  }
  return BartLinear(h, layer.fc2, layer.fc2_bias);
}

std::pair<at::Tensor, at::Tensor> BartModel::ProjectCross(const Layer& layer,
                                                          const at::Tensor& encoder_output,
                                                          int64_t rows) {
  ++cross_projections_;
  const int64_t heads = config_.decoder_attention_heads;
  at::Tensor k = BartSplitHeads(
      BartLinear(encoder_output, layer.cross_attn.k, layer.cross_attn.k_bias), heads);
  at::Tensor v = BartSplitHeads(
      BartLinear(encoder_output, layer.cross_attn.v, layer.cross_attn.v_bias), heads);
  if (k.size(0) != rows) {
    k = k.expand({rows, -1, -1, -1}).contiguous();
    v = v.expand({rows, -1, -1, -1}).contiguous();
  }
  return {k, v};
}

absl::StatusOr<at::Tensor> BartModel::Encode(absl::Span<const int32_t> ids, int64_t rows) const {
  const BartConfig& c = config_;
  if (absl::Status s = BartCheckIds(ids, rows, c.vocab_size, "encoder input"); !s.ok()) return s;
  const int64_t n = static_cast<int64_t>(ids.size()) / rows;
  if (n > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("encoder input: ", n, " tokens exceed ",
                                                   "max_position_embeddings (",
                                                   c.max_position_embeddings, ")"));
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.encoder_head_dim()));
  const int64_t heads = c.encoder_attention_heads, d = c.d_model;
  at::Tensor x = Embed(BartIds(ids, rows), encoder_positions_, encoder_embedding_norm_, 0);
  MaskCache masks;
  for (const Layer& layer : encoder_layers_) {
    const Attention& a = layer.self_attn;
    const at::Tensor q = BartSplitHeads(BartLinear(x, a.q, a.q_bias), heads);
    const at::Tensor k = BartSplitHeads(BartLinear(x, a.k, a.k_bias), heads);
    const at::Tensor v = BartSplitHeads(BartLinear(x, a.v, a.v_bias), heads);
    // Bidirectional: every query sits at or past the last key.
    const at::Tensor attended = BartAttend(q, BartWholeView(k, v), n, scale, &masks);
    x = at::layer_norm(x + BartLinear(attended, a.out, a.out_bias), {d},
                       layer.self_attn_norm.weight, layer.self_attn_norm.bias, c.layer_norm_eps);
    x = at::layer_norm(x + Feedforward(layer, x), {d}, layer.final_norm.weight,
                       layer.final_norm.bias, c.layer_norm_eps);
  }
  return x;
}

absl::Status BartModel::CheckDecoderInput(absl::Span<const int32_t> ids, int64_t rows,
                                          const cache::KvCache* self_cache) const {
  const BartConfig& c = config_;
  if (absl::Status s = BartCheckIds(ids, rows, c.vocab_size, "decoder input"); !s.ok()) return s;
  const int64_t n = static_cast<int64_t>(ids.size()) / rows;
  const int64_t past = self_cache != nullptr ? self_cache->SeqLength() : 0;
  if (past + n > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("decoder input: positions up to ", past + n,
                                                   " exceed max_position_embeddings (",
                                                   c.max_position_embeddings, ")"));
  }
  if (self_cache == nullptr) {
    if (rows > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoder input: ", rows, " rows but no cache to hold them"));
    }
    return absl::OkStatus();
  }
  if (self_cache->num_layers() != c.decoder_layers) {
    return absl::InvalidArgumentError(absl::StrCat("the cache has ", self_cache->num_layers(),
                                                   " layers, the decoder ", c.decoder_layers));
  }
  if (self_cache->BatchSize() > 0 && self_cache->BatchSize() != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(rows, " rows but the cache holds ", self_cache->BatchSize()));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> BartModel::RunDecoder(absl::Span<const int32_t> ids, int64_t rows,
                                                 cache::KvCache* self_cache,
                                                 const CrossSource& cross, bool all_logits) {
  const BartConfig& c = config_;
  const int64_t n = static_cast<int64_t>(ids.size()) / rows;
  const int64_t past = self_cache != nullptr ? self_cache->SeqLength() : 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.decoder_head_dim()));
  const int64_t heads = c.decoder_attention_heads, d = c.d_model;
  if (self_cache != nullptr) self_cache->PrepareForward();
  at::Tensor x = Embed(BartIds(ids, rows), decoder_positions_, decoder_embedding_norm_, past);
  MaskCache masks;
  for (size_t li = 0; li < decoder_layers_.size(); ++li) {
    const Layer& layer = decoder_layers_[li];
    const int layer_index = static_cast<int>(li);
    const Attention& a = layer.self_attn;
    const at::Tensor q = BartSplitHeads(BartLinear(x, a.q, a.q_bias), heads);
    const at::Tensor k = BartSplitHeads(BartLinear(x, a.k, a.k_bias), heads);
    const at::Tensor v = BartSplitHeads(BartLinear(x, a.v, a.v_bias), heads);
    cache::LayerView self_view;
    if (self_cache != nullptr) {
      absl::StatusOr<cache::LayerView> view = self_cache->Update(layer_index, k, v);
      if (!view.ok()) return view.status();
      self_view = *std::move(view);
    } else {
      self_view = BartWholeView(k, v);
    }
    const at::Tensor attended = BartAttend(q, self_view, past, scale, &masks);
    x = at::layer_norm(x + BartLinear(attended, a.out, a.out_bias), {d},
                       layer.self_attn_norm.weight, layer.self_attn_norm.bias, c.layer_norm_eps);

    const Attention& ca = layer.cross_attn;
    const at::Tensor cq = BartSplitHeads(BartLinear(x, ca.q, ca.q_bias), heads);
    absl::StatusOr<cache::LayerView> cross_view = cross(layer, layer_index);
    if (!cross_view.ok()) return cross_view.status();
    // Not causal: the queries sit past every encoder column.
    const int64_t all_visible = cross_view->kv_offset + cross_view->keys.size(2);
    const at::Tensor crossed = BartAttend(cq, *cross_view, all_visible, scale, &masks);
    x = at::layer_norm(x + BartLinear(crossed, ca.out, ca.out_bias), {d},
                       layer.cross_attn_norm.weight, layer.cross_attn_norm.bias, c.layer_norm_eps);
    x = at::layer_norm(x + Feedforward(layer, x), {d}, layer.final_norm.weight,
                       layer.final_norm.bias, c.layer_norm_eps);
  }
  if (!all_logits) x = x.narrow(1, n - 1, 1);
  at::Tensor logits = BartLinear(x, lm_head_, final_logits_bias_);  // [rows, m, vocab]
  if (!all_logits) logits = logits.squeeze(1);
  if (rows == 1) logits = logits.squeeze(0);
  return logits.contiguous();
}

absl::StatusOr<at::Tensor> BartModel::Decode(absl::Span<const int32_t> ids, int64_t rows,
                                             const at::Tensor& encoder_output,
                                             cache::EncoderDecoderCache* cache, bool all_logits) {
  const BartConfig& c = config_;
  cache::KvCache* self_cache = cache != nullptr ? &cache->self_attention() : nullptr;
  if (absl::Status s = CheckDecoderInput(ids, rows, self_cache); !s.ok()) return s;
  if (!encoder_output.defined() || encoder_output.dim() != 3 ||
      encoder_output.size(2) != c.d_model ||
      (encoder_output.size(0) != 1 && encoder_output.size(0) != rows)) {
    return absl::InvalidArgumentError(absl::StrCat("encoder output must be [1 or ", rows,
                                                   " rows, encoder tokens, ", c.d_model, "]"));
  }
  const CrossSource cross = [&](const Layer& layer,
                                int layer_index) -> absl::StatusOr<cache::LayerView> {
    if (cache != nullptr) {
      return cache->CrossAttention(layer_index,
                                   [&] { return ProjectCross(layer, encoder_output, rows); });
    }
    auto [keys, values] = ProjectCross(layer, encoder_output, rows);
    return BartWholeView(keys, values);
  };
  return RunDecoder(ids, rows, self_cache, cross, all_logits);
}

absl::StatusOr<std::shared_ptr<const cache::CrossAttentionState>> BartModel::ComputeCrossState(
    absl::Span<const int32_t> encoder_ids) {
  absl::StatusOr<at::Tensor> encoded = Encode(encoder_ids);
  if (!encoded.ok()) return encoded.status();
  auto state = std::make_shared<cache::CrossAttentionState>();
  state->encoder_ids.assign(encoder_ids.begin(), encoder_ids.end());
  state->encoder_output = *std::move(encoded);
  for (const Layer& layer : decoder_layers_) {
    auto [keys, values] = ProjectCross(layer, state->encoder_output, 1);
    state->keys.push_back(std::move(keys));
    state->values.push_back(std::move(values));
  }
  return std::shared_ptr<const cache::CrossAttentionState>(std::move(state));
}

absl::StatusOr<ForwardOutput> BartModel::Forward(const Batch& batch) {
  const BartConfig& c = config_;
  // Everything is checked before any cache changes.
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceInput& seq = batch.sequences[s];
    const std::string what = absl::StrCat("sequence ", s);
    if (seq.encoder_token_ids.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       " has no encoder input: model_type 'bart' is an encoder-decoder model whose "
                       "prompt is the encoder input"));
    }
    if (absl::Status st = BartCheckIds(seq.encoder_token_ids, 1, c.vocab_size, "encoder input");
        !st.ok()) {
      return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
    }
    if (static_cast<int64_t>(seq.encoder_token_ids.size()) > c.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": encoder input of ", seq.encoder_token_ids.size(),
          " tokens exceeds max_position_embeddings (", c.max_position_embeddings, ")"));
    }
    if (absl::Status st = CheckDecoderInput(seq.token_ids, seq.rows, seq.cache); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
    }
  }
  ForwardOutput out;
  for (const SequenceInput& seq : batch.sequences) {
    const auto encodes = [&](const std::shared_ptr<const cache::CrossAttentionState>& s) {
      return s != nullptr && std::equal(s->encoder_ids.begin(), s->encoder_ids.end(),
                                        seq.encoder_token_ids.begin(), seq.encoder_token_ids.end());
    };
    std::shared_ptr<const cache::CrossAttentionState> state =
        seq.cache != nullptr ? seq.cache->cross_attention() : nullptr;
    if (!encodes(state)) {
      if (encodes(seq.encoder_state)) {
        state = seq.encoder_state;  // a named prefix's, shared (it is immutable)
      } else {
        absl::StatusOr<std::shared_ptr<const cache::CrossAttentionState>> computed =
            ComputeCrossState(seq.encoder_token_ids);
        if (!computed.ok()) return computed.status();
        state = *std::move(computed);
      }
      if (seq.cache != nullptr) seq.cache->set_cross_attention(state);
    }
    const CrossSource cross = [&](const Layer&,
                                  int layer_index) -> absl::StatusOr<cache::LayerView> {
      return BartWholeView(state->keys[layer_index], state->values[layer_index]);
    };
    absl::StatusOr<at::Tensor> logits =
        RunDecoder(seq.token_ids, seq.rows, seq.cache, cross, seq.all_logits);
    if (!logits.ok()) return logits.status();
    out.logits.push_back(*std::move(logits));
  }
  return out;
}

absl::StatusOr<GenerateResult> GenerateBart(BartModel& model, absl::Span<const int32_t> encoder_ids,
                                            absl::Span<const int32_t> decoder_prompt,
                                            cache::EncoderDecoderCache* cache,
                                            const GenerateOptions& options) {
  if (encoder_ids.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  if (options.max_new_tokens < 0) {
    return absl::InvalidArgumentError("max_new_tokens: must be >= 0");
  }
  if (absl::Status s = options.sampling.Validate(); !s.ok()) return s;
  if (cache != nullptr && (cache->SeqLength() != 0 || cache->is_updated(0))) {
    return absl::InvalidArgumentError("cache: must be empty at the start of GenerateBart");
  }
  const BartConfig& c = model.config();
  std::vector<int32_t> sequence(decoder_prompt.begin(), decoder_prompt.end());
  if (sequence.empty()) sequence.push_back(c.decoder_start_token_id);
  const int64_t max_length = static_cast<int64_t>(sequence.size()) + options.max_new_tokens;

  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(encoder_ids.size());
  result.finish_reason = "length";
  Sampler sampler(options.sampling);
  const std::vector<int32_t>& eos = model.info().eos_token_ids;

  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<at::Tensor> encoder_output = model.Encode(encoder_ids);
  if (!encoder_output.ok()) return encoder_output.status();
  absl::StatusOr<at::Tensor> logits = model.Decode(sequence, 1, *encoder_output, cache);
  if (!logits.ok()) return logits.status();
  result.prefill_ms = BartMillisSince(start);
  result.prompt_logits = *logits;

  start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    if (step > 0) {
      logits = cache != nullptr ? model.Decode(absl::MakeConstSpan(&sequence.back(), 1), 1,
                                               *encoder_output, cache)
                                : model.Decode(sequence, 1, *encoder_output, nullptr);
      if (!logits.ok()) return logits.status();
      ++result.decode_steps;
    }
    // Transformers' ForcedBOSTokenLogitsProcessor (at a decoder length of 1) and
    // ForcedEOSTokenLogitsProcessor (at max_length - 1) leave one token possible.
    const int64_t length = static_cast<int64_t>(sequence.size());
    std::optional<int32_t> forced;
    if (length == 1 && c.forced_bos_token_id) forced = c.forced_bos_token_id;
    if (length == max_length - 1 && c.forced_eos_token_id) forced = c.forced_eos_token_id;
    const int32_t token = forced ? *forced : sampler.Sample(*logits, sequence);
    if (options.record_logits) result.logits.push_back(*logits);
    result.tokens.push_back(token);
    sequence.push_back(token);
    if (!options.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
      result.finish_reason = "eos";
      break;
    }
  }
  result.decode_ms = BartMillisSince(start);
  return result;
}

}  // namespace kvserve::model
