// Tests of kvctl's output formats: proto3 JSON, the summary line, model info, token ids,
// prefixes, sessions, chat's turn line, several sequences and log-probabilities (generate's text
// and stream's printer).
#include "client/output.h"

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace kvserve::client {
namespace {

using ::testing::HasSubstr;

TEST(ToJsonTest, Proto3JsonOnOneLineWithDefaults) {
  v1::GenerateResponse response;
  response.set_text("Hi\n");
  response.add_token_ids(5);
  response.add_token_ids(6);
  response.set_finish_reason(v1::FINISH_REASON_LENGTH);
  response.mutable_usage()->set_prompt_tokens(3);
  const std::string json = ToJson(response);
  EXPECT_EQ(json.find('\n'), std::string::npos) << json;
  const nlohmann::json parsed = nlohmann::json::parse(json);
  EXPECT_EQ(parsed["text"], "Hi\n");
  EXPECT_EQ(parsed["tokenIds"], nlohmann::json({5, 6}));
  EXPECT_EQ(parsed["finishReason"], "FINISH_REASON_LENGTH");
  EXPECT_EQ(parsed["usage"]["promptTokens"], 3);
  EXPECT_EQ(parsed["usage"]["cachedTokens"], 0);  // a default, printed all the same
  EXPECT_FALSE(parsed.contains("timings"));       // an unset message stays out
}

TEST(FinishReasonNameTest, EveryReason) {
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_UNSPECIFIED), "unspecified");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_LENGTH), "length");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_STOP), "stop");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_EOS), "eos");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_CANCELLED), "cancelled");
}

TEST(GenerationSummaryTest, OneLine) {
  v1::Usage usage;
  usage.set_prompt_tokens(5);
  usage.set_cached_tokens(2);
  usage.set_completion_tokens(8);
  v1::Timings timings;
  timings.set_queue_ms(0.125);
  timings.set_ttft_ms(3.5);
  timings.set_decode_ms(21);
  v1::CacheReport cache;
  cache.set_cache_implementation("offloaded");
  cache.set_prefix("sys");
  cache.set_offload_fallback(true);
  EXPECT_EQ(GenerationSummary(v1::FINISH_REASON_EOS, usage, timings, cache),
            "finish_reason=eos prompt_tokens=5 cached_tokens=2 completion_tokens=8 "
            "queue_ms=0.12 ttft_ms=3.50 decode_ms=21.00 cache=offloaded prefix=sys "
            "offload_fallback=true");
  EXPECT_EQ(GenerationSummary(v1::FINISH_REASON_LENGTH, {}, {}, {}),
            "finish_reason=length prompt_tokens=0 cached_tokens=0 completion_tokens=0 "
            "queue_ms=0.00 ttft_ms=0.00 decode_ms=0.00 cache=-");
}

TEST(ModelInfoTextTest, KeyValueLinesWithLayerRuns) {
  v1::ModelInfo info;
  info.set_name("embedded-tiny");
  info.set_vocab_size(512);
  for (int i = 0; i < 3; ++i) info.add_layers()->set_type("full_attention");
  v1::LayerInfo* sliding = info.add_layers();
  sliding->set_type("sliding_attention");
  sliding->set_window(4);
  info.add_eos_token_ids(2);
  info.add_eos_token_ids(3);
  const std::string text = ModelInfoText(info);
  EXPECT_THAT(text, HasSubstr("name: embedded-tiny\n"));
  EXPECT_THAT(text, HasSubstr("vocab_size: 512\n"));
  EXPECT_THAT(text, HasSubstr("layers: full_attention x3, sliding_attention(4) x1\n"));
  EXPECT_THAT(text, HasSubstr("eos_token_ids: 2,3\n"));
  EXPECT_THAT(text, HasSubstr("bos_token_id: none\n"));
  EXPECT_THAT(text, HasSubstr("replica_id: -\n"));
  info.set_bos_token_id(0);
  info.set_replica_id("kvserve-2");
  EXPECT_THAT(ModelInfoText(info), HasSubstr("bos_token_id: 0\n"));
  EXPECT_THAT(ModelInfoText(info), HasSubstr("replica_id: kvserve-2\n"));
}

