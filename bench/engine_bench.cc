// kvserve_engine_bench: the engine alone (no gRPC) on the same work as `kvctl bench`, to
// measure the server's gRPC overhead and the batching gain: N requests of P synthetic prompt
// tokens and M new tokens each, C at a time, on a seeded bench preset.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/command_line.h"
#include "base/model_source.h"
#include "cache/cache_spec.h"
#include "cache/torch_compat.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"
#include "server/engine.h"
#include "server/metrics.h"

namespace {

using kvserve::server::Engine;
using kvserve::server::GenerationRequest;
using kvserve::server::GenerationSummary;

// Token arrival times of one request.
class TimingSink final : public kvserve::server::RequestSink {
 public:
  TimingSink(absl::Mutex* mu, int* in_flight) : mu_(mu), in_flight_(in_flight) {}
  void OnOutput(const kvserve::server::SequenceOutput& output) override {
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < output.token_ids.size(); ++i) arrivals.push_back(now);
  }
  void OnFinish(const GenerationSummary&) override { Done(); }
  void OnError(const absl::Status& status) override {
    failed = true;
    Done();
  }
  absl::Time sent;
  std::vector<absl::Time> arrivals;  // written by the engine thread before Done
  bool failed = false;

 private:
  void Done() {
    absl::MutexLock lock(mu_);
    --*in_flight_;
  }
  absl::Mutex* mu_;
  int* in_flight_;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::max(1.0, std::ceil(p / 100.0 * v.size())));
  return v[std::min(rank, v.size()) - 1];
}

