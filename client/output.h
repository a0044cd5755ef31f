// kvctl's output formats: proto3 JSON of any response and the text forms of each command.
#pragma once

#include <string>

#include "google/protobuf/message.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/prefix.pb.h"
#include "kvserve/v1/session.pb.h"

namespace kvserve::client {

// `message` in the proto3 JSON mapping on one line (lowerCamelCase names, every field that
// has no presence printed even when it holds its default).
std::string ToJson(const google::protobuf::Message& message);

// "length", "stop", "eos", "cancelled" or "unspecified".
std::string FinishReasonName(v1::FinishReason reason);

// One line: finish reason, usage, timings and what the cache did, e.g.
// "finish_reason=length prompt_tokens=5 cached_tokens=0 completion_tokens=8 queue_ms=0.10
// ttft_ms=3.20 decode_ms=21.00 cache=dynamic"; then, when set, " prefix=NAME",
// " offload_fallback=true", " session=ID" and ` session_recompute_reason="WHY"`.
std::string GenerationSummary(v1::FinishReason reason, const v1::Usage& usage,
                              const v1::Timings& timings, const v1::CacheReport& cache_report);

// "key: value" lines of every ModelInfo field.
std::string ModelInfoText(const v1::ModelInfo& info);

// The ids comma-separated ("1,450,29").
std::string TokenIdsText(const v1::TokenizeResponse& response);

// A registered prefix on one line, e.g. "name=sys num_tokens=12 bytes=4096 hits=3 pinned=true
// ttl=300s created_at=2024-05-01T12:00:00Z fingerprint=0123456789ab" (unset pinned: true; ttl 0:
// none; created_at in UTC to the second, "-" when unset; the fingerprint's first 12 characters).
std::string PrefixText(const v1::Prefix& prefix);

// The line kvctl chat prints after each answer: "[turn 3: 412 prompt tokens, 398 cached, ttft
// 12.3 ms, 64 new tokens]", with ", recomputed: WHY" before the bracket when the session's
// cache could not be reused (cache_report.session_recompute_reason).
std::string ChatTurnText(int turn, const v1::Usage& usage, const v1::Timings& timings,
                         const v1::CacheReport& cache_report);

// A table of the prefixes: a header line, then one line per prefix with the same fields as
// PrefixText, columns aligned; "no prefixes\n" when there are none.
std::string PrefixTableText(const v1::ListPrefixesResponse& response);

// "empty", "idle", "running", "offloaded" or "unspecified".
std::string SessionStateName(v1::SessionState state);

// A session on one line, e.g. "id=0123456789abcdef0123456789abcdef state=idle num_tokens=412
// cached_tokens=398 device_bytes=4096 host_bytes=0 turns=3 evictions=0 cache=dynamic prefix=-
// ttl=600s created_at=2024-05-01T12:00:00Z last_used_at=2024-05-01T12:01:00Z
// expires_at=2024-05-01T12:11:00Z" (cache "-" when unset, prefix "-" when none, times in UTC to
// the second, "-" when unset).
std::string SessionText(const v1::Session& session);

// A table of the sessions: a header line (ID STATE TOKENS CACHED DEVICE_BYTES HOST_BYTES TURNS
// CACHE PREFIX EXPIRES_AT), then one line per session, columns aligned; "no sessions\n" when
// there are none.
std::string SessionTableText(const v1::ListSessionsResponse& response);

}  // namespace kvserve::client