TEST(TokenIdsTextTest, CommaSeparated) {
  v1::TokenizeResponse response;
  EXPECT_EQ(TokenIdsText(response), "");
  for (int id : {1, 450, 29}) response.add_token_ids(id);
  EXPECT_EQ(TokenIdsText(response), "1,450,29");
}

v1::Prefix SystemPrefix() {
  v1::Prefix prefix;
  prefix.set_name("sys");
  prefix.set_num_tokens(12);
  prefix.set_bytes(4096);
  prefix.set_hits(3);
  prefix.set_fingerprint("0123456789abcdef0123");
  prefix.mutable_created_at()->set_seconds(1700000000);  // 2023-11-14T22:13:20Z
  prefix.mutable_created_at()->set_nanos(999999999);
  prefix.mutable_options()->set_pinned(false);
  prefix.mutable_options()->set_ttl_seconds(300);
  prefix.mutable_options()->set_cache_implementation("static");
  prefix.set_shared(true);
  prefix.set_tier("disk");
  return prefix;
}

TEST(PrefixTextTest, OneLineWithEveryField) {
  EXPECT_EQ(PrefixText(SystemPrefix()),
            "name=sys num_tokens=12 bytes=4096 hits=3 pinned=false ttl=300s "
            "created_at=2023-11-14T22:13:20Z fingerprint=0123456789ab shared=true tier=disk");
}

TEST(PrefixTextTest, UnsetFieldsShowTheirMeaning) {
  v1::Prefix prefix;
  prefix.set_name("bare");
  EXPECT_EQ(PrefixText(prefix),
            "name=bare num_tokens=0 bytes=0 hits=0 pinned=true ttl=none created_at=- "
            "fingerprint=- shared=false tier=-");
}

TEST(PrefixTableTextTest, HeaderAndAlignedColumns) {
  v1::ListPrefixesResponse response;
  *response.add_prefixes() = SystemPrefix();
  v1::Prefix* other = response.add_prefixes();
  other->set_name("long-system-prompt");
  other->set_num_tokens(2000);
  other->set_bytes(1048576);
  other->set_fingerprint("abc");
  other->mutable_created_at()->set_seconds(0);
  EXPECT_EQ(PrefixTableText(response),
            "NAME                TOKENS  BYTES    HITS  PINNED  TTL   CREATED_AT            "
            "FINGERPRINT   SHARED  TIER\n"
            "sys                 12      4096     3     false   300s  2023-11-14T22:13:20Z  "
            "0123456789ab  true    disk\n"
            "long-system-prompt  2000    1048576  0     true    none  1970-01-01T00:00:00Z  "
            "abc           false   -\n");
}

TEST(PrefixTableTextTest, Empty) {
  EXPECT_EQ(PrefixTableText(v1::ListPrefixesResponse()), "no prefixes\n");
}

TEST(ToJsonTest, PrefixInProto3Json) {
  const nlohmann::json parsed = nlohmann::json::parse(ToJson(SystemPrefix()));
  EXPECT_EQ(parsed["name"], "sys");
  EXPECT_EQ(parsed["numTokens"], 12);
  EXPECT_EQ(parsed["bytes"], "4096");  // int64 is a string in proto3 JSON
  EXPECT_EQ(parsed["createdAt"], "2023-11-14T22:13:20.999999999Z");
  EXPECT_EQ(parsed["options"]["pinned"], false);
  EXPECT_EQ(parsed["options"]["ttlSeconds"], "300");
  EXPECT_EQ(parsed["options"]["cacheImplementation"], "static");

  v1::ListPrefixesResponse list;
  EXPECT_EQ(nlohmann::json::parse(ToJson(list))["prefixes"], nlohmann::json::array());
  *list.add_prefixes() = SystemPrefix();
  EXPECT_EQ(nlohmann::json::parse(ToJson(list))["prefixes"][0]["name"], "sys");
}

TEST(GenerationSummaryTest, SessionTurn) {
  v1::CacheReport cache;
  cache.set_cache_implementation("dynamic");
  cache.set_session("0123456789abcdef0123456789abcdef");
  EXPECT_EQ(GenerationSummary(v1::FINISH_REASON_EOS, {}, {}, cache),
            "finish_reason=eos prompt_tokens=0 cached_tokens=0 completion_tokens=0 "
            "queue_ms=0.00 ttft_ms=0.00 decode_ms=0.00 cache=dynamic "
            "session=0123456789abcdef0123456789abcdef");
  cache.set_session_recompute_reason("the cache was evicted");
  EXPECT_THAT(GenerationSummary(v1::FINISH_REASON_EOS, {}, {}, cache),
              ::testing::EndsWith(" session=0123456789abcdef0123456789abcdef "
                                  "session_recompute_reason=\"the cache was evicted\""));
}

