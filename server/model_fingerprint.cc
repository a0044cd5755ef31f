// ModelFingerprint: a fast 64-bit digest over the model's files and runtime settings.
#include "server/model_fingerprint.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <span>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvserve::server {
namespace {

// Word-at-a-time multiply-xorshift mixing: not cryptographic, only meant to tell models
// apart (an accidental collision of two real models is what it guards against).
class Digest {
 public:
  void Add(std::span<const uint8_t> bytes) {
    size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
      uint64_t word;
      std::memcpy(&word, bytes.data() + i, 8);
      Mix(word);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
    Mix(tail ^ (static_cast<uint64_t>(bytes.size()) << 56));
  }
  void Add(const std::string& text) {
    Add(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  std::string Hex() const { return absl::StrFormat("%016x", Finish()); }

 private:
  void Mix(uint64_t word) {
    state_ ^= word + 0x9e3779b97f4a7c15ULL + (state_ << 6) + (state_ >> 2);
    state_ *= 0xff51afd7ed558ccdULL;
    state_ ^= state_ >> 33;
  }
  uint64_t Finish() const {
    uint64_t h = state_;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
  }
  uint64_t state_ = 0x243f6a8885a308d3ULL;
};

}  // namespace

absl::StatusOr<std::string> ModelFingerprint(const base::ModelSource& source,
                                             const model::ModelInfo& info) {
  Digest digest;
  for (const char* file : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    if (!source.Has(file)) continue;
    absl::StatusOr<std::string> text = source.ReadText(file);
    if (!text.ok()) return text.status();
    digest.Add(absl::StrCat(file, "\n", *text));
  }
  std::set<std::string> weights;
  if (source.Has("model.safetensors.index.json")) {
    absl::StatusOr<std::string> index = source.ReadText("model.safetensors.index.json");
    if (!index.ok()) return index.status();
    const nlohmann::json parsed = nlohmann::json::parse(*index, nullptr, false);
    if (parsed.is_object() && parsed.contains("weight_map") && parsed["weight_map"].is_object()) {
      for (const auto& [tensor, file] : parsed["weight_map"].items()) {
        if (file.is_string()) weights.insert(file.get<std::string>());
      }
    }
  } else {
    weights.insert("model.safetensors");
  }
  for (const std::string& file : weights) {
    absl::StatusOr<std::shared_ptr<const base::MappedFile>> mapped = source.Map(file);
    if (!mapped.ok()) return mapped.status();
    digest.Add(file);
    digest.Add((*mapped)->bytes());
  }
  std::string runtime =
      absl::StrCat("dtype=", static_cast<int>(info.dtype),
                   ";weight_dtype=", static_cast<int>(info.weight_dtype), ";layers=");
  // Snapshots computed with bfloat16-rounded activations differ from exact ones.
  if (info.bf16_activations) absl::StrAppend(&runtime, "bf16_activations;");
  for (const cache::LayerSpec& layer : info.layer_specs) {
    absl::StrAppend(&runtime, cache::LayerTypeName(layer.type), ":", layer.window, ",");
  }
  digest.Add(runtime);
  return digest.Hex();
}

}  // namespace kvserve::server
