// A model's weights: one model.safetensors or the shards of model.safetensors.index.json.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/model_source.h"
#include "model/safetensors.h"

namespace kvserve::model {

// All tensors of a checkpoint, validated and memory-mapped; tensors are copied out on Load.
// Immutable after Open; any thread may call.
class Checkpoint {
 public:
  // Opens model.safetensors, or (preferred when present) the shards listed in
  // model.safetensors.index.json's weight_map. Validates each file (SafetensorsFile::Parse),
  // that every shard exists, that every listed tensor is in the shard the index names, and
  // that no tensor appears in two shards. NotFound if the model has neither file;
  // InvalidArgument naming the path when either is not a regular file (a directory, a link
  // to a device).
  static absl::StatusOr<Checkpoint> Open(const base::ModelSource& source);

  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;
  bool Has(std::string_view name) const;
  // The tensor's shape; empty if there is no such tensor (check Has first).
  std::vector<int64_t> Shape(std::string_view name) const;
  // The safetensors dtype of a tensor; nullopt if there is no such tensor.
  std::optional<SafetensorsDtype> Dtype(std::string_view name) const;

  // A CPU tensor with its own storage (copied out of the mapping), converted from F32, F16 or
  // BF16 to the floating `dtype`. NotFound naming the tensor; InvalidArgument for a
  // non-float source dtype or a non-floating `dtype`.
  absl::StatusOr<at::Tensor> Load(std::string_view name, at::ScalarType dtype) const;
  // Load, and InvalidArgument naming the tensor when its shape is not `shape` (what the model's
  // config.json implies).
  absl::StatusOr<at::Tensor> LoadShaped(std::string_view name, at::ScalarType dtype,
                                        at::IntArrayRef shape) const;

  // OK when the checkpoint holds exactly `expected`; otherwise InvalidArgument listing the
  // missing and the unexpected names (at most 10 of each, then how many more).
  absl::Status CheckNames(const std::set<std::string>& expected) const;

 private:
  struct Location {
    size_t shard = 0;  // index into shards_
    size_t entry = 0;  // index into shards_[shard].entries()
  };

  Checkpoint() = default;
  const TensorEntry* Entry(std::string_view name, size_t* shard) const;

  std::string description_;              // base::ModelSource::Describe(), for errors
  std::vector<SafetensorsFile> shards_;  // in shard file name order
  std::map<std::string, Location, std::less<>> tensors_;
};

}  // namespace kvserve::model
