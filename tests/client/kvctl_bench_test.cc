// Tests of kvctl bench: synthetic prompts, its requests and flags, and whole runs against an
// in-process fake server with exact counts.
#include "client/kvctl_bench.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_generation_service.h"
#include "nlohmann/json.hpp"

namespace kvserve::client {
namespace {

using ::testing::Each;
using testing::FakeModelInfo;
using testing::FakeServer;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::Lt;
using ::testing::Not;

TEST(SyntheticPromptTest, DeterministicInRangeAndDifferentPerRequest) {
  const std::vector<int32_t> avoid = {1, 2};
  std::set<std::vector<int32_t>> prompts;
  std::set<int32_t> first_ids;
  for (int64_t i = 0; i < 50; ++i) {
    const std::vector<int32_t> prompt = SyntheticPrompt(i, 16, 100, avoid);
    EXPECT_EQ(prompt, SyntheticPrompt(i, 16, 100, avoid));
    ASSERT_EQ(prompt.size(), 16u);
    EXPECT_THAT(prompt, Each(Ge(0)));
    EXPECT_THAT(prompt, Each(Lt(100)));
    EXPECT_THAT(prompt, Each(Not(1)));
    EXPECT_THAT(prompt, Each(Not(2)));
    prompts.insert(prompt);
    first_ids.insert(prompt[0]);
  }
  EXPECT_EQ(prompts.size(), 50u);
  EXPECT_EQ(first_ids.size(), 50u);  // no two share even their first token
}

TEST(SyntheticPromptTest, OnlyOneUsableId) {
  EXPECT_EQ(SyntheticPrompt(7, 4, 3, {0, 2}), std::vector<int32_t>({1, 1, 1, 1}));
  EXPECT_EQ(SyntheticPrompt(7, 3, 4, {0, 1, 2, 9}), std::vector<int32_t>({3, 3, 3}));
}

TEST(BenchRequestTest, TokenIdsIgnoreEosAndOptionalFields) {
  BenchOptions options;
  options.max_new_tokens = 9;
  v1::GenerateRequest plain = BenchRequest(options, {4, 5});
  EXPECT_THAT(plain.token_ids().ids(), ::testing::ElementsAre(4, 5));
  EXPECT_EQ(plain.sampling().max_new_tokens(), 9);
  EXPECT_TRUE(plain.sampling().ignore_eos());
  EXPECT_FALSE(plain.sampling().has_do_sample());
  EXPECT_TRUE(plain.prefix().empty());
  EXPECT_FALSE(plain.has_cache());

  options.prefix = "sys";
  options.cache_implementation = "static";
  options.skip_prefix_reuse = true;
  v1::GenerateRequest full = BenchRequest(options, {4});
  EXPECT_EQ(full.prefix(), "sys");
  EXPECT_EQ(full.cache().cache_implementation(), "static");
  EXPECT_TRUE(full.cache().skip_prefix_reuse());
}

absl::StatusOr<BenchOptions> ParseBench(const std::vector<std::string>& args) {
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, BenchFlagSpecs());
  if (!parsed.ok()) return parsed.status();
  return ParseBenchOptions(*parsed);
}

TEST(ParseBenchOptionsTest, DefaultsAndEveryFlag) {
  absl::StatusOr<BenchOptions> defaults = ParseBench({});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->concurrency, 1);
  EXPECT_EQ(defaults->requests, 16);
  EXPECT_EQ(defaults->warmup, 1);

