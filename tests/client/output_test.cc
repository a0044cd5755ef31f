// Tests of kvctl's output formats: proto3 JSON, the summary line, model info, token ids,
// prefixes, sessions and chat's turn line.
#include "client/output.h"

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
  return prefix;
}

TEST(PrefixTextTest, OneLineWithEveryField) {
  EXPECT_EQ(PrefixText(SystemPrefix()),
            "name=sys num_tokens=12 bytes=4096 hits=3 pinned=false ttl=300s "
            "created_at=2023-11-14T22:13:20Z fingerprint=0123456789ab");
}

TEST(PrefixTextTest, UnsetFieldsShowTheirMeaning) {
  v1::Prefix prefix;
  prefix.set_name("bare");
  EXPECT_EQ(PrefixText(prefix),
            "name=bare num_tokens=0 bytes=0 hits=0 pinned=true ttl=none created_at=- "
            "fingerprint=-");
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
            "FINGERPRINT\n"
            "sys                 12      4096     3     false   300s  2023-11-14T22:13:20Z  "
            "0123456789ab\n"
            "long-system-prompt  2000    1048576  0     true    none  1970-01-01T00:00:00Z  "
            "abc\n");
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

}  // namespace
}  // namespace kvserve::client
