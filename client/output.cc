// kvctl's output formats (see output.h).
#include "client/output.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace kvserve::client {
namespace {

constexpr size_t kFingerprintChars = 12;

// A timestamp in UTC to the second; "-" when `has` is false.
std::string TimeText(bool has, const google::protobuf::Timestamp& timestamp) {
  if (!has) return "-";
  const absl::Time time =
      absl::FromUnixSeconds(timestamp.seconds()) + absl::Nanoseconds(timestamp.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
}

// Rows of cells as a table: columns padded to their widest cell, two spaces apart.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const std::vector<std::string>& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const std::vector<std::string>& row : rows) {
    for (size_t i = 0; i + 1 < row.size(); ++i) {
      absl::StrAppend(&out, absl::StrFormat("%-*s  ", static_cast<int>(widths[i]), row[i]));
    }
    absl::StrAppend(&out, row.back(), "\n");
  }
  return out;
}

// A prefix's fields as PrefixText and PrefixTableText show them, in their order.
std::vector<std::string> PrefixFields(const v1::Prefix& prefix) {
  const v1::PrefixOptions& options = prefix.options();
  const std::string created_at = TimeText(prefix.has_created_at(), prefix.created_at());
  return {
      prefix.name(),
      absl::StrCat(prefix.num_tokens()),
      absl::StrCat(prefix.bytes()),
      absl::StrCat(prefix.hits()),
      !options.has_pinned() || options.pinned() ? "true" : "false",
      options.ttl_seconds() == 0 ? "none" : absl::StrCat(options.ttl_seconds(), "s"),
      created_at,
      prefix.fingerprint().empty() ? "-" : prefix.fingerprint().substr(0, kFingerprintChars),
      prefix.shared() ? "true" : "false",
      prefix.tier().empty() ? "-" : prefix.tier(),
  };
}

}  // namespace

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
  if (!cache_report.session().empty()) absl::StrAppend(&out, " session=", cache_report.session());
  if (!cache_report.session_recompute_reason().empty()) {
    absl::StrAppend(&out, " session_recompute_reason=\"", cache_report.session_recompute_reason(),
                    "\"");
  }
  return out;
}

std::string ScoreSuffix(std::optional<double> score) {
  return score.has_value() ? absl::StrFormat(" score=%.4f", *score) : "";
}