TEST(ChatTurnTextTest, CountsTtftAndRecomputeReason) {
  v1::Usage usage;
  usage.set_prompt_tokens(412);
  usage.set_cached_tokens(398);
  usage.set_completion_tokens(64);
  v1::Timings timings;
  timings.set_ttft_ms(12.34);
  EXPECT_EQ(ChatTurnText(3, usage, timings, {}),
            "[turn 3: 412 prompt tokens, 398 cached, ttft 12.3 ms, 64 new tokens]");
  v1::CacheReport cache;
  cache.set_session_recompute_reason("a sliding-window layer cannot crop back 3 tokens");
  EXPECT_EQ(ChatTurnText(1, usage, timings, cache),
            "[turn 1: 412 prompt tokens, 398 cached, ttft 12.3 ms, 64 new tokens, recomputed: a "
            "sliding-window layer cannot crop back 3 tokens]");
}

TEST(SessionStateNameTest, EveryState) {
  EXPECT_EQ(SessionStateName(v1::SESSION_STATE_UNSPECIFIED), "unspecified");
  EXPECT_EQ(SessionStateName(v1::SESSION_STATE_EMPTY), "empty");
  EXPECT_EQ(SessionStateName(v1::SESSION_STATE_IDLE), "idle");
  EXPECT_EQ(SessionStateName(v1::SESSION_STATE_RUNNING), "running");
  EXPECT_EQ(SessionStateName(v1::SESSION_STATE_OFFLOADED), "offloaded");
}

v1::Session ChatSessionProto() {
  v1::Session session;
  session.set_id("0123456789abcdef0123456789abcdef");
  session.mutable_options()->mutable_cache()->set_cache_implementation("static");
  session.mutable_options()->set_prefix("sys");
  session.mutable_options()->set_ttl_seconds(600);
  session.set_state(v1::SESSION_STATE_OFFLOADED);
  session.set_num_tokens(412);
  session.set_cached_tokens(398);
  session.set_device_bytes(0);
  session.set_host_bytes(65536);
  session.set_turns(3);
  session.set_evictions(1);
  session.mutable_created_at()->set_seconds(1700000000);  // 2023-11-14T22:13:20Z
  session.mutable_last_used_at()->set_seconds(1700000060);
  session.mutable_expires_at()->set_seconds(1700000660);
  return session;
}

TEST(SessionTextTest, OneLineWithEveryField) {
  EXPECT_EQ(SessionText(ChatSessionProto()),
            "id=0123456789abcdef0123456789abcdef state=offloaded num_tokens=412 "
            "cached_tokens=398 device_bytes=0 host_bytes=65536 turns=3 evictions=1 cache=static "
            "prefix=sys ttl=600s created_at=2023-11-14T22:13:20Z "
            "last_used_at=2023-11-14T22:14:20Z expires_at=2023-11-14T22:24:20Z");
}

TEST(SessionTextTest, UnsetFieldsShowTheirMeaning) {
  v1::Session session;
  session.set_id("x");
  EXPECT_EQ(SessionText(session),
            "id=x state=unspecified num_tokens=0 cached_tokens=0 device_bytes=0 host_bytes=0 "
            "turns=0 evictions=0 cache=- prefix=- ttl=0s created_at=- last_used_at=- "
            "expires_at=-");
}

TEST(SessionTableTextTest, HeaderAndAlignedColumns) {
  v1::ListSessionsResponse response;
  *response.add_sessions() = ChatSessionProto();
  v1::Session* other = response.add_sessions();
  other->set_id("fedcba9876543210fedcba9876543210");
  other->set_state(v1::SESSION_STATE_IDLE);
  other->set_num_tokens(12000);
  other->set_cached_tokens(11999);
  other->set_device_bytes(1048576);
  other->set_turns(40);
  other->mutable_options()->mutable_cache()->set_cache_implementation("dynamic");
  EXPECT_EQ(SessionTableText(response),
            "ID                                STATE      TOKENS  CACHED  DEVICE_BYTES  "
            "HOST_BYTES  TURNS  CACHE    PREFIX  EXPIRES_AT\n"
            "0123456789abcdef0123456789abcdef  offloaded  412     398     0             "
            "65536       3      static   sys     2023-11-14T22:24:20Z\n"
            "fedcba9876543210fedcba9876543210  idle       12000   11999   1048576       "
            "0           40     dynamic  -       -\n");
}

