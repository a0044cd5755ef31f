// Fuzzes config.json parsing: the input is the file's text. A config Parse accepts must be
// within its documented bounds, and ToJson must write a config that Parse reads back equal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/check.h"
#include "model/model_config.h"

namespace {

using kvserve::model::ModelConfig;

void CheckAccepted(const ModelConfig& c) {
  KVSERVE_CHECK(c.vocab_size >= 1 && c.vocab_size <= (int64_t{1} << 22));
  KVSERVE_CHECK(c.hidden_size >= 1 && c.hidden_size <= (int64_t{1} << 16));
  KVSERVE_CHECK(c.num_hidden_layers >= 1 && c.num_hidden_layers <= 1024);
  KVSERVE_CHECK(c.num_attention_heads >= 1 && c.num_attention_heads <= 1024);
  KVSERVE_CHECK(c.num_key_value_heads >= 1 && c.num_attention_heads % c.num_key_value_heads == 0);
  KVSERVE_CHECK(c.head_dim >= 1 && c.head_dim <= 1024);
  KVSERVE_CHECK(c.max_position_embeddings >= 1 && c.max_position_embeddings <= (1 << 20));
  KVSERVE_CHECK(static_cast<int64_t>(c.layer_types.size()) == c.num_hidden_layers);
  KVSERVE_CHECK(!c.bos_token_id.has_value() || *c.bos_token_id < c.vocab_size);
  const std::vector<kvserve::cache::LayerSpec> specs = c.LayerSpecs();
  KVSERVE_CHECK(specs.size() == c.layer_types.size());
  for (const kvserve::cache::LayerSpec& spec : specs) {
    // A sliding or chunked layer always gets a real window (a cache of 0 slots is no cache).
    if (spec.is_sliding()) KVSERVE_CHECK(spec.window >= 2) << spec.window;
  }
  const std::string written = c.ToJson();
  absl::StatusOr<ModelConfig> again = ModelConfig::Parse(written);
  KVSERVE_CHECK(again.ok()) << again.status() << "\n" << written;
  KVSERVE_CHECK(*again == c) << "ToJson does not read back equal:\n" << written;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ModelConfig> config = ModelConfig::Parse(text);
  if (config.ok()) CheckAccepted(*config);
  return 0;
}
