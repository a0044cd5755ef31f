// The per-request cache container (see kv_cache.h).
#include "cache/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cache/dynamic_layer.h"
#include "cache/dynamic_sliding_window_layer.h"
#include "cache/kv_memory_budget.h"
#include "cache/mamba_state_layer.h"
#include "cache/offload_stream.h"
#include "cache/offloaded_layer.h"

namespace kvserve::cache {

absl::Status ValidateLayerSpec(const LayerSpec& spec, int layer_index) {
  if (spec.is_sliding() && spec.window < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer_index, " is ", LayerTypeName(spec.type), " with a window of ",
                     spec.window, " tokens; the window must be >= 2"));
  }
  return absl::OkStatus();
}

KvCache::KvCache(std::vector<std::unique_ptr<CacheLayer>> layers) : layers_(std::move(layers)) {}

KvCache::~KvCache() {
  if (budget_ != nullptr) budget_->Add(-accounted_device_bytes_);
}

void KvCache::SyncBudget() {
  if (budget_ == nullptr) return;
  const int64_t now = Memory().device_bytes;
  budget_->Add(now - accounted_device_bytes_);
  accounted_device_bytes_ = now;
}

void KvCache::AttachBudget(KvMemoryBudget* budget) {
  if (budget_ != nullptr) budget_->Add(-accounted_device_bytes_);
  budget_ = budget;
  accounted_device_bytes_ = 0;
  SyncBudget();
}

bool KvCache::has_staged() const {
  for (const Staged& s : staged_) {
    if (s.keys.defined()) return true;
  }
  return false;
}

void KvCache::ForEachStaged(const std::function<void(at::Tensor&)>& fn) {
  for (Staged& s : staged_) {
    if (!s.keys.defined()) continue;
    fn(s.keys);
    fn(s.values);
  }
}

absl::Status KvCache::StagePrefix(int layer_index, const at::Tensor& keys,
                                  const at::Tensor& values) {
  if (layer_index < 0 || layer_index >= num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer_index, " is out of range [0, ", num_layers(), ")"));
  }
  if (!keys.defined() || !values.defined() || keys.dim() != 4 ||
      !keys.sizes().equals(values.sizes())) {
    return absl::InvalidArgumentError(
        "a staged prefix needs 4-D keys and values of one shape [batch, kv_heads, n, head_dim]");
  }
  staged_.resize(layers_.size());
  if (layers_[layer_index]->SeqLength() != 0 || staged_[layer_index].keys.defined()) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", layer_index,
                     " is not empty: a prefix is staged only before the "
                     "layer's first update"));
  }
  staged_[layer_index] = {keys, values};
  return absl::OkStatus();
}

void KvCache::BeginStep() {
  staged_at_step_ = staged_;
  step_start_.resize(layers_.size());
  rollback_points_.resize(layers_.size());
  const bool reversible = budget_ != nullptr && budget_->active();
  for (size_t i = 0; i < layers_.size(); ++i) {
    step_start_[i] = layers_[i]->SeqLength();
    rollback_points_[i] = reversible ? layers_[i]->RollbackPoint() : nullptr;
  }
  if (budget_ != nullptr && budget_->active() && !recording_) {
    // Sliding layers drop old tokens as they append; keeping them until CommitStep is what
    // makes a half-done step reversible.
    ActivatePastRecording();
    recording_ = true;
  }
}

void KvCache::CommitStep() {
  staged_at_step_.clear();
  for (auto& point : rollback_points_) point.reset();
  if (recording_) {
    (void)Crop(0);  // frees the states kept for a rollback
    SyncBudget();
  }
  // Sliding layers let a shared segment go once their window has moved past it.
  if (shared_owner_ != nullptr && SharedPrefixLength() == 0) shared_owner_.reset();
}

absl::Status KvCache::RollbackStep() {
  absl::Status result;
  for (size_t i = 0; i < layers_.size() && i < step_start_.size(); ++i) {
    if (i < rollback_points_.size() && rollback_points_[i] != nullptr) {
      layers_[i]->RestoreRollbackPoint(std::move(rollback_points_[i]));
      continue;
    }
    const int64_t added = layers_[i]->SeqLength() - step_start_[i];
    if (added <= 0) continue;
    if (step_start_[i] == 0) {
      // Back to empty: a fresh layer (a quantized layer's first update is special).
      layers_[i]->Reset();
      continue;
    }
    if (absl::Status s = layers_[i]->Crop(-added); !s.ok() && result.ok()) {
      result = absl::InternalError(absl::StrCat("layer ", i, " cannot roll back: ", s.message()));
    }
  }
  if (recording_) (void)Crop(0);
  // Prefixes joined into the failed step's first updates wait for the retry.
  staged_ = staged_at_step_;
  // Offloaded layers fetched for the failed step (or prefetched for the next layer) go back
  // to the host, so that nothing of a rolled-back step stays on the device.
  for (auto& layer : layers_) {
    if (layer->offloaded()) layer->AfterUpdate();
  }
  SyncBudget();
  return result;
}