TEST(SessionTableTextTest, Empty) {
  EXPECT_EQ(SessionTableText(v1::ListSessionsResponse()), "no sessions\n");
}

// A position of a sequence's log-probabilities: `id` chosen with `logprob`, then `top`.
v1::PositionLogprobs Position(int32_t id, float logprob,
                              const std::vector<std::pair<int32_t, float>>& top = {}) {
  v1::PositionLogprobs position;
  position.mutable_chosen()->set_token_id(id);
  position.mutable_chosen()->set_logprob(logprob);
  for (const auto& [top_id, top_logprob] : top) {
    v1::TokenLogprob* entry = position.add_top();
    entry->set_token_id(top_id);
    entry->set_logprob(top_logprob);
  }
  return position;
}

v1::Sequence MakeSequence(int32_t index, const std::string& text, v1::FinishReason finish,
                          std::optional<double> score = std::nullopt) {
  v1::Sequence sequence;
  sequence.set_index(index);
  sequence.set_text(text);
  sequence.set_finish_reason(finish);
  if (score.has_value()) sequence.set_score(*score);
  return sequence;
}

TEST(LogprobsTextTest, OneLinePerTokenWithTheTopList) {
  google::protobuf::RepeatedPtrField<v1::PositionLogprobs> logprobs;
  *logprobs.Add() = Position(450, -0.12345f, {{450, -0.12345f}, {29, -2.5f}, {13, -3.0f}});
  *logprobs.Add() = Position(29, -1.0f);
  EXPECT_EQ(LogprobsText(logprobs),
            "token=450 logprob=-0.1235 top=450:-0.1235,29:-2.5000,13:-3.0000\n"
            "token=29 logprob=-1.0000\n");
  EXPECT_EQ(LogprobsText({}), "");
}

TEST(SequenceHeaderTest, ScoreOnlyWhenSet) {
  EXPECT_EQ(SequenceHeader(1, -0.51234, v1::FINISH_REASON_EOS),
            "[sequence 1 score -0.5123 finish eos]");
  EXPECT_EQ(SequenceHeader(0, std::nullopt, v1::FINISH_REASON_LENGTH),
            "[sequence 0 finish length]");
}

TEST(GenerateResponseTextTest, OneSequenceIsTheTextAsBefore) {
  v1::GenerateResponse response;
  response.set_text("Hello world");
  EXPECT_EQ(GenerateResponseText(response), "Hello world\n");  // a server without sequences
  *response.add_sequences() = MakeSequence(0, "Hello world", v1::FINISH_REASON_LENGTH, -1.5);
  EXPECT_EQ(GenerateResponseText(response), "Hello world\n");  // beam search, one returned
}

TEST(GenerateResponseTextTest, OneSequenceWithLogprobs) {
  v1::GenerateResponse response;
  response.set_text("ab");
  v1::Sequence* sequence = response.add_sequences();
  *sequence = MakeSequence(0, "ab", v1::FINISH_REASON_LENGTH);
  *sequence->add_logprobs() = Position(5, -0.5f, {{5, -0.5f}, {6, -1.25f}});
  *sequence->add_logprobs() = Position(6, -0.25f, {{6, -0.25f}, {7, -2.0f}});
  EXPECT_EQ(GenerateResponseText(response),
            "ab\n"
            "[logprobs]\n"
            "token=5 logprob=-0.5000 top=5:-0.5000,6:-1.2500\n"
            "token=6 logprob=-0.2500 top=6:-0.2500,7:-2.0000\n");
}

