// Tests of Engine on a deterministic FakeModel: exact tokens, per-request cache strategies in
// one batch, cancel and deadline freeing caches, the queue limit, stop conditions, shutdown.
#include "server/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cache/cache_spec.h"
#include "server/metrics.h"
#include "server/prefix_persistence.h"
#include "tests/support/fake_model.h"

namespace kvserve::server {
namespace {

using model::testing::FakeModel;
using model::testing::FakeModelOptions;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Records everything the engine reports for one request.
class RecordingSink final : public RequestSink {
 public:
  void OnOutput(const SequenceOutput& output) override {
    absl::MutexLock lock(&mu_);
    text_.append(output.text);
    tokens_.insert(tokens_.end(), output.token_ids.begin(), output.token_ids.end());
  }
  void OnFinish(const GenerationSummary& summary) override {
    {
      absl::MutexLock lock(&mu_);
      summary_ = summary;
    }
    done_.Notify();
  }
  void OnError(const absl::Status& status) override {
    {
      absl::MutexLock lock(&mu_);
      status_ = status;
    }
    done_.Notify();
  }

  // Waits for the end (fails the test after 60 s).
  void Wait() { ASSERT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(60))); }
  // Waits until at least `n` tokens arrived.
  void WaitTokens(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return tokens_.size() >= n; };
    ASSERT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(60)));
  }
  std::vector<int32_t> tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  GenerationSummary summary() {
    absl::MutexLock lock(&mu_);
    return summary_;
  }

 private:
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  GenerationSummary summary_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

GenerationRequest MakeRequest(std::vector<int32_t> prompt, int64_t max_new_tokens,
                              const std::string& cache = "dynamic") {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_new_tokens = max_new_tokens;
  r.ignore_eos = true;
  r.arrival_time = absl::Now();
  absl::StatusOr<cache::CacheSpec> spec =
      cache::CacheSpec::Parse(cache == "none" ? "" : cache, {}, /*use_cache=*/cache != "none");
  r.cache_spec = *spec;
  if (r.cache_spec.is_static()) {
    r.cache_spec.max_cache_len = static_cast<int64_t>(r.prompt_ids.size()) + max_new_tokens - 1;
  }
  return r;
}

// The tokens greedy decoding of `model` gives after `prompt`.
std::vector<int32_t> Expected(const FakeModel& model, std::vector<int32_t> prompt, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t next = model.NextToken(prompt.back(), static_cast<int64_t>(prompt.size()) - 1);
    out.push_back(next);
    prompt.push_back(next);
  }
  return out;
}

