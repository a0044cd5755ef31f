// Capturing prefilled K/V into snapshots and loading them into request caches (see snapshot.h).
#include "cache/snapshot.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cache/cross_attention_state.h"
#include "cache/dynamic_layer.h"
#include "cache/kv_cache.h"
#include "cache/mamba_state_layer.h"

namespace kvserve::cache {

Snapshot::Snapshot(std::vector<int32_t> token_ids, std::string fingerprint,
                   std::vector<at::Tensor> keys, std::vector<at::Tensor> values)
    : token_ids_(std::move(token_ids)),
      fingerprint_(std::move(fingerprint)),
      keys_(std::move(keys)),
      values_(std::move(values)) {
  KVSERVE_CHECK(keys_.size() == values_.size())
      << "a snapshot has keys of " << keys_.size() << " layers but values of " << values_.size();
  for (size_t i = 0; i < keys_.size(); ++i) {
    bytes_ += static_cast<int64_t>(keys_[i].nbytes() + values_[i].nbytes());
  }
}

std::vector<int32_t> Snapshot::content_ids() const {
  if (cross_attention_ != nullptr) return cross_attention_->encoder_ids;
  return token_ids_;
}

absl::StatusOr<std::shared_ptr<const Snapshot>> Snapshot::Capture(const KvCache& capture,
                                                                  std::vector<int32_t> token_ids,
                                                                  std::string fingerprint) {
  const int64_t n = static_cast<int64_t>(token_ids.size());
  if (n == 0) return absl::InvalidArgumentError("a snapshot needs at least one token");
  if (capture.num_layers() == 0) {
    return absl::InvalidArgumentError("the capture cache has no layers");
  }
  if (capture.layer(0).type() == LayerType::kMambaState) {
    return CaptureStates(capture, std::move(token_ids), std::move(fingerprint));
  }
  std::vector<const DynamicLayer*> layers;
  layers.reserve(capture.num_layers());
  for (int i = 0; i < capture.num_layers(); ++i) {
    const auto* layer = dynamic_cast<const DynamicLayer*>(&capture.layer(i));
    if (layer == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", i,
                       " of the capture cache is not a DynamicLayer; a snapshot is captured from "
                       "a cache whose every layer is a plain DynamicLayer (it holds every token)"));
    }
    if (layer->SeqLength() != n) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, " of the capture cache holds ",
                                                     layer->SeqLength(), " tokens but ", n,
                                                     " token ids were given"));
    }
    if (layer->BatchSize() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", i, " of the capture cache has batch ", layer->BatchSize(),
                       "; a snapshot holds one sequence (batch 1)"));
    }
    layers.push_back(layer);
  }
  std::vector<at::Tensor> keys, values;
  keys.reserve(layers.size());
  values.reserve(layers.size());
  for (const DynamicLayer* layer : layers) {
    keys.push_back(layer->keys().clone(at::MemoryFormat::Contiguous));
    values.push_back(layer->values().clone(at::MemoryFormat::Contiguous));
  }
  auto* snapshot = new Snapshot(std::move(token_ids), std::move(fingerprint), std::move(keys),
                                std::move(values));
  snapshot->cross_attention_ = capture.cross_attention();
  return std::shared_ptr<const Snapshot>(snapshot);
}

absl::StatusOr<std::shared_ptr<const Snapshot>> Snapshot::CaptureStates(
    const KvCache& capture, std::vector<int32_t> token_ids, std::string fingerprint) {
  const int64_t n = static_cast<int64_t>(token_ids.size());
  std::vector<at::Tensor> conv, ssm;
  for (int i = 0; i < capture.num_layers(); ++i) {
    const auto* layer = dynamic_cast<const MambaStateLayer*>(&capture.layer(i));
    if (layer == nullptr || layer->SeqLength() != n || layer->BatchSize() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", i, " of the capture cache is not a Mamba state layer of batch 1 after ", n,
          " tokens; a state snapshot is captured from a cache whose every layer is one"));
    }
    conv.push_back(layer->conv_state().clone(at::MemoryFormat::Contiguous));
    ssm.push_back(layer->ssm_state().clone(at::MemoryFormat::Contiguous));
  }
  std::shared_ptr<Snapshot> snapshot(
      new Snapshot(std::move(token_ids), std::move(fingerprint), std::move(conv), std::move(ssm)));
  snapshot->states_ = true;
  return std::shared_ptr<const Snapshot>(std::move(snapshot));
}