int64_t KvCache::ConvertToOffloaded() {
  const int64_t before = Memory().device_bytes;
  if (offload_stream_ == nullptr) offload_stream_ = std::make_shared<OffloadStream>();
  converted_.resize(layers_.size(), false);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i]->offloaded()) continue;
    layers_[i] = OffloadedLayer::Adopt(std::move(layers_[i]), offload_stream_);
    converted_[i] = true;
  }
  SyncBudget();
  return before - Memory().device_bytes;
}

int64_t KvCache::ConvertToResident() {
  const int64_t before = Memory().device_bytes;
  for (size_t i = 0; i < converted_.size(); ++i) {
    if (!converted_[i]) continue;
    layers_[i] = static_cast<OffloadedLayer&>(*layers_[i]).Release();
    converted_[i] = false;
  }
  SyncBudget();
  return Memory().device_bytes - before;
}

bool KvCache::converted_to_offloaded() const {
  return std::find(converted_.begin(), converted_.end(), true) != converted_.end();
}

bool KvCache::fully_offloaded() const {
  for (const auto& layer : layers_) {
    if (!layer->offloaded()) return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::CreateDynamic(
    const std::vector<LayerSpec>& layer_specs) {
  std::vector<std::unique_ptr<CacheLayer>> layers;
  layers.reserve(layer_specs.size());
  for (size_t i = 0; i < layer_specs.size(); ++i) {
    const LayerSpec& spec = layer_specs[i];
    if (absl::Status s = ValidateLayerSpec(spec, static_cast<int>(i)); !s.ok()) return s;
    if (spec.is_state()) {
      layers.push_back(std::make_unique<MambaStateLayer>());
    } else if (spec.is_sliding()) {
      layers.push_back(std::make_unique<DynamicSlidingWindowLayer>(spec.type, spec.window));
    } else {
      layers.push_back(std::make_unique<DynamicLayer>());
    }
  }
  return std::make_unique<KvCache>(std::move(layers));
}

absl::StatusOr<LayerView> KvCache::Update(int layer_index, const at::Tensor& keys_in,
                                          const at::Tensor& values_in) {
  if (layer_index < 0 || layer_index >= num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer_index, " is out of range [0, ", num_layers(), ")"));
  }
  at::Tensor keys = keys_in;
  at::Tensor values = values_in;
  const bool joins_staged =
      static_cast<size_t>(layer_index) < staged_.size() && staged_[layer_index].keys.defined();
  if (joins_staged) {
    // The staged prefix and these tokens arrive as one update; a mismatch is refused before
    // at::cat would throw, and the prefix stays staged.
    const at::Tensor& staged = staged_[layer_index].keys;
    if (!keys_in.defined() || !values_in.defined() || keys_in.dim() != 4 ||
        !keys_in.sizes().equals(values_in.sizes()) || keys_in.size(0) != staged.size(0) ||
        keys_in.size(1) != staged.size(1) || keys_in.size(3) != staged.size(3) ||
        keys_in.scalar_type() != staged.scalar_type() || keys_in.device() != staged.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", layer_index, ": the update does not match the staged prefix (batch ",
          staged.size(0), ", kv_heads ", staged.size(1), ", head_dim ", staged.size(3),
          ", same dtype and device)"));
    }
    keys = at::cat({staged_[layer_index].keys, keys_in}, 2);
    values = at::cat({staged_[layer_index].values, values_in}, 2);
  }
  CacheLayer& layer = *layers_[layer_index];
  layer.BeforeUpdate();
  for (size_t next = layer_index + 1; next < layers_.size(); ++next) {
    if (layers_[next]->offloaded()) {
      layers_[next]->StartPrefetch();
      break;
    }
  }
  if (budget_ == nullptr) {
    absl::StatusOr<LayerView> view = layer.Update(keys, values);
    if (joins_staged && view.ok()) staged_[layer_index] = {};
    layer.AfterUpdate();
    return view;
  }
  // Growth is measured while the layer is resident (an offloaded layer's storage counts
  // against the device only during its update) and checked before it is written back.
  const int64_t before = layer.Memory().device_bytes;
  absl::StatusOr<LayerView> view = layer.Update(keys, values);
  // The layer holds the prefix now (a failed update left it unchanged, the prefix staged).
  if (joins_staged && view.ok()) staged_[layer_index] = {};
  const int64_t grew = layer.Memory().device_bytes - before;
  budget_->Add(grew);
  accounted_device_bytes_ += grew;
  if (grew > 0) {
    try {
      budget_->CheckGrowth(grew);
    } catch (...) {
      layer.AfterUpdate();
      SyncBudget();
      throw;
    }
  }
  layer.AfterUpdate();
  SyncBudget();
  return view;
}

void KvCache::PrepareForward() {
  for (auto& layer : layers_) {
    if (layer->offloaded()) {
      layer->StartPrefetch();
      return;
    }
  }
}

