// Out-of-memory fallback on the engine with a real tiny model: a KV device budget just too
// small for the batch, 5% injected allocation failures under 200 concurrent requests, and a
// request that cannot fit even offloaded.
#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/model_source.h"
#include "cache/cache_spec.h"
#include "grpc_health/v1/health.grpc.pb.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"
#include "server/engine.h"
#include "server/kv_server.h"
#include "server/metrics.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class Sink final : public RequestSink {
 public:
  void OnOutput(const SequenceOutput& output) override {
    tokens.insert(tokens.end(), output.token_ids.begin(), output.token_ids.end());
  }
  void OnFinish(const GenerationSummary& s) override {
    summary = s;
    done.Notify();
  }
  void OnError(const absl::Status& s) override {
    status = s;
    done.Notify();
  }
  void Wait() { ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(120))); }

  // Written by the engine thread before `done` is notified.
  std::vector<int32_t> tokens;
  GenerationSummary summary;
  absl::Status status;
  absl::Notification done;
};

std::unique_ptr<model::Transformer> TinyLlama() {
  auto files = model::MakeTinyModel({.arch = "llama", .preset = "tiny", .seed = 4});
  return *model::Transformer::Load(base::ModelSource::FromMemory(*files), {});
}

GenerationRequest Request(int index, int prompt_length, int max_new, const std::string& cache) {
  GenerationRequest r;
  for (int t = 0; t < prompt_length; ++t) r.prompt_ids.push_back((index * 37 + t * 11 + 1) % 250);
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  r.arrival_time = absl::Now();
  r.cache_spec = *cache::CacheSpec::Parse(cache);
  if (r.cache_spec.is_static()) r.cache_spec.max_cache_len = prompt_length + max_new - 1;
  return r;
}

std::unique_ptr<Engine> MakeEngine(model::Model* model, ServerMetrics* metrics,
                                   cache::KvMemoryBudgetOptions budget) {
  EngineOptions options;
  options.scheduler.max_batch_size = 32;
  options.scheduler.max_queue = 512;
  options.kv.budget = budget;
  return *Engine::Create(options, model, nullptr, metrics);
}

// Runs the requests together and returns their sinks once all ended.
std::vector<std::shared_ptr<Sink>> RunAll(Engine& engine, std::vector<GenerationRequest> requests) {
  std::vector<std::shared_ptr<Sink>> sinks;
  for (GenerationRequest& r : requests) {
    auto sink = std::make_shared<Sink>();
    absl::StatusOr<RequestId> id = engine.Submit(std::move(r), sink);
    EXPECT_TRUE(id.ok()) << id.status();
    sinks.push_back(sink);
  }
  for (auto& sink : sinks) sink->Wait();
  return sinks;
}

const char* kCaches[] = {"dynamic", "static", "quantized"};

std::vector<GenerationRequest> Workload(int count) {
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < count; ++i) requests.push_back(Request(i, 12 + i % 9, 30, kCaches[i % 3]));
  return requests;
}

TEST(OutOfMemoryTest, BudgetTooSmallForTheBatchCompletesThroughTheFallback) {
  std::unique_ptr<model::Transformer> model = TinyLlama();
  ServerMetrics metrics;
  std::vector<std::vector<int32_t>> expected;
  {
    auto engine = MakeEngine(model.get(), &metrics, {});
    for (auto& sink : RunAll(*engine, Workload(8))) {
      ASSERT_TRUE(sink->status.ok()) << sink->status;
      expected.push_back(sink->tokens);
    }
  }
  // Each cache takes 32 KiB on the "device" (two layers of one 64-token granule); offloaded,
  // one layer at a time is resident during a step. Eight caches need 256 KiB: with 160 KB
  // about six must move to the host.
  ServerMetrics budget_metrics;
  auto engine = MakeEngine(model.get(), &budget_metrics, {.device_limit_bytes = 160'000});
  std::vector<std::shared_ptr<Sink>> sinks = RunAll(*engine, Workload(8));
  int fell_back = 0;
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(sinks[i]->status.ok()) << i << ": " << sinks[i]->status;
    EXPECT_THAT(sinks[i]->tokens, ElementsAreArray(expected[i])) << "request " << i;
    if (sinks[i]->summary.offload_fallback) {
      ++fell_back;
      EXPECT_NE(sinks[i]->summary.cache_implementation, "dynamic");
      EXPECT_NE(sinks[i]->summary.cache_implementation, "static");
    }
  }
  EXPECT_GT(fell_back, 0);
  EXPECT_TRUE(engine->WaitIdle(absl::Seconds(30)));
  const EngineStats stats = engine->Stats();
  EXPECT_GT(stats.num_oom_events, 0);
  EXPECT_EQ(stats.num_offload_fallbacks, fell_back);
  EXPECT_EQ(stats.kv_device_bytes + stats.kv_host_bytes, 0);
  const std::string text = budget_metrics.TextFormat();
  EXPECT_THAT(text, HasSubstr("kvserve_offload_fallbacks_total " + std::to_string(fell_back)));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("kvserve_oom_events_total 0\n")));
}