std::string LogprobsText(const google::protobuf::RepeatedPtrField<v1::PositionLogprobs>& logprobs) {
  std::string out;
  for (const v1::PositionLogprobs& position : logprobs) {
    absl::StrAppend(&out, absl::StrFormat("token=%d logprob=%.4f", position.chosen().token_id(),
                                          position.chosen().logprob()));
    if (position.top_size() > 0) {
      absl::StrAppend(
          &out, " top=",
          absl::StrJoin(position.top(), ",", [](std::string* to, const v1::TokenLogprob& top) {
            absl::StrAppend(to, absl::StrFormat("%d:%.4f", top.token_id(), top.logprob()));
          }));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string SequenceHeader(int32_t index, std::optional<double> score, v1::FinishReason finish) {
  return absl::StrCat("[sequence ", index,
                      score.has_value() ? absl::StrFormat(" score %.4f", *score) : "", " finish ",
                      FinishReasonName(finish), "]");
}

std::string SequenceText(const v1::Sequence& sequence) {
  std::string out = absl::StrCat(
      SequenceHeader(sequence.index(),
                     sequence.has_score() ? std::optional<double>(sequence.score()) : std::nullopt,
                     sequence.finish_reason()),
      "\n", sequence.text(), "\n");
  if (sequence.logprobs_size() > 0) {
    absl::StrAppend(&out, "[logprobs]\n", LogprobsText(sequence.logprobs()));
  }
  return out;
}

std::string GenerateResponseText(const v1::GenerateResponse& response) {
  if (response.sequences_size() > 1) {
    std::string out;
    for (const v1::Sequence& sequence : response.sequences()) {
      absl::StrAppend(&out, SequenceText(sequence));
    }
    return out;
  }
  std::string out = absl::StrCat(response.text(), "\n");
  if (response.sequences_size() == 1 && response.sequences(0).logprobs_size() > 0) {
    absl::StrAppend(&out, "[logprobs]\n", LogprobsText(response.sequences(0).logprobs()));
  }
  return out;
}

std::string GenerateSummaryText(const v1::GenerateResponse& response) {
  std::optional<double> score;
  if (response.sequences_size() == 1 && response.sequences(0).has_score()) {
    score = response.sequences(0).score();
  }
  return absl::StrCat(GenerationSummary(response.finish_reason(), response.usage(),
                                        response.timings(), response.cache_report()),
                      ScoreSuffix(score));
}

void StreamTextPrinter::Add(const v1::GenerateStreamResponse& message) {
  const int32_t index = several_ ? message.index() : 0;
  v1::Sequence& sequence = sequences_[index];
  sequence.set_index(index);
  sequence.mutable_text()->append(message.text());
  sequence.mutable_token_ids()->Add(message.token_ids().begin(), message.token_ids().end());
  sequence.mutable_logprobs()->MergeFrom(message.logprobs());
  if (message.has_score()) sequence.set_score(message.score());
  if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    sequence.set_finish_reason(message.finish_reason());
  }
  if (!several_) {
    out_ << message.text() << std::flush;
    return;
  }
  if (sequence.finish_reason() != v1::FINISH_REASON_UNSPECIFIED && !written_.contains(index)) {
    out_ << SequenceText(sequence) << std::flush;
    written_.insert(index);
  }
}

void StreamTextPrinter::Finish() {
  if (!several_) {
    out_ << std::endl;
    if (auto it = sequences_.find(0); it != sequences_.end() && it->second.logprobs_size() > 0) {
      out_ << "[logprobs]\n" << LogprobsText(it->second.logprobs()) << std::flush;
    }
    return;
  }
  for (const auto& [index, sequence] : sequences_) {
    if (written_.insert(index).second) out_ << SequenceText(sequence);
  }
  out_ << std::flush;
}

v1::FinishReason StreamTextPrinter::finish_reason() const {
  auto it = sequences_.find(0);
  return it == sequences_.end() ? v1::FINISH_REASON_UNSPECIFIED : it->second.finish_reason();
}

std::optional<double> StreamTextPrinter::score() const {
  if (several_) return std::nullopt;
  auto it = sequences_.find(0);
  if (it == sequences_.end() || !it->second.has_score()) return std::nullopt;
  return it->second.score();
}

std::string ChatTurnText(int turn, const v1::Usage& usage, const v1::Timings& timings,
                         const v1::CacheReport& cache_report) {
  std::string out = absl::StrFormat(
      "[turn %d: %d prompt tokens, %d cached, ttft %.1f ms, %d new tokens", turn,
      usage.prompt_tokens(), usage.cached_tokens(), timings.ttft_ms(), usage.completion_tokens());
  if (!cache_report.session_recompute_reason().empty()) {
    absl::StrAppend(&out, ", recomputed: ", cache_report.session_recompute_reason());
  }
  return out + "]";
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
  absl::StrAppend(&out, "replica_id: ", info.replica_id().empty() ? "-" : info.replica_id(), "\n");
  return out;
}

std::string PrefixText(const v1::Prefix& prefix) {
  static const char* const kKeys[] = {"name", "num_tokens", "bytes",       "hits",   "pinned",
                                      "ttl",  "created_at", "fingerprint", "shared", "tier"};
  const std::vector<std::string> fields = PrefixFields(prefix);
  std::vector<std::string> pairs;
  for (size_t i = 0; i < fields.size(); ++i)
    pairs.push_back(absl::StrCat(kKeys[i], "=", fields[i]));
  return absl::StrJoin(pairs, " ");
}

std::string PrefixTableText(const v1::ListPrefixesResponse& response) {
  if (response.prefixes_size() == 0) return "no prefixes\n";
  std::vector<std::vector<std::string>> rows = {{"NAME", "TOKENS", "BYTES", "HITS", "PINNED", "TTL",
                                                 "CREATED_AT", "FINGERPRINT", "SHARED", "TIER"}};
  for (const v1::Prefix& prefix : response.prefixes()) rows.push_back(PrefixFields(prefix));
  return Table(rows);
}

std::string TokenIdsText(const v1::TokenizeResponse& response) {
  return absl::StrJoin(response.token_ids(), ",");
}

std::string SessionStateName(v1::SessionState state) {
  switch (state) {
    case v1::SESSION_STATE_EMPTY:
      return "empty";
    case v1::SESSION_STATE_IDLE:
      return "idle";
    case v1::SESSION_STATE_RUNNING:
      return "running";
    case v1::SESSION_STATE_OFFLOADED:
      return "offloaded";
    default:
      return "unspecified";
  }
}

std::string SessionText(const v1::Session& session) {
  const v1::SessionOptions& options = session.options();
  const std::string& cache = options.cache().cache_implementation();
  return absl::StrCat(
      "id=", session.id(), " state=", SessionStateName(session.state()),
      " num_tokens=", session.num_tokens(), " cached_tokens=", session.cached_tokens(),
      " device_bytes=", session.device_bytes(), " host_bytes=", session.host_bytes(),
      " turns=", session.turns(), " evictions=", session.evictions(),
      " cache=", cache.empty() ? "-" : cache,
      " prefix=", options.prefix().empty() ? "-" : options.prefix(), " ttl=", options.ttl_seconds(),
      "s", " created_at=", TimeText(session.has_created_at(), session.created_at()),
      " last_used_at=", TimeText(session.has_last_used_at(), session.last_used_at()),
      " expires_at=", TimeText(session.has_expires_at(), session.expires_at()));
}

std::string SessionTableText(const v1::ListSessionsResponse& response) {
  if (response.sessions_size() == 0) return "no sessions\n";
  std::vector<std::vector<std::string>> rows = {{"ID", "STATE", "TOKENS", "CACHED", "DEVICE_BYTES",
                                                 "HOST_BYTES", "TURNS", "CACHE", "PREFIX",
                                                 "EXPIRES_AT"}};
  for (const v1::Session& session : response.sessions()) {
    const std::string& cache = session.options().cache().cache_implementation();
    const std::string& prefix = session.options().prefix();
    rows.push_back({session.id(), SessionStateName(session.state()),
                    absl::StrCat(session.num_tokens()), absl::StrCat(session.cached_tokens()),
                    absl::StrCat(session.device_bytes()), absl::StrCat(session.host_bytes()),
                    absl::StrCat(session.turns()), cache.empty() ? "-" : cache,
                    prefix.empty() ? "-" : prefix,
                    TimeText(session.has_expires_at(), session.expires_at())});
  }
  return Table(rows);
}

}  // namespace kvserve::client