absl::Status Snapshot::LoadStatesInto(KvCache* cache, int64_t num_tokens) const {
  if (num_tokens != this->num_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a state snapshot (Mamba) of ", this->num_tokens(),
        " tokens loads only whole: its states cannot be cut back to ", num_tokens, " tokens"));
  }
  std::vector<MambaStateLayer*> layers;
  for (int i = 0; i < cache->num_layers(); ++i) {
    auto* layer = dynamic_cast<MambaStateLayer*>(&cache->layer(i));
    if (layer == nullptr || layer->SeqLength() != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "a state snapshot loads only into empty Mamba state layers; layer ", i, " is not one"));
    }
    layers.push_back(layer);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    layers[i]->SetStates(keys_[i].clone(), values_[i].clone(), num_tokens);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Snapshot>> Snapshot::FromTensors(
    std::vector<int32_t> token_ids, std::string fingerprint, std::vector<at::Tensor> keys,
    std::vector<at::Tensor> values) {
  const int64_t n = static_cast<int64_t>(token_ids.size());
  if (n == 0) return absl::InvalidArgumentError("a snapshot needs at least one token");
  if (keys.empty() || keys.size() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a snapshot needs as many keys as values of >= 1 layer; got ", keys.size(),
                     " and ", values.size()));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    for (const at::Tensor* t : {&keys[i], &values[i]}) {
      if (!t->defined() || t->dim() != 4 || t->size(0) != 1 || t->size(2) != n ||
          !t->is_contiguous()) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", i, " of the snapshot is not a contiguous [1, kv_heads, ", n,
                         ", head_dim] tensor"));
      }
    }
  }
  return std::shared_ptr<const Snapshot>(new Snapshot(std::move(token_ids), std::move(fingerprint),
                                                      std::move(keys), std::move(values)));
}

absl::Status Snapshot::LoadInto(KvCache* cache, int64_t num_tokens, int* shared_layers) const {
  if (cache == nullptr) return absl::InvalidArgumentError("LoadInto needs a cache");
  if (cache->num_layers() != num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("the cache has ", cache->num_layers(),
                                                   " layers but the snapshot has ", num_layers()));
  }
  if (num_tokens < 1 || num_tokens > this->num_tokens()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load ", num_tokens, " tokens from a snapshot of ", this->num_tokens(),
                     " tokens (1 to ", this->num_tokens(), " allowed)"));
  }
  if (shared_layers != nullptr) *shared_layers = 0;  // a state snapshot is always copied
  if (states_) return LoadStatesInto(cache, num_tokens);
  for (int i = 0; i < cache->num_layers(); ++i) {
    const CacheLayer& layer = cache->layer(i);
    if (layer.SeqLength() != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("a snapshot loads only into an empty cache; layer ", i, " already holds ",
                       layer.SeqLength(), " tokens"));
    }
    // Sliding and chunked layers take any number of tokens (they keep their window); a
    // bounded full-attention layer cannot, and would fail after earlier layers were loaded.
    if (layer.type() == LayerType::kFullAttention && layer.MaxLength() >= 0 &&
        layer.MaxLength() < num_tokens) {
      return absl::OutOfRangeError(absl::StrCat(
          "layer ", i, " holds at most ", layer.MaxLength(), " tokens; the prefix needs ",
          num_tokens, " (build the cache with max_cache_len >= ", num_tokens, ")"));
    }
  }
  // Checked above: the cache has this snapshot's layer count, so every index below is one of
  // its layers.
  KVSERVE_DCHECK(cache->num_layers() == num_layers());
  for (int i = 0; i < num_layers(); ++i) {
    // Views of the first num_tokens tokens: every layer copies its update into its own
    // storage (or reads them in place, never writing), so no copy is made here.
    const at::Tensor keys = keys_[i].narrow(2, 0, num_tokens);
    const at::Tensor values = values_[i].narrow(2, 0, num_tokens);
    if (shared_layers != nullptr && cache->layer(i).AttachSharedPrefix(keys, values).ok()) {
      ++*shared_layers;
      continue;
    }
    if (cache->layer(i).ContentsDependOnUpdateSplit()) {
      // A quantized layer's first update quantizes all it gets: the prefix waits, at full
      // precision, to arrive with the tokens after it, as in a cold prefill.
      if (absl::Status staged = cache->StagePrefix(i, keys, values); !staged.ok()) return staged;
      continue;
    }
    absl::StatusOr<LayerView> view = cache->Update(i, keys, values);
    if (!view.ok()) {
      return absl::Status(view.status().code(), absl::StrCat("loading the snapshot into layer ", i,
                                                             " (the cache is "
                                                             "partly loaded and must be dropped): ",
                                                             view.status().message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::cache
