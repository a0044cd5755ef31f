// A validating reader and a deterministic writer of the safetensors weight format.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/model_source.h"

namespace kvserve::model {

enum class SafetensorsDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// Bytes per element (BOOL is one byte).
size_t SafetensorsDtypeSize(SafetensorsDtype dtype);
// The header spelling: "F32", "BF16", "BOOL", ...
std::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
// Parses a header spelling; nullopt for anything unknown (including F8 and unsigned > 8 bit).
std::optional<SafetensorsDtype> ParseSafetensorsDtype(std::string_view name);

// One tensor of a file, as its header describes it (validated).
struct TensorEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the data section, end - begin == byte size
};

// A parsed safetensors file that keeps its bytes alive. Immutable; any thread may read.
class SafetensorsFile {
 public:
  // Validates everything before use: file >= 8 bytes; header length inside the file;
  // a well-formed JSON object; each entry has a known dtype, a shape of non-negative ints
  // and data_offsets [begin, end] with begin <= end, end inside the data section and
  // end - begin == element size * product(shape) (overflow-safe); no two tensors share a
  // byte; "__metadata__" is a string -> string map. Errors are DataLoss (truncated) or
  // InvalidArgument (malformed), naming the file and the problem. Never reads out of bounds.
  static absl::StatusOr<SafetensorsFile> Parse(std::shared_ptr<const base::MappedFile> file);

  // Every tensor, sorted by name.
  const std::vector<TensorEntry>& entries() const { return entries_; }
  // The entry named `name`, or nullptr.
  const TensorEntry* Find(std::string_view name) const;
  // The bytes of `e`, which must be one of entries(); aborts on an entry outside the file.
  std::span<const uint8_t> Data(const TensorEntry& e) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The display name of the underlying file.
  const std::string& name() const { return file_->name(); }

 private:
  SafetensorsFile() = default;

  std::shared_ptr<const base::MappedFile> file_;
  std::span<const uint8_t> data_;  // the data section, inside file_->bytes()
  std::vector<TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// One tensor for SerializeSafetensors; `data` must hold exactly element size * product(shape)
// bytes (little-endian), and names must be unique and not "__metadata__".
struct TensorToWrite {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
};

// A complete safetensors file. Deterministic: header keys sorted, tensors laid out in name
// order, header padded with spaces to a multiple of 8 bytes, so equal inputs give equal
// bytes. `metadata` is written as "__metadata__" when non-empty. Aborts when a tensor
// breaks the preconditions above (a programming error, not an input error).
std::string SerializeSafetensors(std::span<const TensorToWrite> tensors,
                                 const std::map<std::string, std::string>& metadata);

}  // namespace kvserve::model
