// EncoderDecoderCache: a self-attention cache plus a cross-attention cache computed once.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/kv_cache.h"

namespace kvserve::cache {

// Pairs two KvCaches of any strategy with the same number of layers. Cross-attention K/V
// depend only on the encoder output, so each layer's are projected and stored once per
// request (is_updated) and read back afterwards. Length queries, Crop and past recording
// concern the self-attention cache only; Reset, the beam helpers, Memory and Clone act on
// both (the reference allows batch ops only when both caches are dynamic; every kvserve
// strategy supports them). Not thread-safe: owned by the engine thread.
class EncoderDecoderCache {
 public:
  using Projection = std::function<std::pair<at::Tensor, at::Tensor>()>;

  // InvalidArgument when either cache is null or their layer counts differ.
  static absl::StatusOr<std::unique_ptr<EncoderDecoderCache>> Create(
      std::unique_ptr<KvCache> self_attention, std::unique_ptr<KvCache> cross_attention);

  KvCache& self_attention() { return *self_; }
  KvCache& cross_attention() { return *cross_; }
  int num_layers() const { return self_->num_layers(); }
  // Whether layer `layer`'s cross K/V are stored (initially: the cross layer holds tokens).
  bool is_updated(int layer) const { return is_updated_[layer]; }

  // Self-attention update of decoder layer `layer`; see KvCache::Update.
  absl::StatusOr<LayerView> UpdateSelf(int layer, const at::Tensor& keys, const at::Tensor& values);
  // Cross-attention K/V of decoder layer `layer`. The first call (is_updated false) calls
  // `project` for [batch, kv_heads, encoder_len, head_dim] keys/values, stores them and sets
  // is_updated; later calls return the stored K/V without calling `project`.
  absl::StatusOr<LayerView> CrossAttention(int layer, const Projection& project);

  int64_t SeqLength() const { return self_->SeqLength(); }
  int64_t MaxLength() const { return self_->MaxLength(); }
  absl::Status Crop(int64_t n) { return self_->Crop(n); }
  void ActivatePastRecording() { self_->ActivatePastRecording(); }

  // Both caches; all-or-nothing (indices are checked against both first).
  absl::Status Reorder(const at::Tensor& beam_idx);
  absl::Status SelectIndices(const at::Tensor& indices);
  absl::Status RepeatInterleave(int64_t repeats);

  MemoryUsage Memory() const;
  std::unique_ptr<EncoderDecoderCache> Clone() const;
  // Empties both caches and clears every is_updated flag.
  void Reset();

 private:
  // Shape of the stored cross K/V of one layer, for zero-token reads.
  struct CrossShape {
    int64_t kv_heads = 0;
    int64_t key_head_dim = 0;
    int64_t value_head_dim = 0;
    at::TensorOptions key_options;
    at::TensorOptions value_options;
  };

  EncoderDecoderCache(std::unique_ptr<KvCache> self_attention,
                      std::unique_ptr<KvCache> cross_attention);

  std::unique_ptr<KvCache> self_;
  std::unique_ptr<KvCache> cross_;
  std::vector<bool> is_updated_;
  std::vector<CrossShape> cross_shapes_;
};

}  // namespace kvserve::cache