int Run(const kvserve::base::CommandLine& cl) {
  const int concurrency = static_cast<int>(cl.GetInt("concurrency", 1).value_or(1));
  const int requests = static_cast<int>(cl.GetInt("requests", 16).value_or(16));
  const int prompt_tokens = static_cast<int>(cl.GetInt("prompt-tokens", 32).value_or(32));
  const int max_new = static_cast<int>(cl.GetInt("max-new-tokens", 32).value_or(32));
  const int threads = static_cast<int>(cl.GetInt("threads", 2).value_or(2));
  const std::string preset = cl.GetString("preset", "bench-small");
  const std::string weights = cl.GetString("weights-dtype", "f32");
  if (weights != "f32" && weights != "bf16") {
    std::cerr << "--weights-dtype must be f32 or bf16\n";
    return 2;
  }
  const std::string cache_name = cl.GetString("cache-implementation", "dynamic");
  const int64_t kv_device_bytes = cl.GetInt("kv-device-bytes", -1).value_or(-1);
  const int num_beams = static_cast<int>(cl.GetInt("num-beams", 1).value_or(1));
  const int num_sequences = static_cast<int>(cl.GetInt("num-return-sequences", 1).value_or(1));
  const std::string early = cl.GetString("early-stopping", "false");
  const bool ignore_eos = cl.GetString("ignore-eos", "true") != "false";
  const bool sample = cl.GetString("do-sample", "false") == "true";
  kvserve::model::EarlyStopping early_stopping = kvserve::model::EarlyStopping::kFalse;
  if (early == "true") {
    early_stopping = kvserve::model::EarlyStopping::kTrue;
  } else if (early == "never") {
    early_stopping = kvserve::model::EarlyStopping::kNever;
  } else if (early != "false") {
    std::cerr << "--early-stopping must be true, false or never\n";
    return 2;
  }
  absl::StatusOr<kvserve::cache::CacheSpec> spec = kvserve::cache::CacheSpec::Parse(cache_name);
  if (!spec.ok()) {
    std::cerr << spec.status() << "\n";
    return 2;
  }
  kvserve::compat::SetNumThreads(threads);
  auto files = kvserve::model::MakeTinyModel(
      {.arch = "llama",
       .preset = preset,
       .seed = 1,
       .weights_dtype = weights == "bf16" ? kvserve::model::WeightsDtype::kBF16
                                          : kvserve::model::WeightsDtype::kF32});
  if (!files.ok()) {
    std::cerr << files.status() << "\n";
    return 1;
  }
  auto model =
      kvserve::model::Transformer::Load(kvserve::base::ModelSource::FromMemory(*files), {});
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 1;
  }
  kvserve::server::ServerMetrics metrics;
  kvserve::server::EngineOptions options;
  options.scheduler.max_batch_size = std::max(32, concurrency);
  options.kv.budget.device_limit_bytes = kv_device_bytes;
  // Only the requests' own caches count in the peak.
  options.kv.auto_prefix_cache = false;
  // The beams' or samples' rows decode in one step.
  options.scheduler.max_batch_tokens =
      std::max<int64_t>(options.scheduler.max_batch_tokens,
                        static_cast<int64_t>(std::max(num_beams, num_sequences)) * concurrency);
  auto engine = Engine::Create(options, model->get(), nullptr, &metrics);
  if (!engine.ok()) {
    std::cerr << engine.status() << "\n";
    return 1;
  }
  const int32_t vocab = static_cast<int32_t>((*model)->info().vocab_size);
  absl::Mutex mu;
  int in_flight = 0;
  std::vector<std::shared_ptr<TimingSink>> sinks;
  auto submit = [&](int index) {
    GenerationRequest r;
    for (int t = 0; t < prompt_tokens; ++t) {
      r.prompt_ids.push_back(static_cast<int32_t>((7919 * index + 104729 * t + 13) % vocab));
    }
    r.max_new_tokens = max_new;
    r.ignore_eos = ignore_eos;
    r.num_beams = num_beams;
    r.num_return_sequences = num_sequences;
    r.early_stopping = early_stopping;
    r.sampling.do_sample = sample;
    r.sampling.seed = static_cast<uint64_t>(index);
    r.cache_spec = *spec;
    if (r.cache_spec.is_static()) r.cache_spec.max_cache_len = prompt_tokens + max_new - 1;
    r.arrival_time = absl::Now();
    auto sink = std::make_shared<TimingSink>(&mu, &in_flight);
    sink->sent = r.arrival_time;
    sinks.push_back(sink);
    return (*engine)->Submit(std::move(r), sink).status();
  };
  // One warm-up request, not measured.
  {
    {
      absl::MutexLock lock(&mu);
      ++in_flight;
    }
    if (!submit(requests).ok()) return 1;
    absl::MutexLock lock(&mu);
    auto idle = [&in_flight] { return in_flight == 0; };
    mu.Await(absl::Condition(&idle));
    sinks.clear();
  }
  const int64_t warmup_tokens = metrics.generated_tokens();
  // The most host KV bytes at once (offloaded caches), sampled while the requests run.
  int64_t host_peak = 0;
  std::atomic<bool> running{true};
  std::thread sampler([&] {
    while (running.load()) {
      host_peak = std::max(host_peak, (*engine)->Stats().kv_host_bytes);
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  const absl::Time start = absl::Now();
  for (int i = 0; i < requests; ++i) {
    {
      absl::MutexLock lock(&mu);
      auto has_room = [&in_flight, concurrency] { return in_flight < concurrency; };
      mu.Await(absl::Condition(&has_room));
      ++in_flight;
    }
    absl::Status s = submit(i);
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
  }
  {
    absl::MutexLock lock(&mu);
    auto idle = [&in_flight] { return in_flight == 0; };
    mu.Await(absl::Condition(&idle));
  }
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  running = false;
  sampler.join();
  std::vector<double> ttft, itl;
  int64_t tokens = 0;
  int errors = 0;
  for (const auto& s : sinks) {
    if (s->failed) ++errors;
    tokens += static_cast<int64_t>(s->arrivals.size());
    if (s->arrivals.empty()) continue;
    ttft.push_back(absl::ToDoubleMilliseconds(s->arrivals.front() - s->sent));
    for (size_t i = 1; i < s->arrivals.size(); ++i) {
      itl.push_back(absl::ToDoubleMilliseconds(s->arrivals[i] - s->arrivals[i - 1]));
    }
  }
  const kvserve::server::EngineStats stats = (*engine)->Stats();
  // Tokens sampled over every row (each beam, each sample), the warm-up's excluded.
  const int64_t row_tokens = metrics.generated_tokens() - warmup_tokens;
  std::printf(
      "{\"num_beams\": %d, \"num_return_sequences\": %d, \"early_stopping\": \"%s\", "
      "\"kv_device_peak_bytes\": %lld, \"kv_host_peak_bytes\": %lld, "
      "\"row_tokens\": %lld, \"row_tokens_per_s\": %.1f, ",
      num_beams, num_sequences, early.c_str(), static_cast<long long>(stats.kv_device_peak_bytes),
      static_cast<long long>(host_peak), static_cast<long long>(row_tokens), row_tokens / wall_s);
  std::printf(
      "\"engine\": true, \"cache\": \"%s\", \"kv_device_bytes\": %lld, \"oom_events\": %lld, "
      "\"offload_fallbacks\": %lld, \"preset\": \"%s\", \"weights\": \"%s\", \"threads\": %d, "
      "\"concurrency\": %d, "
      "\"requests\": "
      "%d, \"prompt_tokens\": %d, \"max_new_tokens\": %d, \"errors\": %d, \"wall_s\": %.3f, "
      "\"output_tokens_per_s\": %.1f, \"ttft_ms_p50\": %.1f, \"ttft_ms_p99\": %.1f, "
      "\"itl_ms_p50\": %.2f, \"itl_ms_p99\": %.2f}\n",
      cache_name.c_str(), static_cast<long long>(kv_device_bytes),
      static_cast<long long>(stats.num_oom_events),
      static_cast<long long>(stats.num_offload_fallbacks), preset.c_str(), weights.c_str(), threads,
      concurrency, requests, prompt_tokens, max_new, errors, wall_s, tokens / wall_s,
      Percentile(ttft, 50), Percentile(ttft, 99), Percentile(itl, 50), Percentile(itl, 99));
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto cl = kvserve::base::CommandLine::Parse(
      argc, argv,
      {{"concurrency", "requests in flight at once", "1"},
       {"requests", "requests to run", "16"},
       {"prompt-tokens", "synthetic prompt length", "32"},
       {"max-new-tokens", "tokens generated per request", "32"},
       {"threads", "CPU threads", "2"},
       {"preset", "tiny-model-maker preset (llama)", "bench-small"},
       {"weights-dtype", "f32 | bf16: the checkpoint's dtype (bf16 stays bf16 in memory)", "f32"},
       {"cache-implementation", "dynamic | static | offloaded | offloaded_static | quantized",
        "dynamic"},
       {"kv-device-bytes", "KV device budget (out-of-memory fallback beyond it)", "unlimited"},
       {"num-beams", "beam search with this many beams", "1"},
       {"num-return-sequences", "sequences per request (beams or samples)", "1"},
       {"early-stopping", "false | true | never (beam search)", "false"},
       {"do-sample", "true: sample (seed = request index)", "false"},
       {"ignore-eos", "false: end-of-sequence tokens end sequences (and beams)", "true"}});
  if (!cl.ok()) {
    std::cerr << cl.status().message() << "\n";
    return 2;
  }
  if (cl->help_requested()) {
    std::cout << cl->Usage("kvserve_engine_bench", "The engine alone on kvctl bench's work.");
    return 0;
  }
  return Run(*cl);
}
