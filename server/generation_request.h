// GenerationRequest: the validated, tokenized form of a Generate call that the engine runs,
// and GenerationSummary, what the engine reports when it ends. No wire types here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cache/cache_spec.h"
#include "cache/shared_prefix.h"
#include "model/beam_search.h"
#include "model/sampling_params.h"
#include "server/api_keys.h"

namespace kvserve::constraint {
struct CompiledConstraint;
}  // namespace kvserve::constraint

namespace kvserve::cache {
class Snapshot;
struct CrossAttentionState;
}  // namespace kvserve::cache

namespace kvserve::server {

// Every default applied and every field checked (RequestBuilder builds it).
struct GenerationRequest {
  // The whole prompt (a prefix's tokens included), >= 1 token, each in [0, vocab). For an
  // encoder-decoder model, the decoder prompt (its start tokens when the caller names none).
  std::vector<int32_t> prompt_ids;
  // Encoder-decoder models only: the encoder input (the caller's prompt, or a named prefix's);
  // empty otherwise.
  std::vector<int32_t> encoder_ids;
  // Encoder-decoder models on a named prefix: the prefix's encoder output and cross K/V (its
  // snapshot's), which the request reads instead of computing them; null otherwise.
  std::shared_ptr<const cache::CrossAttentionState> cross_attention;
  // The caller's tenant: its namespace for automatic prefix reuse, and its per-tenant limits.
  std::string tenant = kDefaultTenant;
  // Qualified name (cache::QualifiedPrefixName) of the registered prefix the prompt starts
  // with; empty: none.
  std::string prefix;
  // That prefix's snapshot (its tokens start prompt_ids), held so that a replacement or a
  // deletion while the request waits cannot take it away; null without a prefix.
  std::shared_ptr<const cache::Snapshot> prefix_snapshot;
  // Tokens to generate at most, >= 1; prompt + max_new_tokens fits the model's context.
  int64_t max_new_tokens = 16;
  model::SamplingParams sampling;
  // Non-empty strings; generation stops when the text contains one (it is cut off).
  std::vector<std::string> stop_strings;
  // Generation stops after one of these ids (kept in the output).
  std::vector<int32_t> stop_token_ids;
  // Generate past end-of-sequence tokens.
  bool ignore_eos = false;
  // Beam search when num_beams > 1 (never with do_sample; no stop strings).
  int num_beams = 1;
  // Sequences returned: the best beams, or independent samples (do_sample; sample i seeded
  // with sampling.seed + i). 1 for greedy decoding.
  int num_return_sequences = 1;
  model::EarlyStopping early_stopping = model::EarlyStopping::kFalse;
  double length_penalty = 1.0;
  // Log-probabilities of the generated tokens with this many alternatives; -1: none.
  int top_logprobs = -1;
  // What every returned sequence must match, compiled for the model's vocabulary; null: none.
  // Never part of a cache key: the prompt's cache is the same with or without it.
  std::shared_ptr<const constraint::CompiledConstraint> constraint;
  // The request's own cache; a static one has its max_cache_len resolved.
  cache::CacheSpec cache_spec;
  // Compute the whole prompt even when a cached prefix matches.
  bool skip_prefix_reuse = false;
  // How a cached prefix reaches the cache; unset: the server's --prefix-kv-mode.
  std::optional<cache::PrefixKvMode> prefix_kv_mode;
  // A turn of this session (empty: none); its cache_spec is the session's.
  std::string session;
  // With `session`: prompt_ids are tokens to append to the session's history (the engine
  // prepends it), and first_turn_ids what to append instead to an empty history (text with
  // the tokens that start a sequence). Otherwise prompt_ids are the whole prompt.
  bool session_append = false;
  std::vector<int32_t> first_turn_ids;
  // When the request reached the server.
  absl::Time arrival_time = absl::InfinitePast();
  // The client's deadline; InfiniteFuture when none.
  absl::Time deadline = absl::InfiniteFuture();
};

enum class FinishReason { kLength, kStop, kEos, kCancelled };

// The finish reason as the access log and kvserve_requests_total{outcome} name it.
inline const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

// The request's final report (GenerateResponse minus the text and tokens, sent as deltas).
struct GenerationSummary {
  FinishReason finish_reason = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  // Of completion_tokens, those the constraint forced (jump-forward).
  int64_t forced_tokens = 0;
  double queue_ms = 0;
  double ttft_ms = 0;
  double decode_ms = 0;
  std::string cache_implementation;  // "dynamic", ...; "none" without a cache
  std::string prefix;                // the registered prefix copied; empty: none
  bool offload_fallback = false;
  std::string session;                   // the session it was a turn of; empty: none
  std::string session_recompute_reason;  // why the session's cache was not reused
  std::string prefix_kv_mode;            // how the reused prefix reached the cache (Allocation's)
  int num_sequences = 1;                 // sequences the request returned
};

// A piece of one returned sequence (RequestSink::OnOutput).
struct SequenceOutput {
  // Which sequence, in [0, num_return_sequences).
  int index = 0;
  // Text that became final (UTF-8-complete, never part of a stop string).
  std::string_view text;
  // Token ids generated since the sequence's previous output.
  absl::Span<const int32_t> token_ids;
  // Their log-probabilities, one per token id (empty unless asked for).
  absl::Span<const model::PositionLogprobs> logprobs;
  // Requests with several sequences: set on each sequence's last output.
  std::optional<FinishReason> finish;
  // Beam search: the sequence's score (its one output comes when the search ends).
  std::optional<double> score;
};

}  // namespace kvserve::server