int64_t KvCache::SeqLength() const {
  if (layers_.empty()) return 0;
  const int64_t staged =
      !staged_.empty() && staged_[0].keys.defined() ? staged_[0].keys.size(2) : 0;
  return layers_[0]->SeqLength() + staged;
}

int64_t KvCache::MaxLength() const {
  int64_t max_length = -1;
  for (const auto& layer : layers_) {
    const int64_t m = layer->MaxLength();
    if (m < 0) return -1;
    max_length = std::max(max_length, m);
  }
  return max_length;
}

absl::Status KvCache::Crop(int64_t n) {
  if (absl::Status s = CheckCrop(n); !s.ok()) return s;
  for (auto& layer : layers_) {
    if (absl::Status s = layer->Crop(n); !s.ok()) return s;  // unreachable after the check
  }
  // A crop into a shared segment copies what stays: the snapshot may go once nobody reads it.
  if (shared_owner_ != nullptr && SharedPrefixLength() == 0) shared_owner_.reset();
  SyncBudget();
  return absl::OkStatus();
}

int64_t KvCache::SharedPrefixLength() const {
  int64_t shared = 0;
  for (const auto& layer : layers_) shared = std::max(shared, layer->SharedPrefixLength());
  return shared;
}

absl::Status KvCache::CheckCrop(int64_t n) const {
  if (n != 0 && has_staged()) {
    return absl::FailedPreconditionError(
        "a copied prefix waits for its layers' first update; nothing can be cropped before it");
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (absl::Status s = layers_[i]->CheckCrop(n); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("layer ", i, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

void KvCache::ActivatePastRecording() {
  for (auto& layer : layers_) layer->ActivatePastRecording();
}

void KvCache::RetainPast() {
  for (auto& layer : layers_) layer->RetainPast();
}

absl::Status KvCache::CheckIndices(const at::Tensor& indices, bool same_size) const {
  for (const auto& layer : layers_) {
    if (layer->BatchSize() == 0) continue;
    return CheckBatchIndices(indices, layer->BatchSize(), same_size);
  }
  // Only staged rows so far: they are selected too.
  for (const Staged& s : staged_) {
    if (s.keys.defined()) return CheckBatchIndices(indices, s.keys.size(0), same_size);
  }
  return absl::OkStatus();
}

int64_t KvCache::BatchSize() const {
  int64_t rows = 0;
  for (const auto& layer : layers_) rows = std::max(rows, layer->BatchSize());
  for (const Staged& s : staged_) {
    if (s.keys.defined()) rows = std::max(rows, s.keys.size(0));
  }
  return rows;
}

absl::Status KvCache::Reorder(const at::Tensor& beam_idx) {
  if (absl::Status s = CheckIndices(beam_idx, true); !s.ok()) return s;
  for (auto& layer : layers_) {
    if (absl::Status s = layer->Reorder(beam_idx); !s.ok()) return s;
  }
  ForEachStaged([&](at::Tensor& t) { t = t.index_select(0, beam_idx.to(t.device())); });
  SyncBudget();
  return absl::OkStatus();
}

absl::Status KvCache::SelectIndices(const at::Tensor& indices) {
  if (absl::Status s = CheckIndices(indices, false); !s.ok()) return s;
  for (auto& layer : layers_) {
    if (absl::Status s = layer->SelectIndices(indices); !s.ok()) return s;
  }
  ForEachStaged([&](at::Tensor& t) { t = t.index_select(0, indices.to(t.device())); });
  SyncBudget();
  return absl::OkStatus();
}

absl::Status KvCache::RepeatInterleave(int64_t repeats) {
  if (repeats < 1) return absl::InvalidArgumentError("repeats must be >= 1");
  for (auto& layer : layers_) {
    if (absl::Status s = layer->RepeatInterleave(repeats); !s.ok()) return s;
  }
  ForEachStaged([&](at::Tensor& t) { t = t.repeat_interleave(repeats, 0); });
  SyncBudget();
  return absl::OkStatus();
}

MemoryUsage KvCache::Memory() const {
  MemoryUsage usage;
  for (const auto& layer : layers_) usage += layer->Memory();
  return usage;
}

std::unique_ptr<KvCache> KvCache::Clone() const {
  std::vector<std::unique_ptr<CacheLayer>> copies;
  copies.reserve(layers_.size());
  for (const auto& layer : layers_) copies.push_back(layer->Clone());
  auto clone = std::make_unique<KvCache>(std::move(copies));
  clone->staged_ = staged_;  // views of immutable snapshot storage: safe to share
  clone->shared_owner_ = shared_owner_;
  clone->cross_attention_ = cross_attention_;
  return clone;
}

void KvCache::Reset() {
  shared_owner_.reset();
  cross_attention_.reset();
  staged_.clear();
  staged_at_step_.clear();
  for (auto& layer : layers_) layer->Reset();
  SyncBudget();
}

}  // namespace kvserve::cache
