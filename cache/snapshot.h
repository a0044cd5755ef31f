// Snapshot: the immutable prefilled K/V of one token sequence, copied into request caches or
// read by them in place.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvserve::cache {

class KvCache;
struct CrossAttentionState;

// Every layer's keys and values for every token of a prefix, as a model computed them in one
// prefill, plus the prefix's token ids and the fingerprint of the model that made them.
// Immutable once made: every method is const and safe to call from any thread at once; the
// tensors stay on the device they were captured on and share no storage with any cache.
// Shared as std::shared_ptr<const Snapshot>: a reader's copy keeps it alive after the
// PrefixStore drops or replaces it.
class Snapshot {
 public:
  // Copies `capture` (contiguous clones). Every layer of `capture` must be a DynamicLayer
  // (never offloaded or sliding, so that it holds every token) with batch 1 and exactly
  // token_ids.size() >= 1 tokens; InvalidArgument naming the first layer that is not.
  // A cache of MambaStateLayers (every layer one, batch 1, token_ids.size() tokens seen) gives
  // a state snapshot (holds_states()): per layer the convolution state as "keys" and the SSM
  // state as "values", which load only whole (see LoadInto).
  static absl::StatusOr<std::shared_ptr<const Snapshot>> Capture(const KvCache& capture,
                                                                 std::vector<int32_t> token_ids,
                                                                 std::string fingerprint);
  // A snapshot of tensors made elsewhere (read back from a file, copied between devices):
  // per layer keys and values [1, kv_heads, token_ids.size(), head_dim], contiguous, as many
  // keys as values, >= 1 layer and >= 1 token. Takes the tensors as they are (no copy): the
  // caller must not write to them afterwards. InvalidArgument naming the first bad layer.
  static absl::StatusOr<std::shared_ptr<const Snapshot>> FromTensors(
      std::vector<int32_t> token_ids, std::string fingerprint, std::vector<at::Tensor> keys,
      std::vector<at::Tensor> values);

  // Feeds the first `num_tokens` tokens of every layer i to `cache` as one
  // cache->Update(i, keys, values), so that each strategy ends up holding exactly what it
  // would hold after prefilling those tokens in one forward; the layers copy into their own
  // storage, so `cache` shares nothing with the snapshot. A layer whose contents depend on
  // how updates are split (quantized) gets them staged instead (KvCache::StagePrefix): they
  // join the layer's first real update, so that prefix and suffix are quantized together as
  // a cold prefill of the whole prompt would; until then the cache holds views of the
  // snapshot's tensors (which are immutable). `cache` must be empty (SeqLength 0
  // on every layer) with num_layers() layers, and 1 <= num_tokens <= this->num_tokens():
  // InvalidArgument / FailedPrecondition otherwise, before anything changes. OutOfRange
  // before anything changes when a bounded full-attention layer (static) has fewer than
  // `num_tokens` slots. If a layer's Update fails anyway, the error names the layer and the
  // earlier layers stay loaded: the caller must drop (or Reset) the cache. Engine thread
  // (the thread that owns `cache`).
  //
  // With `shared_layers` (PrefixKvMode::kShared), every layer whose strategy allows it
  // (CacheLayer::AttachSharedPrefix) reads the tokens in place instead of copying them, and
  // *shared_layers is set to how many did; the others copy as above. The caller then makes the
  // cache hold the snapshot (KvCache::HoldSharedOwner) so that the store sees it referenced.
  //
  // A state snapshot loads only with num_tokens == this->num_tokens() (a state cannot be cut
  // back to an earlier token; InvalidArgument otherwise) into a cache of empty
  // MambaStateLayers, each getting a copy of its states (never shared).
  absl::Status LoadInto(KvCache* cache, int64_t num_tokens, int* shared_layers = nullptr) const;
  // True for a state snapshot (a Mamba model's): reusable only at its exact end.
  bool holds_states() const { return states_; }

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids_.size()); }
  absl::Span<const int32_t> token_ids() const { return token_ids_; }
  const std::string& fingerprint() const { return fingerprint_; }
  int num_layers() const { return static_cast<int>(keys_.size()); }
  // Bytes of K/V held (every layer's keys and values).
  int64_t bytes() const { return bytes_; }
  // Layer `layer`'s stored keys/values, [1, kv_heads, num_tokens(), head_dim]. Read-only:
  // writing through them would change every later load.
  const at::Tensor& keys(int layer) const { return keys_[layer]; }
  const at::Tensor& values(int layer) const { return values_[layer]; }
  // An encoder-decoder model's capture: the capture cache's cross-attention state (shared,
  // immutable; not part of bytes()), so that a named prefix registered on an encoder input
  // hands its encoder output and cross K/V to the requests on it. Null otherwise.
  const std::shared_ptr<const CrossAttentionState>& cross_attention() const {
    return cross_attention_;
  }
  // What registering the entry again takes as its content: the encoder input of an
  // encoder-decoder capture, else token_ids(). Events and the prefix journal record it.
  std::vector<int32_t> content_ids() const;

 private:
  Snapshot(std::vector<int32_t> token_ids, std::string fingerprint, std::vector<at::Tensor> keys,
           std::vector<at::Tensor> values);
  // Capture and LoadInto for a cache of MambaStateLayers.
  static absl::StatusOr<std::shared_ptr<const Snapshot>> CaptureStates(
      const KvCache& capture, std::vector<int32_t> token_ids, std::string fingerprint);
  absl::Status LoadStatesInto(KvCache* cache, int64_t num_tokens) const;

  std::vector<int32_t> token_ids_;
  std::string fingerprint_;
  std::vector<at::Tensor> keys_;    // per layer: [1, kv_heads, num_tokens, head_dim]
  std::vector<at::Tensor> values_;  // per layer: [1, kv_heads, num_tokens, head_dim]
  int64_t bytes_ = 0;
  // A state snapshot: keys_ are conv states [1, d_inner, conv_kernel - 1] and values_ SSM
  // states [1, d_inner, state_size].
  bool states_ = false;
  std::shared_ptr<const CrossAttentionState> cross_attention_;  // null: none
};

}  // namespace kvserve::cache