TEST(GenerateResponseTextTest, SeveralSequencesInTheirOrder) {
  v1::GenerateResponse response;
  response.set_text("best");
  *response.add_sequences() = MakeSequence(0, "best", v1::FINISH_REASON_EOS, -0.25);
  v1::Sequence* second = response.add_sequences();
  *second = MakeSequence(1, "second\nline", v1::FINISH_REASON_LENGTH, -0.75);
  *second->add_logprobs() = Position(3, -0.125f);
  EXPECT_EQ(GenerateResponseText(response),
            "[sequence 0 score -0.2500 finish eos]\n"
            "best\n"
            "[sequence 1 score -0.7500 finish length]\n"
            "second\nline\n"
            "[logprobs]\n"
            "token=3 logprob=-0.1250\n");

  // Samples: no score.
  v1::GenerateResponse samples;
  *samples.add_sequences() = MakeSequence(0, "a", v1::FINISH_REASON_LENGTH);
  *samples.add_sequences() = MakeSequence(1, "b", v1::FINISH_REASON_STOP);
  EXPECT_EQ(GenerateResponseText(samples),
            "[sequence 0 finish length]\na\n[sequence 1 finish stop]\nb\n");
}

TEST(GenerateSummaryTextTest, ScoreOfTheOneSequenceOnly) {
  v1::GenerateResponse response;
  response.set_finish_reason(v1::FINISH_REASON_EOS);
  response.mutable_cache_report()->set_cache_implementation("dynamic");
  const std::string plain =
      "finish_reason=eos prompt_tokens=0 cached_tokens=0 completion_tokens=0 queue_ms=0.00 "
      "ttft_ms=0.00 decode_ms=0.00 cache=dynamic";
  EXPECT_EQ(GenerateSummaryText(response), plain);
  *response.add_sequences() = MakeSequence(0, "", v1::FINISH_REASON_EOS);
  EXPECT_EQ(GenerateSummaryText(response), plain);
  response.mutable_sequences(0)->set_score(-1.23456);
  EXPECT_EQ(GenerateSummaryText(response), plain + " score=-1.2346");
  *response.add_sequences() = MakeSequence(1, "", v1::FINISH_REASON_EOS, -2.0);
  EXPECT_EQ(GenerateSummaryText(response), plain);  // several: the headers show the scores
}

TEST(ToJsonTest, SequencesScoresAndLogprobs) {
  v1::GenerateResponse response;
  v1::Sequence* sequence = response.add_sequences();
  *sequence = MakeSequence(0, "a", v1::FINISH_REASON_EOS, -0.5);
  *sequence->add_logprobs() = Position(5, -0.5f, {{5, -0.5f}, {6, -1.25f}});
  *response.add_sequences() = MakeSequence(1, "b", v1::FINISH_REASON_LENGTH);
  const nlohmann::json parsed = nlohmann::json::parse(ToJson(response));
  ASSERT_EQ(parsed["sequences"].size(), 2u);
  const nlohmann::json& first = parsed["sequences"][0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["text"], "a");
  EXPECT_EQ(first["finishReason"], "FINISH_REASON_EOS");
  EXPECT_EQ(first["score"], -0.5);
  EXPECT_EQ(first["logprobs"][0]["chosen"], nlohmann::json({{"tokenId", 5}, {"logprob", -0.5}}));
  EXPECT_EQ(first["logprobs"][0]["top"][1], nlohmann::json({{"tokenId", 6}, {"logprob", -1.25}}));
  EXPECT_FALSE(parsed["sequences"][1].contains("score"));  // unset: not beam search
  EXPECT_EQ(parsed["sequences"][1]["logprobs"], nlohmann::json::array());

  v1::GenerateStreamResponse message;
  message.set_index(2);
  message.set_score(-0.75);
  *message.add_logprobs() = Position(7, -0.25f);
  const nlohmann::json stream = nlohmann::json::parse(ToJson(message));
  EXPECT_EQ(stream["index"], 2);
  EXPECT_EQ(stream["score"], -0.75);
  EXPECT_EQ(stream["logprobs"][0]["chosen"]["tokenId"], 7);
}

v1::GenerateStreamResponse Delta(int32_t index, const std::string& text,
                                 v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED) {
  v1::GenerateStreamResponse message;
  message.set_index(index);
  message.set_text(text);
  message.set_finish_reason(finish);
  return message;
}

