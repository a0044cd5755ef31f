// kvctl's output formats (see output.h).
#include "client/output.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace kvserve::client {

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  // Printing a generated message to JSON only fails on a broken descriptor pool.
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) return "{}";
  return json;
}

std::string FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "unspecified";
  }
}

std::string GenerationSummary(v1::FinishReason reason, const v1::Usage& usage,
                              const v1::Timings& timings, const v1::CacheReport& cache_report) {
  std::string out = absl::StrFormat(
      "finish_reason=%s prompt_tokens=%d cached_tokens=%d completion_tokens=%d queue_ms=%.2f "
      "ttft_ms=%.2f decode_ms=%.2f cache=%s",
      FinishReasonName(reason), usage.prompt_tokens(), usage.cached_tokens(),
      usage.completion_tokens(), timings.queue_ms(), timings.ttft_ms(), timings.decode_ms(),
      cache_report.cache_implementation().empty() ? "-" : cache_report.cache_implementation());
  if (!cache_report.prefix().empty()) absl::StrAppend(&out, " prefix=", cache_report.prefix());
  if (cache_report.offload_fallback()) absl::StrAppend(&out, " offload_fallback=true");
  return out;
}

std::string ModelInfoText(const v1::ModelInfo& info) {
  // Runs of equal layers, e.g. "full_attention x3, sliding_attention(4096) x1".
  std::vector<std::string> layers;
  for (int i = 0; i < info.layers_size();) {
    const v1::LayerInfo& layer = info.layers(i);
    int run = 1;
    while (i + run < info.layers_size() && info.layers(i + run).type() == layer.type() &&
           info.layers(i + run).window() == layer.window()) {
      ++run;
    }
    layers.push_back(absl::StrCat(
        layer.type(), layer.window() > 0 ? absl::StrCat("(", layer.window(), ")") : "", " x", run));
    i += run;
  }
  std::string out;
  absl::StrAppend(&out, "name: ", info.name(), "\n");
  absl::StrAppend(&out, "model_type: ", info.model_type(), "\n");
  absl::StrAppend(&out, "vocab_size: ", info.vocab_size(), "\n");
  absl::StrAppend(&out, "num_layers: ", info.num_layers(), "\n");
  absl::StrAppend(&out, "num_kv_heads: ", info.num_kv_heads(), "\n");
  absl::StrAppend(&out, "head_dim: ", info.head_dim(), "\n");
  absl::StrAppend(&out, "max_position_embeddings: ", info.max_position_embeddings(), "\n");
  absl::StrAppend(&out, "layers: ", absl::StrJoin(layers, ", "), "\n");
  absl::StrAppend(&out, "eos_token_ids: ", absl::StrJoin(info.eos_token_ids(), ","), "\n");
  absl::StrAppend(&out, "bos_token_id: ",
                  info.has_bos_token_id() ? absl::StrCat(info.bos_token_id()) : "none", "\n");
  absl::StrAppend(&out, "dtype: ", info.dtype(), "\n");
  absl::StrAppend(&out, "device: ", info.device(), "\n");
  absl::StrAppend(&out, "max_new_tokens_limit: ", info.max_new_tokens_limit(), "\n");
  return out;
}

std::string TokenIdsText(const v1::TokenizeResponse& response) {
  return absl::StrJoin(response.token_ids(), ",");
}

}  // namespace kvserve::client
