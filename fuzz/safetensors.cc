// Fuzzes the safetensors reader: the input is a whole file (8-byte header length, JSON header,
// data section). A file Parse accepts must describe only tensors inside its data section whose
// byte sizes match their dtype and shape, sorted by name and not overlapping.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/check.h"
#include "base/model_source.h"
#include "model/safetensors.h"

namespace {

using kvserve::model::SafetensorsDtypeSize;
using kvserve::model::SafetensorsFile;
using kvserve::model::TensorEntry;

void CheckAccepted(const SafetensorsFile& file) {
  uint64_t touched = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& e : file.entries()) {
    KVSERVE_CHECK(e.name != "__metadata__");
    if (previous != nullptr) KVSERVE_CHECK(previous->name < e.name) << e.name;
    previous = &e;
    KVSERVE_CHECK(file.Find(e.name) == &e) << e.name;
    uint64_t bytes = SafetensorsDtypeSize(e.dtype);
    for (int64_t dim : e.shape) {
      KVSERVE_CHECK(dim >= 0);
      KVSERVE_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes));
    }
    KVSERVE_CHECK(e.begin <= e.end && e.end - e.begin == bytes) << e.name;
    // Data() aborts on an entry outside the file; ASan checks that its bytes are readable.
    const std::span<const uint8_t> data = file.Data(e);
    KVSERVE_CHECK(data.size() == bytes);
    if (!data.empty()) touched += data.front() + data.back();
  }
  for (const auto& [key, value] : file.metadata()) touched += key.size() + value.size();
  // Keeps the reads above from being optimized away.
  volatile uint64_t sink = touched;
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const kvserve::base::MappedFile> file = kvserve::base::MappedFile::FromString(
      "fuzz.safetensors", std::string(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(std::move(file));
  if (parsed.ok()) CheckAccepted(*parsed);
  return 0;
}
