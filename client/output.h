// kvctl's output formats: proto3 JSON of any response and the text forms of each command.
#pragma once

#include <string>

#include "google/protobuf/message.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/prefix.pb.h"

namespace kvserve::client {

// `message` in the proto3 JSON mapping on one line (lowerCamelCase names, every field that
// has no presence printed even when it holds its default).
std::string ToJson(const google::protobuf::Message& message);

// "length", "stop", "eos", "cancelled" or "unspecified".
std::string FinishReasonName(v1::FinishReason reason);

// One line: finish reason, usage, timings and what the cache did, e.g.
// "finish_reason=length prompt_tokens=5 cached_tokens=0 completion_tokens=8 queue_ms=0.10
// ttft_ms=3.20 decode_ms=21.00 cache=dynamic".
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

// A table of the prefixes: a header line, then one line per prefix with the same fields as
// PrefixText, columns aligned; "no prefixes\n" when there are none.
std::string PrefixTableText(const v1::ListPrefixesResponse& response);

}  // namespace kvserve::client
