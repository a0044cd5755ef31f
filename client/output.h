// kvctl's output formats: proto3 JSON of any response and the text forms of each command.
#pragma once

#include <string>

#include "google/protobuf/message.h"
#include "kvserve/v1/generation.pb.h"

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

}  // namespace kvserve::client
