// Self- plus cross-attention caches of an encoder-decoder model (see encoder_decoder_cache.h).
#include "cache/encoder_decoder_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"

namespace kvserve::cache {

EncoderDecoderCache::EncoderDecoderCache(std::unique_ptr<KvCache> self_attention,
                                         std::unique_ptr<KvCache> cross_attention)
    : self_(std::move(self_attention)), cross_(std::move(cross_attention)) {
  is_updated_.resize(cross_->num_layers());
  cross_shapes_.resize(cross_->num_layers());
  for (int i = 0; i < cross_->num_layers(); ++i) {
    is_updated_[i] = cross_->layer(i).SeqLength() > 0;
  }
}

absl::StatusOr<std::unique_ptr<EncoderDecoderCache>> EncoderDecoderCache::Create(
    std::unique_ptr<KvCache> self_attention, std::unique_ptr<KvCache> cross_attention) {
  if (!self_attention || !cross_attention) {
    return absl::InvalidArgumentError(
        "an encoder-decoder cache needs both a self-attention and a cross-attention cache");
  }
  if (self_attention->num_layers() != cross_attention->num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("self-attention cache has ", self_attention->num_layers(),
                     " layers but the cross-attention cache has ", cross_attention->num_layers()));
  }
  return std::unique_ptr<EncoderDecoderCache>(
      new EncoderDecoderCache(std::move(self_attention), std::move(cross_attention)));
}

absl::StatusOr<LayerView> EncoderDecoderCache::UpdateSelf(int layer, const at::Tensor& keys,
                                                          const at::Tensor& values) {
  return self_->Update(layer, keys, values);
}

absl::StatusOr<LayerView> EncoderDecoderCache::CrossAttention(int layer,
                                                              const Projection& project) {
  if (layer < 0 || layer >= cross_->num_layers()) {
    return absl::OutOfRangeError(absl::StrCat("cross-attention layer ", layer, " does not exist (",
                                              cross_->num_layers(), " layers)"));
  }
  if (!is_updated_[layer] || !cross_shapes_[layer].key_options.has_dtype()) {
    if (is_updated_[layer]) {
      // Stored before this object knew the shape (a snapshot): the shape comes from a
      // projection only if nothing is stored, so refuse rather than project twice.
      return absl::FailedPreconditionError(absl::StrCat(
          "cross-attention layer ", layer, " holds K/V of unknown shape; reset the cache"));
    }
    auto [keys, values] = project();
    absl::StatusOr<LayerView> view = cross_->Update(layer, keys, values);
    if (!view.ok()) return view.status();
    is_updated_[layer] = true;
    cross_shapes_[layer] = {keys.size(1), keys.size(3), values.size(3), keys.options(),
                            values.options()};
    return view;
  }
  // A zero-token update is a read in every layer class.
  const CrossShape& shape = cross_shapes_[layer];
  const int64_t batch = cross_->layer(layer).BatchSize();
  return cross_->Update(
      layer, at::empty({batch, shape.kv_heads, 0, shape.key_head_dim}, shape.key_options),
      at::empty({batch, shape.kv_heads, 0, shape.value_head_dim}, shape.value_options));
}

absl::Status EncoderDecoderCache::Reorder(const at::Tensor& beam_idx) {
  for (KvCache* cache : {self_.get(), cross_.get()}) {
    for (int i = 0; i < cache->num_layers(); ++i) {
      if (cache->layer(i).BatchSize() == 0) continue;
      if (absl::Status s = CheckBatchIndices(beam_idx, cache->layer(i).BatchSize(), true);
          !s.ok()) {
        return s;
      }
      break;
    }
  }
  if (absl::Status s = self_->Reorder(beam_idx); !s.ok()) return s;
  return cross_->Reorder(beam_idx);
}

absl::Status EncoderDecoderCache::SelectIndices(const at::Tensor& indices) {
  for (KvCache* cache : {self_.get(), cross_.get()}) {
    for (int i = 0; i < cache->num_layers(); ++i) {
      if (cache->layer(i).BatchSize() == 0) continue;
      if (absl::Status s = CheckBatchIndices(indices, cache->layer(i).BatchSize(), false);
          !s.ok()) {
        return s;
      }
      break;
    }
  }
  if (absl::Status s = self_->SelectIndices(indices); !s.ok()) return s;
  return cross_->SelectIndices(indices);
}

absl::Status EncoderDecoderCache::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  if (absl::Status s = self_->RepeatInterleave(repeats); !s.ok()) return s;
  return cross_->RepeatInterleave(repeats);
}

MemoryUsage EncoderDecoderCache::Memory() const {
  MemoryUsage usage = self_->Memory();
  usage += cross_->Memory();
  return usage;
}

std::unique_ptr<EncoderDecoderCache> EncoderDecoderCache::Clone() const {
  std::unique_ptr<EncoderDecoderCache> copy(
      new EncoderDecoderCache(self_->Clone(), cross_->Clone()));
  copy->is_updated_ = is_updated_;
  copy->cross_shapes_ = cross_shapes_;
  return copy;
}

void EncoderDecoderCache::Reset() {
  self_->Reset();
  cross_->Reset();
  std::fill(is_updated_.begin(), is_updated_.end(), false);
  std::fill(cross_shapes_.begin(), cross_shapes_.end(), CrossShape{});
}

}  // namespace kvserve::cache
