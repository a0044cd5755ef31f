// kvctl's output formats: proto3 JSON of any response and the text forms of each command.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>

#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
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

// " score=-0.5123" (4 decimals) when `score` is set, for the end of GenerationSummary's line;
// "" otherwise.
std::string ScoreSuffix(std::optional<double> score);

// One line per generated token, in order: "token=450 logprob=-0.1234", then, when the server
// sent the most likely tokens, " top=450:-0.1234,29:-2.5000" (most likely first); log-
// probabilities to 4 decimals. "" when there are none.
std::string LogprobsText(const google::protobuf::RepeatedPtrField<v1::PositionLogprobs>& logprobs);

// The header line of one of several sequences: "[sequence 1 score -0.5123 finish eos]", without
// " score S" when `score` is unset.
std::string SequenceHeader(int32_t index, std::optional<double> score, v1::FinishReason finish);

// One of several sequences as kvctl prints it: SequenceHeader's line, the text and a newline,
// then, when there are log-probabilities, "[logprobs]" and LogprobsText's lines.
std::string SequenceText(const v1::Sequence& sequence);

// What `kvctl generate` prints on stdout in text mode. One sequence (sequences has at most one):
// the text and a newline, as always, then "[logprobs]" and LogprobsText's lines when
// sequences[0] has log-probabilities. Several: SequenceText of each, in the response's order
// (beam search: best first). The summary line (stderr) is apart: GenerateSummaryText.
std::string GenerateResponseText(const v1::GenerateResponse& response);

// The summary line of `kvctl generate`: GenerationSummary of the response, then ScoreSuffix when
// it has exactly one sequence and that has a score (several show theirs in their headers).
std::string GenerateSummaryText(const v1::GenerateResponse& response);

// `kvctl stream`'s text output, fed each message as it arrives.
// - One sequence (`several` false): each message's text is written as it comes; Finish() ends
//   the line and then writes "[logprobs]" and LogprobsText's lines of every message's
//   log-probabilities, when there were any.
// - Several (the request's num_return_sequences > 1): each sequence's messages are collected by
//   their index and the sequence is written whole, as SequenceText (header, text, logprobs),
//   when its last message (finish_reason set) arrives; so sequences appear in the order they
//   finish, each labelled with its index. Finish() writes those still unfinished (a stream cut
//   short), their finish "unspecified", by index.
class StreamTextPrinter {
 public:
  StreamTextPrinter(bool several, std::ostream& out) : several_(several), out_(out) {}

  void Add(const v1::GenerateStreamResponse& message);
  // Ends the output; call once, after the last message or an error.
  void Finish();

  // For the summary line: sequence 0's finish reason; the score of the one sequence (nullopt
  // when it has none, or with several, whose headers show theirs).
  v1::FinishReason finish_reason() const;
  std::optional<double> score() const;

 private:
  const bool several_;
  std::ostream& out_;
  // What arrived of each sequence (several) or of the one sequence (at index 0), by index.
  std::map<int32_t, v1::Sequence> sequences_;
  // Indices whose sequence was written (several).
  std::set<int32_t> written_;
};

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