  absl::StatusOr<BenchOptions> options =
      ParseBench({"--concurrency", "4", "--requests", "40", "--prompt-tokens", "128",
                  "--max-new-tokens", "64", "--warmup", "0", "--prefix", "sys",
                  "--cache-implementation", "quantized", "--no-prefix-reuse"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->concurrency, 4);
  EXPECT_EQ(options->requests, 40);
  EXPECT_EQ(options->prompt_tokens, 128);
  EXPECT_EQ(options->max_new_tokens, 64);
  EXPECT_EQ(options->warmup, 0);
  EXPECT_EQ(options->prefix, "sys");
  EXPECT_EQ(options->cache_implementation, "quantized");
  EXPECT_TRUE(options->skip_prefix_reuse);
}

TEST(ParseBenchOptionsTest, BadValuesNameTheFlag) {
  EXPECT_THAT(ParseBench({"--concurrency", "0"}).status().message(), HasSubstr("--concurrency"));
  EXPECT_THAT(ParseBench({"--requests", "x"}).status().message(), HasSubstr("--requests"));
  EXPECT_THAT(ParseBench({"--warmup", "-1"}).status().message(), HasSubstr("--warmup"));
  EXPECT_THAT(ParseBench({"--prompt-tokens", "0"}).status().message(),
              HasSubstr("--prompt-tokens"));
}

TEST(ParseBenchOptionsTest, SharedPrefixWorkloadSizesItsRequests) {
  absl::StatusOr<BenchOptions> options =
      ParseBench({"--workload", "shared-prefix", "--groups", "3", "--prompts-per-group", "5",
                  "--system-prompt-tokens", "100", "--question-tokens", "20"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->workload, BenchWorkload::kSharedPrefix);
  EXPECT_EQ(options->requests, 15);
  EXPECT_EQ(options->prompt_tokens, 120);
  absl::StatusOr<BenchOptions> defaults = ParseBench({"--workload", "shared-prefix"});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->requests, 32);
  EXPECT_EQ(defaults->prompt_tokens, 576);
  EXPECT_THAT(ParseBench({"--workload", "shared-prefix", "--requests", "4"}).status().message(),
              HasSubstr("--requests"));
  EXPECT_THAT(ParseBench({"--workload", "sharded"}).status().message(), HasSubstr("--workload"));
  EXPECT_THAT(ParseBench({"--groups", "0"}).status().message(), HasSubstr("--groups"));
}

TEST(BenchPromptTest, SharedPrefixRequestsShareTheirGroupsSystemPromptOnly) {
  BenchOptions options;
  options.workload = BenchWorkload::kSharedPrefix;
  options.groups = 3;
  options.prompts_per_group = 4;
  options.requests = 12;
  options.system_prompt_tokens = 10;
  options.question_tokens = 5;
  options.prompt_tokens = 15;  // as ParseBenchOptions sets it
  options.warmup = 2;
  const std::vector<int32_t> avoid = {0, 2};
  auto prompt = [&](int64_t i) { return BenchPrompt(options, i, 1000, avoid); };
  for (int64_t i = 0; i < 12; ++i) {
    const std::vector<int32_t> p = prompt(i);
    ASSERT_EQ(p.size(), 15u);
    EXPECT_THAT(p, Each(Not(::testing::AnyOf(0, 2))));
    for (int64_t j = 0; j < 12; ++j) {
      if (j == i) continue;
      const std::vector<int32_t> q = prompt(j);
      const bool same_group = i % 3 == j % 3;
      // The same group: the same 10 system tokens, then different questions.
      EXPECT_EQ(std::equal(p.begin(), p.begin() + 10, q.begin()), same_group) << i << " " << j;
      EXPECT_NE(p[10], q[10]) << i << " " << j;
      if (!same_group) {
        EXPECT_NE(p[0], q[0]) << i << " " << j;
      }
    }
  }
  // Warm-up requests (after the measured ones) share no prefix with any measured one.
  for (int64_t w = 12; w < 14; ++w) {
    const std::vector<int32_t> p = prompt(w);
    EXPECT_EQ(p.size(), 15u);
    for (int64_t i = 0; i < 12; ++i) EXPECT_NE(p[0], prompt(i)[0]);
  }
}

TEST(CheckBenchFitsModelTest, ContextAndLimit) {
  const v1::ModelInfo info = FakeModelInfo();  // context 64, limit 32
  BenchOptions options;
  options.prompt_tokens = 32;
  options.max_new_tokens = 32;
  EXPECT_TRUE(CheckBenchFitsModel(options, info).ok());
  options.prompt_tokens = 33;
  EXPECT_THAT(CheckBenchFitsModel(options, info).message(), HasSubstr("context of 64"));
  options.prompt_tokens = 8;
  options.max_new_tokens = 33;
  EXPECT_THAT(CheckBenchFitsModel(options, info).message(), HasSubstr("limit of 32"));
}

TEST(RunBenchTest, CountsEveryTokenAgainstAFakeServer) {
  FakeServer server;
  std::unique_ptr<Client> client = Client::Connect(server.target());
  BenchOptions options;
  options.concurrency = 2;
  options.requests = 5;
  options.prompt_tokens = 6;
  options.max_new_tokens = 4;
  options.warmup = 1;
  options.call.route = "bench-key";
  std::vector<std::pair<std::string, int>> ends;
  const BenchReport report =
      RunBench(*client, options, FakeModelInfo(), [&](const std::string& phase, int done, int n) {
        if (done == n) ends.emplace_back(phase, n);
      });
  EXPECT_EQ(report.succeeded, 5);
  EXPECT_EQ(report.errors, 0);
  EXPECT_EQ(report.first_error, "");
  EXPECT_EQ(report.output_tokens, 20);
  EXPECT_EQ(report.ttft_ms.count, 5u);
  EXPECT_EQ(report.itl_ms.count, 15u);  // the fake sends one token per message
  EXPECT_GT(report.wall_s, 0);
  EXPECT_GT(report.output_tokens_per_s, 0);
  EXPECT_THAT(ends, ::testing::ElementsAre(std::pair<std::string, int>("warmup", 1),
                                           std::pair<std::string, int>("bench", 5)));

  const nlohmann::json json = nlohmann::json::parse(BenchReportJson(report));
  EXPECT_EQ(json["requests"], 5);
  EXPECT_EQ(json["concurrency"], 2);
  EXPECT_EQ(json["errors"], 0);
  EXPECT_EQ(json["output_tokens"], 20);
  EXPECT_EQ(json["ttft_ms"]["count"], 5);
  EXPECT_TRUE(json["ttft_ms"]["p50"].is_number());
  EXPECT_TRUE(json["itl_ms"]["p99"].is_number());
  EXPECT_THAT(BenchReportText(report), HasSubstr("succeeded: 5  errors: 0"));
  // The servers' usage: every prompt token, none cached (the fake caches nothing).
  EXPECT_EQ(report.prompt_tokens, 30);
  EXPECT_EQ(report.cached_tokens, 0);
  EXPECT_EQ(json["prompt_tokens_total"], 30);
  EXPECT_EQ(json["cache_hit_rate"], 0.0);
  EXPECT_THAT(BenchReportText(report), HasSubstr("cache hits: 0 of 30 prompt tokens (0.0 %)"));

  // Every request (warm-up included) carried the route; the replica served the measured ones.
  EXPECT_EQ(server.replica().routes(), std::vector<std::string>(6, "bench-key"));
  EXPECT_EQ(report.requests_by_replica, (std::map<std::string, int>{{"fake-replica", 5}}));
  EXPECT_EQ(json["route"], "bench-key");
  EXPECT_EQ(json["requests_by_replica"], nlohmann::json({{"fake-replica", 5}}));
  EXPECT_THAT(BenchReportText(report), HasSubstr("replicas: fake-replica=5\n"));
}

TEST(RunBenchTest, FailedRequestsAreCountedNotFatal) {
  FakeServer server;
  std::unique_ptr<Client> client = Client::Connect(server.target());
  BenchOptions options;
  options.concurrency = 3;
  options.requests = 4;
  options.warmup = 0;
  options.cache_implementation = "unknown";  // the fake refuses it
  const BenchReport report = RunBench(*client, options, FakeModelInfo(), nullptr);
  EXPECT_EQ(report.succeeded, 0);
  EXPECT_EQ(report.errors, 4);
  EXPECT_THAT(report.first_error, HasSubstr("INVALID_ARGUMENT: cache.cache_implementation"));
  EXPECT_EQ(report.output_tokens, 0);
  EXPECT_FALSE(report.ttft_ms.p50.has_value());
  const nlohmann::json json = nlohmann::json::parse(BenchReportJson(report));
  EXPECT_TRUE(json["ttft_ms"]["p50"].is_null());
  EXPECT_EQ(json["requests_per_s"], 0.0);
  // Failed requests count by replica too; no route was sent.
  EXPECT_EQ(report.requests_by_replica, (std::map<std::string, int>{{"fake-replica", 4}}));
  EXPECT_EQ(server.replica().routes(), std::vector<std::string>(4, ""));
}

}  // namespace
}  // namespace kvserve::client