TEST(OutOfMemoryTest, InjectedFaultsFailRequestsAloneOrNotAtAll) {
  std::unique_ptr<model::Transformer> model = TinyLlama();
  ServerMetrics metrics;
  std::vector<std::vector<int32_t>> expected;
  {
    auto engine = MakeEngine(model.get(), &metrics, {});
    for (auto& sink : RunAll(*engine, Workload(200))) expected.push_back(sink->tokens);
  }
  ServerMetrics fault_metrics;
  auto engine = MakeEngine(model.get(), &fault_metrics, {.fault_inject_oom_rate = 0.05, .seed = 7});
  std::vector<std::shared_ptr<Sink>> sinks = RunAll(*engine, Workload(200));
  int completed = 0, exhausted = 0;
  for (size_t i = 0; i < sinks.size(); ++i) {
    if (sinks[i]->status.ok()) {
      ++completed;
      EXPECT_THAT(sinks[i]->tokens, ElementsAreArray(expected[i])) << "request " << i;
    } else {
      ++exhausted;
      EXPECT_EQ(sinks[i]->status.code(), absl::StatusCode::kResourceExhausted) << sinks[i]->status;
    }
  }
  EXPECT_EQ(completed + exhausted, 200);
  std::printf(
      "fault injection: %d completed, %d RESOURCE_EXHAUSTED, %lld OOM events, %lld "
      "fallbacks\n",
      completed, exhausted, static_cast<long long>(engine->Stats().num_oom_events),
      static_cast<long long>(engine->Stats().num_offload_fallbacks));
  EXPECT_GT(completed, 0);
  EXPECT_GT(engine->Stats().num_oom_events, 0);
  EXPECT_TRUE(engine->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(engine->Stats().kv_device_bytes + engine->Stats().kv_host_bytes, 0);
  // Still serving after the storm.
  auto after = RunAll(*engine, {Request(1, 10, 3, "dynamic")});
  EXPECT_TRUE(after[0]->status.ok() ||
              after[0]->status.code() == absl::StatusCode::kResourceExhausted);
}

TEST(OutOfMemoryTest, RequestThatCannotFitEvenOffloadedIsRefusedUpFront) {
  std::unique_ptr<model::Transformer> model = TinyLlama();
  ServerMetrics metrics;
  // Storage grows in 64-token granules of 16 KiB per layer (2 layers): a short request needs
  // 32 KiB; 200 + 100 tokens need 80 KiB per layer, 160 KiB with two layers resident.
  auto engine = MakeEngine(model.get(), &metrics, {.device_limit_bytes = 40'000});
  auto sink = std::make_shared<Sink>();
  absl::StatusOr<RequestId> id = engine->Submit(Request(0, 200, 100, "dynamic"), sink);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("bytes even offloaded"));
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("40000"));
  // A small one still fits.
  auto small = RunAll(*engine, {Request(0, 2, 2, "dynamic")});
  EXPECT_TRUE(small[0]->status.ok()) << small[0]->status;
}

TEST(OutOfMemoryTest, ServerKeepsServingThroughInjectedFaults) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.threads = 1;
  options.fault_inject_oom_rate = 0.05;
  options.scheduler.max_batch_size = 64;
  options.scheduler.max_queue = 512;
  auto server = *KvServer::Start(options);
  LoadedModel loaded;
  loaded.model = TinyLlama();
  loaded.name = "tiny";
  loaded.fingerprint = "test";
  ASSERT_TRUE(server->Serve(std::move(loaded)).ok());
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Generation::NewStub(channel);
  std::vector<grpc::Status> statuses(200);
  std::vector<std::thread> threads;
  for (int i = 0; i < 200; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest request;
      for (int t = 0; t < 6 + i % 7; ++t) request.mutable_token_ids()->add_ids((i * 13 + t) % 250);
      request.mutable_sampling()->set_max_new_tokens(8);
      request.mutable_cache()->set_cache_implementation(kCaches[i % 3]);
      v1::GenerateResponse response;
      grpc::ClientContext context;
      statuses[i] = stub->Generate(&context, request, &response);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const grpc::Status& status : statuses) {
    EXPECT_TRUE(status.ok() || status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << status.error_code() << " " << status.error_message();
  }
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(server->engine()->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(server->engine()->Stats().kv_device_bytes + server->engine()->Stats().kv_host_bytes, 0);
  EXPECT_GT(server->engine()->Stats().num_oom_events, 0);
}

}  // namespace
}  // namespace kvserve::server