TEST(StreamTextPrinterTest, OneSequenceIsWrittenAsItComes) {
  std::ostringstream out;
  StreamTextPrinter printer(false, out);
  printer.Add(Delta(0, "Hel"));
  EXPECT_EQ(out.str(), "Hel");
  printer.Add(Delta(0, "lo", v1::FINISH_REASON_LENGTH));
  EXPECT_EQ(out.str(), "Hello");
  printer.Finish();
  EXPECT_EQ(out.str(), "Hello\n");
  EXPECT_EQ(printer.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_FALSE(printer.score().has_value());
}

TEST(StreamTextPrinterTest, OneSequenceLogprobsAfterTheText) {
  std::ostringstream out;
  StreamTextPrinter printer(false, out);
  v1::GenerateStreamResponse first = Delta(0, "a");
  *first.add_logprobs() = Position(5, -0.5f, {{5, -0.5f}});
  v1::GenerateStreamResponse second = Delta(0, "b", v1::FINISH_REASON_EOS);
  *second.add_logprobs() = Position(6, -0.25f, {{6, -0.25f}});
  printer.Add(first);
  printer.Add(second);
  EXPECT_EQ(out.str(), "ab");
  printer.Finish();
  EXPECT_EQ(out.str(),
            "ab\n[logprobs]\ntoken=5 logprob=-0.5000 top=5:-0.5000\n"
            "token=6 logprob=-0.2500 top=6:-0.2500\n");
}

TEST(StreamTextPrinterTest, OneBeamSearchSequenceHasItsScore) {
  std::ostringstream out;
  StreamTextPrinter printer(false, out);
  v1::GenerateStreamResponse whole = Delta(0, "the best", v1::FINISH_REASON_EOS);
  whole.set_score(-0.625);
  printer.Add(whole);
  printer.Finish();
  EXPECT_EQ(out.str(), "the best\n");
  EXPECT_EQ(printer.score(), -0.625);
}

TEST(StreamTextPrinterTest, SeveralSequencesEachWholeWhenItFinishes) {
  std::ostringstream out;
  StreamTextPrinter printer(true, out);
  printer.Add(Delta(0, "a0"));
  printer.Add(Delta(1, "b0"));
  printer.Add(Delta(2, "c0"));
  EXPECT_EQ(out.str(), "");  // nothing until a sequence ends
  printer.Add(Delta(1, "b1", v1::FINISH_REASON_EOS));
  EXPECT_EQ(out.str(), "[sequence 1 finish eos]\nb0b1\n");
  printer.Add(Delta(0, "a1", v1::FINISH_REASON_LENGTH));
  printer.Add(Delta(2, "c1"));
  printer.Finish();  // sequence 2 was cut short
  EXPECT_EQ(out.str(),
            "[sequence 1 finish eos]\nb0b1\n"
            "[sequence 0 finish length]\na0a1\n"
            "[sequence 2 finish unspecified]\nc0c1\n");
  EXPECT_EQ(printer.finish_reason(), v1::FINISH_REASON_LENGTH);  // sequence 0's
}

TEST(StreamTextPrinterTest, SeveralBeamsWithScoresAndLogprobs) {
  std::ostringstream out;
  StreamTextPrinter printer(true, out);
  v1::GenerateStreamResponse best = Delta(0, "xy", v1::FINISH_REASON_EOS);
  best.set_score(-0.5);
  *best.add_logprobs() = Position(3, -0.25f, {{3, -0.25f}, {4, -1.5f}});
  *best.add_logprobs() = Position(4, -0.75f, {{4, -0.75f}, {3, -1.0f}});
  v1::GenerateStreamResponse next = Delta(1, "xz", v1::FINISH_REASON_LENGTH);
  next.set_score(-1.0);
  printer.Add(best);
  printer.Add(next);
  printer.Finish();
  EXPECT_EQ(out.str(),
            "[sequence 0 score -0.5000 finish eos]\nxy\n[logprobs]\n"
            "token=3 logprob=-0.2500 top=3:-0.2500,4:-1.5000\n"
            "token=4 logprob=-0.7500 top=4:-0.7500,3:-1.0000\n"
            "[sequence 1 score -1.0000 finish length]\nxz\n");
  EXPECT_FALSE(printer.score().has_value());  // several: the headers have them
}

TEST(StreamTextPrinterTest, ScoreSuffix) {
  EXPECT_EQ(ScoreSuffix(std::nullopt), "");
  EXPECT_EQ(ScoreSuffix(-0.5), " score=-0.5000");
}

}  // namespace
}  // namespace kvserve::client
