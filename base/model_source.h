// Where a model's files come from: a Hugging Face folder on disk or an in-memory image of one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve::base {

// Read-only bytes of one model file: a private read-only mmap of a file on disk (unmapped
// when the last owner lets go) or an owned string. Immutable, so any thread may read it.
class MappedFile {
 public:
  // Maps `path` read-only. NotFound if it does not exist, InvalidArgument if it is not a
  // regular file (a directory, a FIFO, a device such as a link to /dev/zero; never opened
  // in a way that blocks), Internal for other system errors; each message names the path.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path);
  // Wraps `contents` (moved in); `name` is only used in error messages.
  static std::shared_ptr<const MappedFile> FromString(std::string name, std::string contents);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // The file's bytes; valid as long as this object lives.
  std::span<const uint8_t> bytes() const;
  // Display name (a path, or "<in-memory model>/<file>") for error messages.
  const std::string& name() const { return name_; }

 private:
  MappedFile(std::string name, void* mapping, size_t mapping_size, std::string owned);

  std::string name_;
  void* mapping_ = nullptr;  // from mmap; nullptr for owned bytes and for empty files
  size_t mapping_size_ = 0;
  std::string owned_;
};

// The files of one model (config.json, model.safetensors, tokenizer.json, ...). Cheap to
// copy: in-memory contents are shared. Immutable after creation; any thread may call.
// File names are relative to the model ("model-00001-of-00002.safetensors"); names that
// are empty, absolute or contain a ".." component are refused with InvalidArgument, so a
// hostile index.json cannot point outside the model folder.
class ModelSource {
 public:
  // A folder on disk. NotFound naming `dir` if it is not a directory.
  static absl::StatusOr<ModelSource> FromDirectory(const std::string& dir);
  // An in-memory model: file name -> contents.
  static ModelSource FromMemory(std::map<std::string, std::string> files);

  // The largest file ReadText returns: config and tokenizer JSON files are far smaller.
  static constexpr size_t kMaxTextFileBytes = size_t{256} << 20;

  // Whether the model has an entry named `file`, of any kind: a directory, a FIFO or a link
  // to a device counts, so that a caller reading an optional file reaches Map's refusal
  // instead of silently skipping it. False for refused names and broken links.
  bool Has(std::string_view file) const;
  // The whole file as a string. NotFound naming the path if absent; InvalidArgument naming
  // it if it is not a regular file or is larger than kMaxTextFileBytes.
  absl::StatusOr<std::string> ReadText(std::string_view file) const;
  // The file's bytes without copying: an mmap for a folder, shared bytes in memory.
  // NotFound naming the path if absent; InvalidArgument naming it if not a regular file.
  absl::StatusOr<std::shared_ptr<const MappedFile>> Map(std::string_view file) const;
  // The folder path, or "<in-memory model>".
  std::string Describe() const;

 private:
  using MemoryFiles = std::map<std::string, std::shared_ptr<const MappedFile>, std::less<>>;

  ModelSource(std::string dir, std::shared_ptr<const MemoryFiles> memory)
      : dir_(std::move(dir)), memory_(std::move(memory)) {}
  // The display path of `file`: "<dir>/<file>" or "<in-memory model>/<file>".
  std::string PathOf(std::string_view file) const;

  std::string dir_;                            // empty for an in-memory model
  std::shared_ptr<const MemoryFiles> memory_;  // null for a folder
};

}  // namespace kvserve::base
