// Per-sequence grouped-query attention with full, sliding and chunked masks (see attention.h).
#include "model/attention.h"

#include <limits>

#include "model/cpu_kernels.h"

namespace kvserve::model {
namespace {

// Below this many scores one thread's softmax is faster than handing out slices.
constexpr int64_t kParallelSoftmaxElements = int64_t{1} << 16;

// Columns of a view, and its valid ones: the shared prefix segment's, then the own ones.
int64_t Columns(const cache::LayerView& kv) { return kv.prefix_length() + kv.keys.size(2); }
int64_t ValidColumns(const cache::LayerView& kv) { return kv.prefix_length() + kv.num_valid; }

}  // namespace

at::Tensor VisibilityMask(int64_t n, int64_t q_start, const cache::LayerView& kv,
                          const cache::LayerSpec& layer, const c10::Device& device) {
  const int64_t kv_len = Columns(kv);
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor q_pos = at::arange(q_start, q_start + n, opts).unsqueeze(1);  // [n,1]
  const at::Tensor col = at::arange(kv_len, opts).unsqueeze(0);                  // [1,L]
  const at::Tensor k_pos = col + kv.kv_offset;
  at::Tensor visible = (k_pos <= q_pos).logical_and(col < ValidColumns(kv));
  if (layer.type == cache::LayerType::kSlidingAttention) {
    visible = visible.logical_and(k_pos > q_pos - layer.window);
  } else if (layer.type == cache::LayerType::kChunkedAttention) {
    visible = visible.logical_and(at::floor_divide(k_pos, layer.window) ==
                                  at::floor_divide(q_pos, layer.window));
  }
  return visible;
}

namespace {

// What a mask depends on, plus the query group of a bias (0 for a bool mask).
std::array<int64_t, 8> MaskKey(int64_t n, int64_t q_start, const cache::LayerView& kv,
                               const cache::LayerSpec& layer, int64_t group) {
  return {n,
          q_start,
          kv.kv_offset,
          ValidColumns(kv),
          Columns(kv),
          static_cast<int64_t>(layer.type),
          layer.window,
          group};
}

}  // namespace

const at::Tensor* MaskCache::Find(const std::array<int64_t, 8>& key) const {
  for (const Entry& e : entries_) {
    if (e.key == key) return &e.mask;
  }
  return nullptr;
}

const at::Tensor& MaskCache::Get(int64_t n, int64_t q_start, const cache::LayerView& kv,
                                 const cache::LayerSpec& layer, const c10::Device& device) {
  const std::array<int64_t, 8> key = MaskKey(n, q_start, kv, layer, 0);
  if (const at::Tensor* mask = Find(key)) return *mask;
  entries_.push_back({key, VisibilityMask(n, q_start, kv, layer, device)});
  return entries_.back().mask;
}

const at::Tensor& MaskCache::Bias(int64_t n, int64_t q_start, const cache::LayerView& kv,
                                  const cache::LayerSpec& layer, const c10::Device& device,
                                  int64_t group) {
  const std::array<int64_t, 8> key = MaskKey(n, q_start, kv, layer, group);
  if (const at::Tensor* bias = Find(key)) return *bias;
  const at::Tensor visible = Get(n, q_start, kv, layer, device);
  at::Tensor bias =
      at::zeros(visible.sizes(), at::TensorOptions().dtype(at::kFloat).device(device))
          .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
  entries_.push_back({key, group == 1 ? bias : bias.repeat({group, 1})});
  return entries_.back().mask;
}

namespace {

// True when every column is visible to every query, so no mask is needed: a single query
// at the end of a full-attention (or window-bounded) view with no unused slots.
bool AllVisible(int64_t n, int64_t q_start, const cache::LayerView& kv,
                const cache::LayerSpec& layer) {
  const int64_t kv_len = Columns(kv);
  if (n != 1 || ValidColumns(kv) != kv_len) return false;
  const int64_t last_key = kv.kv_offset + kv_len - 1;
  if (last_key > q_start) return false;
  switch (layer.type) {
    case cache::LayerType::kFullAttention:
      return true;
    case cache::LayerType::kSlidingAttention:
      return kv.kv_offset > q_start - layer.window;
    case cache::LayerType::kChunkedAttention:
      return kv.kv_offset / layer.window == q_start / layer.window;
    case cache::LayerType::kMambaState:  // no attention (the Mamba forward never calls this)
      return false;
  }
  return false;
}

}  // namespace

at::Tensor Attend(const at::Tensor& queries, const cache::LayerView& kv, int64_t q_start,
                  const cache::LayerSpec& layer, double scale, MaskCache* masks, double softcap) {
  const int64_t n = queries.size(0);
  const int64_t heads = queries.size(1);
  const int64_t head_dim = queries.size(2);
  const int64_t kv_heads = kv.keys.size(1);
  const int64_t kv_len = Columns(kv);
  const int64_t prefix_len = kv.prefix_length();
  const int64_t group = heads / kv_heads;

  // [n, heads, d] -> [kv_heads, group * n, d]: the queries sharing a kv head are one matrix.
  const at::Tensor q = queries.permute({1, 0, 2}).reshape({kv_heads, group * n, head_dim});
  const at::Tensor k = kv.keys.select(0, 0);    // [kv_heads, L, d]
  const at::Tensor v = kv.values.select(0, 0);  // [kv_heads, L, d]

  at::Tensor scores;  // [kv_heads, group * n, P + L], float32
  const bool all_visible = AllVisible(n, q_start, kv, layer);
  // The cap must come before the mask, so a capped layer cannot fold the mask into the GEMM.
  const bool fused_mask =
      !all_visible && masks != nullptr && q.scalar_type() == at::kFloat && !(softcap > 0);
  if (prefix_len > 0) {
    // The shared segment is read in place: its scores and the own columns' are computed by
    // two GEMMs into one score matrix, so that one softmax covers both.
    const at::Tensor pk = kv.prefix_keys.select(0, 0);  // [kv_heads, P, d]
    scores = at::cat({at::bmm(q, pk.transpose(1, 2)), at::bmm(q, k.transpose(1, 2))}, 2);
    if (scores.scalar_type() != at::kFloat) scores = scores.to(at::kFloat);
    scores.mul_(scale);
    if (softcap > 0) scores.div_(softcap).tanh_().mul_(softcap);
  } else if (fused_mask) {
    // One GEMM computes scale * q k^T + mask instead of a GEMM, a scale and a masked fill.
    scores = at::baddbmm(masks->Bias(n, q_start, kv, layer, queries.device(), group), q,
                         k.transpose(1, 2), /*beta=*/1.0, /*alpha=*/scale);
  } else {
    scores = at::bmm(q, k.transpose(1, 2));
    if (scores.scalar_type() != at::kFloat) scores = scores.to(at::kFloat);
    scores.mul_(scale);
    if (softcap > 0) scores.div_(softcap).tanh_().mul_(softcap);
  }
  if (!all_visible && (!fused_mask || prefix_len > 0)) {
    const at::Tensor visible = masks != nullptr
                                   ? masks->Get(n, q_start, kv, layer, queries.device())
                                   : VisibilityMask(n, q_start, kv, layer, queries.device());
    scores = scores.view({kv_heads, group, n, kv_len})
                 .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity())
                 .view({kv_heads, group * n, kv_len});
  }
  // A prefill's scores are large: their softmax runs over the worker threads.
  at::Tensor probs;
  if (scores.numel() >= kParallelSoftmaxElements) probs = ParallelSoftmax(scores);
  if (!probs.defined()) probs = at::softmax(scores, -1);
  // Rows with no visible key would be NaN after softmax; they cannot occur for causal masks
  // but must not poison the output if a caller passes an empty view.
  if (ValidColumns(kv) == 0) probs.zero_();
  if (probs.scalar_type() != v.scalar_type()) probs = probs.to(v.scalar_type());
  at::Tensor out;  // [kv_heads, group * n, d]
  if (prefix_len > 0) {
    out = at::bmm(probs.narrow(2, 0, prefix_len), kv.prefix_values.select(0, 0));
    out.add_(at::bmm(probs.narrow(2, prefix_len, kv_len - prefix_len), v));
  } else {
    out = at::bmm(probs, v);
  }
  return out.view({heads, n, head_dim}).permute({1, 0, 2}).reshape({n, heads * head_dim});
}

}  // namespace kvserve::model