class EngineTest : public ::testing::Test {
 protected:
  void Start(FakeModelOptions model_options = {}, SchedulerOptions scheduler = {},
             PrefixPersistence* persistence = nullptr, cache::KvCacheManagerOptions kv = {}) {
    if (model_options.layer_specs.empty()) {
      model_options.layer_specs = {{cache::LayerType::kFullAttention, 0},
                                   {cache::LayerType::kSlidingAttention, 4}};
    }
    model_options.num_layers = static_cast<int64_t>(model_options.layer_specs.size());
    absl::StatusOr<std::unique_ptr<FakeModel>> model = FakeModel::Create(model_options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    EngineOptions options;
    options.scheduler = scheduler;
    options.persistence = persistence;
    options.kv = kv;
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(options, model_.get(), nullptr, &metrics_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  std::shared_ptr<RecordingSink> Submit(GenerationRequest request) {
    auto sink = std::make_shared<RecordingSink>();
    absl::StatusOr<RequestId> id = engine_->Submit(std::move(request), sink);
    EXPECT_TRUE(id.ok()) << id.status();
    last_id_ = id.value_or(0);
    return sink;
  }

  ServerMetrics metrics_;
  std::unique_ptr<FakeModel> model_;
  std::unique_ptr<Engine> engine_;
  RequestId last_id_ = 0;
};

TEST_F(EngineTest, GreedyTokensFollowTheModelAndTheSummaryCountsThem) {
  Start();
  auto sink = Submit(MakeRequest({3, 4, 5}, 6));
  sink->Wait();
  ASSERT_TRUE(sink->status().ok()) << sink->status();
  EXPECT_THAT(sink->tokens(), ElementsAreArray(Expected(*model_, {3, 4, 5}, 6)));
  const GenerationSummary s = sink->summary();
  EXPECT_EQ(s.finish_reason, FinishReason::kLength);
  EXPECT_EQ(s.prompt_tokens, 3);
  EXPECT_EQ(s.completion_tokens, 6);
  EXPECT_EQ(s.cached_tokens, 0);
  EXPECT_EQ(s.cache_implementation, "dynamic");
  EXPECT_GE(s.ttft_ms, s.queue_ms);
  // The prompt ran once and then one token per step (the last token never runs).
  EXPECT_EQ(model_->num_tokens_run(), 3 + 5);
  EXPECT_TRUE(engine_->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(engine_->Stats().kv_device_bytes, 0);
}

TEST_F(EngineTest, ConcurrentRequestsWithDifferentStrategiesEqualTheirSoloRuns) {
  SchedulerOptions scheduler;
  scheduler.max_batch_size = 16;
  scheduler.max_batch_tokens = 40;  // prompts are chunked next to running decodes
  Start({}, scheduler);
  const std::vector<std::string> strategies = {"dynamic", "static", "offloaded", "offloaded_static",
                                               "none"};
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t <= 3 * i; ++t) prompt.push_back((7 * i + t) % 60);
    const int n = 3 + i;
    expected.push_back(Expected(*model_, prompt, n));
    sinks.push_back(Submit(MakeRequest(prompt, n, strategies[i % strategies.size()])));
  }
  for (int i = 0; i < 16; ++i) {
    sinks[i]->Wait();
    ASSERT_TRUE(sinks[i]->status().ok()) << i << ": " << sinks[i]->status();
    EXPECT_THAT(sinks[i]->tokens(), ElementsAreArray(expected[i])) << "request " << i;
    EXPECT_EQ(sinks[i]->summary().cache_implementation,
              i % 5 == 4 ? "none" : strategies[i % strategies.size()]);
  }
  EXPECT_TRUE(engine_->WaitIdle(absl::Seconds(10)));
  const EngineStats stats = engine_->Stats();
  EXPECT_EQ(stats.kv_device_bytes + stats.kv_host_bytes, 0);
  EXPECT_EQ(stats.num_running, 0);
}

TEST_F(EngineTest, CancelEndsTheRequestAndFreesItsCache) {
  FakeModelOptions options;
  options.max_position_embeddings = 100000;
  Start(options);
  auto sink = Submit(MakeRequest({1, 2}, 50000));
  sink->WaitTokens(3);
  EXPECT_GT(engine_->Stats().kv_device_bytes, 0);
  engine_->Cancel(last_id_);
  sink->Wait();
  EXPECT_EQ(sink->status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(sink->tokens().size(), 50000u);
  EXPECT_TRUE(engine_->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(engine_->Stats().kv_device_bytes, 0);
  EXPECT_THAT(metrics_.TextFormat(), HasSubstr("kvserve_requests_total{outcome=\"cancelled\"} 1"));
}

TEST_F(EngineTest, QueueGaugesSayWhichTenantWaitsAndWhichRuns) {
  FakeModelOptions options;
  options.max_position_embeddings = 100000;
  SchedulerOptions scheduler;
  scheduler.max_batch_size = 1;  // the second request waits while the first runs
  Start(options, scheduler);
  metrics_.SetTenants({"search", "ads"});
  GenerationRequest running = MakeRequest({1, 2}, 50000);
  running.tenant = "search";
  auto running_sink = Submit(std::move(running));
  const RequestId running_id = last_id_;
  running_sink->WaitTokens(1);
  GenerationRequest waiting = MakeRequest({3, 4}, 5);
  waiting.tenant = "ads";
  auto waiting_sink = Submit(std::move(waiting));
  // The step that gave token n + 1 may have started before the second request arrived; the
  // one giving n + 2 began after a drain of the inbox, and its stats are published before the
  // step giving n + 3 runs.
  running_sink->WaitTokens(running_sink->tokens().size() + 3);
  const std::string text = metrics_.TextFormat();
  EXPECT_THAT(text, HasSubstr("\nkvserve_tenant_num_requests_running{tenant=\"search\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nkvserve_tenant_num_requests_waiting{tenant=\"search\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("\nkvserve_tenant_num_requests_waiting{tenant=\"ads\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nkvserve_tenant_num_requests_running{tenant=\"ads\"} 0\n"));
  engine_->Cancel(running_id);
  running_sink->Wait();
  waiting_sink->Wait();
  EXPECT_TRUE(engine_->WaitIdle(absl::Seconds(10)));
  const std::string idle = metrics_.TextFormat();
  EXPECT_THAT(idle, HasSubstr("\nkvserve_tenant_num_requests_running{tenant=\"search\"} 0\n"));
  EXPECT_THAT(idle, HasSubstr("\nkvserve_tenant_num_requests_waiting{tenant=\"ads\"} 0\n"));
}

TEST_F(EngineTest, PassedDeadlineIsDeadlineExceeded) {
  FakeModelOptions options;
  options.max_position_embeddings = 100000;
  Start(options);
  GenerationRequest request = MakeRequest({1, 2}, 50000);
  request.deadline = absl::Now() + absl::Milliseconds(50);
  auto sink = Submit(std::move(request));
  sink->Wait();
  EXPECT_EQ(sink->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(engine_->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(engine_->Stats().kv_device_bytes, 0);
}

TEST_F(EngineTest, FullQueueIsResourceExhausted) {
  // The model blocks inside its first forward until released, so the engine cannot admit
  // anything while the test fills the queue.
  auto gate = std::make_shared<absl::Notification>();
  auto entered = std::make_shared<absl::Notification>();
  FakeModelOptions options;
  options.next_token = [gate, entered](int32_t last, int64_t position) {
    if (!entered->HasBeenNotified()) entered->Notify();
    gate->WaitForNotification();
    return FakeModel::DefaultNextToken(last, position, 64);
  };
  SchedulerOptions scheduler;
  scheduler.max_batch_size = 1;
  scheduler.max_batch_tokens = 8;
  scheduler.max_queue = 2;
  Start(options, scheduler);
  auto first = Submit(MakeRequest({1}, 2));
  ASSERT_TRUE(entered->WaitForNotificationWithTimeout(absl::Seconds(30)));
  auto second = Submit(MakeRequest({2}, 2));
  auto third = Submit(MakeRequest({3}, 2));
  auto sink = std::make_shared<RecordingSink>();
  absl::StatusOr<RequestId> refused = engine_->Submit(MakeRequest({4}, 2), sink);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--max-queue 2"));
  gate->Notify();
  for (auto& s : {first, second, third}) {
    s->Wait();
    EXPECT_TRUE(s->status().ok()) << s->status();
  }
}

TEST_F(EngineTest, StopTokenAndEosEndGeneration) {
  FakeModelOptions options;
  const std::vector<int32_t> expected = [] {
    // DefaultNextToken with vocab 64 after {10}: positions 0, 1, 2, ...
    std::vector<int32_t> seq = {10};
    std::vector<int32_t> out;
    for (int i = 0; i < 6; ++i) {
      out.push_back(
          FakeModel::DefaultNextToken(seq.back(), static_cast<int64_t>(seq.size()) - 1, 64));
      seq.push_back(out.back());
    }
    return out;
  }();
  options.eos_token_ids = {expected[4]};
  Start(options);

  GenerationRequest stop = MakeRequest({10}, 6);
  stop.stop_token_ids = {expected[2]};
  auto stop_sink = Submit(std::move(stop));
  GenerationRequest eos = MakeRequest({10}, 6);
  eos.ignore_eos = false;
  auto eos_sink = Submit(std::move(eos));
  auto ignore_sink = Submit(MakeRequest({10}, 6));
  for (auto& s : {stop_sink, eos_sink, ignore_sink}) s->Wait();

  EXPECT_THAT(stop_sink->tokens(),
              ElementsAreArray(std::vector<int32_t>(expected.begin(), expected.begin() + 3)));
  EXPECT_EQ(stop_sink->summary().finish_reason, FinishReason::kStop);
  EXPECT_THAT(eos_sink->tokens(),
              ElementsAreArray(std::vector<int32_t>(expected.begin(), expected.begin() + 5)));
  EXPECT_EQ(eos_sink->summary().finish_reason, FinishReason::kEos);
  EXPECT_THAT(ignore_sink->tokens(), ElementsAreArray(expected));
  EXPECT_EQ(ignore_sink->summary().finish_reason, FinishReason::kLength);
}

TEST_F(EngineTest, ShutdownEndsLiveRequestsAsCancelledWithTheirOutput) {
  FakeModelOptions options;
  options.max_position_embeddings = 100000;
  Start(options);
  auto sink = Submit(MakeRequest({1, 2}, 50000));
  sink->WaitTokens(2);
  engine_->Shutdown(absl::ZeroDuration());
  sink->Wait();
  ASSERT_TRUE(sink->status().ok()) << sink->status();
  EXPECT_EQ(sink->summary().finish_reason, FinishReason::kCancelled);
  EXPECT_GE(sink->tokens().size(), 2u);
  EXPECT_EQ(sink->summary().completion_tokens, static_cast<int64_t>(sink->tokens().size()));
  auto late = std::make_shared<RecordingSink>();
  EXPECT_EQ(engine_->Submit(MakeRequest({1}, 1), late).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, ShutdownGraceLetsShortRequestsFinish) {
  Start();
  auto sink = Submit(MakeRequest({1, 2}, 20));
  engine_->Shutdown(absl::Seconds(30));
  sink->Wait();
  ASSERT_TRUE(sink->status().ok());
  EXPECT_EQ(sink->summary().finish_reason, FinishReason::kLength);
  EXPECT_EQ(sink->tokens().size(), 20u);
}

TEST_F(EngineTest, CacheSpecTheModelRefusesFailsOnlyThatRequest) {
  Start();  // has a sliding layer: quantized caches are refused, as in the reference
  GenerationRequest bad = MakeRequest({1, 2}, 4);
  bad.cache_spec = *cache::CacheSpec::Parse("quantized");
  auto bad_sink = Submit(std::move(bad));
  auto good_sink = Submit(MakeRequest({1, 2}, 4));
  bad_sink->Wait();
  good_sink->Wait();
  EXPECT_EQ(bad_sink->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_sink->status().message()), HasSubstr("cache:"));
  EXPECT_TRUE(good_sink->status().ok());
  EXPECT_EQ(good_sink->tokens().size(), 4u);
}

// A persistence that records what it is told and fails while told to.
class FakePersistence final : public PrefixPersistence {
 public:
  void RecordPut(const std::string& name, std::vector<int32_t> token_ids,
                 const cache::NamedPrefixOptions& options, absl::Time created_at,
                 Done done) override {
    Record(absl::StrCat("put ", name, " ", token_ids.size(), " ", options.cache_implementation),
           std::move(done));
  }
  void RecordDelete(const std::string& name, Done done) override {
    Record(absl::StrCat("delete ", name), std::move(done));
  }
  void set_fail(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_ = fail;
  }
  std::vector<std::string> records() {
    absl::MutexLock lock(&mu_);
    return records_;
  }

 private:
  void Record(std::string what, Done done) {
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      records_.push_back(std::move(what));
      if (fail_) status = absl::InternalError("could not save the prefix state: disk full");
    }
    if (done) done(status);
  }
  absl::Mutex mu_;
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> records_ ABSL_GUARDED_BY(mu_);
};

// Registers `tokens` as `name` and returns the engine's answer.
absl::StatusOr<cache::PrefixInfo> Register(Engine& engine, const std::string& name,
                                           std::vector<int32_t> tokens) {
  absl::Notification done;
  absl::StatusOr<cache::PrefixInfo> result;
  cache::NamedPrefixOptions options;
  options.cache_implementation = "dynamic";
  engine.RegisterPrefix(name, std::move(tokens), *cache::CacheSpec::Parse("dynamic"), options,
                        [&](absl::StatusOr<cache::PrefixInfo> info) {
                          result = std::move(info);
                          done.Notify();
                        });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  return result;
}

absl::Status Delete(Engine& engine, const std::string& name) {
  absl::Notification done;
  absl::Status result;
  engine.DeletePrefix(name, [&](absl::Status status) {
    result = status;
    done.Notify();
  });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  return result;
}

TEST_F(EngineTest, RegistrationsAndDeletionsAreRecordedAndNamedOnce) {
  FakePersistence persistence;
  Start({}, {}, &persistence);
  absl::StatusOr<cache::PrefixInfo> info = Register(*engine_, "sys", {1, 2, 3, 4, 5});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_tokens, 5);
  // The reply comes after the record, and the catalog already names it.
  EXPECT_EQ(persistence.records(), std::vector<std::string>({"put sys 5 dynamic"}));
  ASSERT_EQ(engine_->catalog()->count("sys"), 1u);
  // A request naming it starts from it, and counts one hit.
  GenerationRequest request = MakeRequest({1, 2, 3, 4, 5, 6}, 3);
  request.prefix = "sys";
  request.prefix_snapshot = engine_->catalog()->at("sys").snapshot.lock();
  auto sink = Submit(std::move(request));
  sink->Wait();
  ASSERT_TRUE(sink->status().ok()) << sink->status();
  EXPECT_EQ(sink->summary().cached_tokens, 5);
  EXPECT_EQ(sink->summary().prefix, "sys");
  EXPECT_EQ(engine_->Stats().prefixes.named_hits, 1);
  EXPECT_TRUE(Delete(*engine_, "sys").ok());
  EXPECT_EQ(Delete(*engine_, "sys").code(), absl::StatusCode::kNotFound);
  // The NOT_FOUND is answered behind a record of the name's state (gone), so that it cannot
  // overtake a delete that is not durable yet.
  EXPECT_EQ(persistence.records(),
            std::vector<std::string>({"put sys 5 dynamic", "delete sys", "delete sys"}));
  EXPECT_EQ(engine_->catalog()->count("sys"), 0u);
}

TEST_F(EngineTest, WhatCannotBeRecordedChangesNothing) {
  FakePersistence persistence;
  Start({}, {}, &persistence);
  ASSERT_TRUE(Register(*engine_, "kept", {1, 2, 3}).ok());
  persistence.set_fail(true);
  // A registration that cannot be saved fails, and is undone.
  absl::StatusOr<cache::PrefixInfo> unsaved = Register(*engine_, "unsaved", {4, 5, 6});
  EXPECT_EQ(unsaved.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(unsaved.status().message(), "could not save the prefix state: disk full");
  // A deletion that cannot be saved leaves the prefix registered. (Its answer also comes
  // after the undo above, which went into the inbox first.)
  EXPECT_EQ(Delete(*engine_, "kept").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(engine_->catalog()->count("kept"), 1u);
  EXPECT_EQ(engine_->catalog()->count("unsaved"), 0u);
  // The undoes are recorded too, so that the record follows the catalog: the failed deletion
  // of "kept" is followed by the put that restores it, so that a later rewrite of the journal
  // (once the disk has room) keeps it (issue 27, item 14).
  EXPECT_EQ(persistence.records(),
            std::vector<std::string>({"put kept 3 dynamic", "put unsaved 3 dynamic",
                                      "delete unsaved", "delete kept", "put kept 3 dynamic"}));
}

// A model with full attention only (automatic prefixes are kept) and room for long prompts.
FakeModelOptions FullAttentionModel(int64_t context = 4096) {
  FakeModelOptions options;
  options.layer_specs = {{cache::LayerType::kFullAttention, 0},
                         {cache::LayerType::kFullAttention, 0}};
  options.max_position_embeddings = context;
  return options;
}

std::vector<int32_t> Tokens(int n, int seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((seed * 7 + i * 13 + 1) % 64);
  return ids;
}

TEST_F(EngineTest, ARegistrationRunsInChunksBesideRunningDecodes) {
  Start(FullAttentionModel(), {.max_batch_size = 8, .max_batch_tokens = 64});
  std::vector<std::shared_ptr<RecordingSink>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(Submit(MakeRequest(Tokens(8, i), 400)));
  for (auto& s : streams) s->WaitTokens(1);
  // 2,000 tokens in chunks of at most 60 (64 minus the 4 decodes): about 34 steps, each
  // running every decode, instead of one step stalling them all.
  std::vector<size_t> before;
  for (auto& s : streams) before.push_back(s->tokens().size());
  const int64_t steps_before = engine_->Stats().num_steps;
  ASSERT_TRUE(Register(*engine_, "long", Tokens(2000, 9)).ok());
  const int64_t steps = engine_->Stats().num_steps - steps_before;
  EXPECT_GE(steps, 2000 / 60);
  for (size_t i = 0; i < streams.size(); ++i) {
    // Every step of the registration gave every stream a token (the first and last steps
    // may fall outside the window the counts were read in).
    EXPECT_GE(streams[i]->tokens().size() - before[i], static_cast<size_t>(steps - 2)) << i;
  }
  for (auto& s : streams) s->Wait();
}

TEST_F(EngineTest, RequestsSentTogetherOnAFreshPrefixComputeItOnce) {
  Start(FullAttentionModel(), {.max_batch_size = 16, .max_batch_tokens = 2048});
  for (int repetition = 0; repetition < 20; ++repetition) {
    const std::vector<int32_t> shared = Tokens(2000, 100 + repetition);
    const int64_t computed_before = engine_->Stats().prompt_tokens_computed;
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (int i = 0; i < 8; ++i) {
      std::vector<int32_t> prompt = shared;
      const std::vector<int32_t> own = Tokens(32, 1000 * repetition + i);
      prompt.insert(prompt.end(), own.begin(), own.end());
      sinks.push_back(Submit(MakeRequest(prompt, 4)));
    }
    int64_t cached = 0;
    for (auto& s : sinks) {
      s->Wait();
      ASSERT_TRUE(s->status().ok()) << s->status();
      cached += s->summary().cached_tokens;
    }
    ASSERT_TRUE(engine_->WaitIdle(absl::Seconds(30)));
    const int64_t computed = engine_->Stats().prompt_tokens_computed - computed_before;
    EXPECT_LE(computed, 2000 + 8 * 32) << "repetition " << repetition;
    EXPECT_EQ(cached, 7 * 2000) << "repetition " << repetition;
  }
}

TEST_F(EngineTest, IdenticalRequestsUnderATightBudgetWaitInsteadOfFailing) {
  // Two layers of 2 heads x 4 dims in float32: 64 bytes per token and layer for K and V. A
  // 600-token prompt with 16 new tokens reserves 640 tokens: 81,920 bytes; the budget holds
  // one and a half of them.
  cache::KvCacheManagerOptions kv;
  kv.budget.device_limit_bytes = 122880;
  Start(FullAttentionModel(), {.max_batch_size = 8, .max_batch_tokens = 2048}, nullptr, kv);
  int failures = 0;
  for (int round = 0; round < 50; ++round) {
    const std::vector<int32_t> prompt = Tokens(600, round);
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (int i = 0; i < 4; ++i) sinks.push_back(Submit(MakeRequest(prompt, 16)));
    const std::vector<int32_t> expected = Expected(*model_, prompt, 16);
    for (auto& s : sinks) {
      s->Wait();
      if (!s->status().ok()) {
        ++failures;
        ADD_FAILURE() << "round " << round << ": " << s->status();
        continue;
      }
      EXPECT_EQ(s->tokens(), expected);
    }
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace kvserve::server
