// Prefill and decode speed of the Transformer on the tiny-model maker's bench presets, or on
// a Hugging Face model folder (--model DIR). Reports tokens/s as a counter; the arguments are
// the number of threads and the prompt length (prefill) or context depth (decode).
//
//   kvserve_model_bench [--model DIR] [--depths 512,2048] [--threads 1,2]
//                       [--bf16-compute auto|exact] [google-benchmark flags]
//
// With --model only that folder's benchmarks run (BM_Prefill/model/THREADS/TOKENS: a prompt of
// TOKENS into an empty cache; BM_Decode/model/THREADS/DEPTH: 64 single-token steps after a
// DEPTH-token prompt), each after one untimed warm-up forward, so that kvserve and a peer can
// be measured on the very same weights.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/model_source.h"

#include "cache/dynamic_layer.h"
#include "cache/kv_cache.h"
#include "cache/snapshot.h"
#include "cache/torch_compat.h"
#include "model/cascade_attention.h"
#include "model/cpu_kernels.h"
#include "model/mamba_model.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"

namespace kvserve::model {
namespace {

// Every model's load options (--bf16-compute sets bf16_compute).
TransformerOptions& LoadOptions() {
  static TransformerOptions options;
  return options;
}

// Models are made once per preset and kept for the whole run. A preset name ending in
// "/bf16" makes the checkpoint in bfloat16, as real checkpoints are shipped; kvserve keeps
// those weights in bfloat16 and computes in float32.
// A name "dir:PATH" loads the model folder PATH.
Model& BenchModel(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& slot = models[name];
  if (!slot && name.starts_with("dir:")) {
    absl::StatusOr<base::ModelSource> source = base::ModelSource::FromDirectory(name.substr(4));
    if (!source.ok()) {
      std::cerr << source.status() << "\n";
      std::abort();
    }
    auto model = LoadModel(*source, LoadOptions());  // any family (mamba too)
    if (!model.ok()) {
      std::cerr << model.status() << "\n";
      std::abort();
    }
    slot = *std::move(model);
  }
  if (!slot) {
    const bool bf16 = name.ends_with("/bf16");
    const std::string preset = bf16 ? name.substr(0, name.size() - 5) : name;
    auto files = MakeTinyModel({.arch = "llama",
                                .preset = preset,
                                .seed = 1,
                                .weights_dtype = bf16 ? WeightsDtype::kBF16 : WeightsDtype::kF32});
    if (!files.ok()) std::abort();
    auto model = Transformer::Load(base::ModelSource::FromMemory(*files), LoadOptions());
    if (!model.ok()) std::abort();
    slot = std::unique_ptr<Model>(*std::move(model));
  }
  return *slot;
}

// n token ids spread over the vocabulary (any model's: below vocab_size).
std::vector<int32_t> Tokens(int64_t n, int64_t vocab = 32000) {
  const int64_t span = std::max<int64_t>(1, std::min<int64_t>(31000, vocab - 3));
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919) % span + 3);
  return ids;
}

// Decode: one sequence, 64 single-token steps after a prompt of range(1) tokens (untimed; 32
// for the presets).
void BM_Decode(benchmark::State& state, const std::string& preset) {
  compat::SetNumThreads(static_cast<int>(state.range(0)));
  Model& model = BenchModel(preset);
  const std::vector<int32_t> prompt = Tokens(state.range(1), model.info().vocab_size);
  constexpr int kSteps = 64;
  for (auto _ : state) {
    state.PauseTiming();
    auto cache = *cache::KvCache::CreateDynamic(model.info().layer_specs);
    Batch prefill;
    prefill.sequences.push_back({prompt, cache.get(), false});
    if (!model.Forward(prefill).ok()) std::abort();
    state.ResumeTiming();
    int32_t token = 5;
    for (int i = 0; i < kSteps; ++i) {
      Batch step;
      step.sequences.push_back({absl::MakeConstSpan(&token, 1), cache.get(), false});
      auto out = model.Forward(step);
      if (!out.ok()) std::abort();
      token = static_cast<int32_t>(out->logits[0].argmax().item<int64_t>());
    }
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kSteps, benchmark::Counter::kIsRate);
}

// Prefill: a prompt of range(1) tokens (512 unless given) into an empty cache.
void BM_Prefill(benchmark::State& state, const std::string& preset) {
  compat::SetNumThreads(static_cast<int>(state.range(0)));
  Model& model = BenchModel(preset);
  const int64_t tokens = state.range(1);
  const std::vector<int32_t> prompt = Tokens(tokens, model.info().vocab_size);
  if (preset.starts_with("dir:")) {
    // One untimed forward first (page faults of the weights, the thread pools' start).
    auto cache = *cache::KvCache::CreateDynamic(model.info().layer_specs);
    Batch warm;
    warm.sequences.push_back({prompt, cache.get(), false});
    if (!model.Forward(warm).ok()) std::abort();
  }
  for (auto _ : state) {
    state.PauseTiming();
    auto cache = *cache::KvCache::CreateDynamic(model.info().layer_specs);
    state.ResumeTiming();
    Batch batch;
    batch.sequences.push_back({prompt, cache.get(), false});
    if (!model.Forward(batch).ok()) std::abort();
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(tokens),
                         benchmark::Counter::kIsRate);
}

// One decode step's attention in one layer of bench-small's shape (8 query heads, 4 kv heads,
// head_dim 64) for range(2) requests reading one shared prefix of range(1) tokens, each with a
// tail of 96 tokens of its own: range(0) = 0 attends request by request (FusedAttend over the
// segment and the tail: the segment read once per request), 1 as one cascade group
// (CascadeAttend: the segment read once for all of them). 2 threads.
void BM_SharedPrefixAttention(benchmark::State& state) {
  compat::SetNumThreads(2);
  const bool grouped = state.range(0) != 0;
  const int64_t prefix = state.range(1), requests = state.range(2);
  const int64_t heads = 8, kv_heads = 4, d = 64, own = 96;
  at::manual_seed(1);
  const at::Tensor pk = at::randn({1, kv_heads, prefix, d});
  const at::Tensor pv = at::randn({1, kv_heads, prefix, d});
  const cache::LayerSpec full{cache::LayerType::kFullAttention, 0};
  std::vector<CascadeMember> members;
  for (int64_t i = 0; i < requests; ++i) {
    cache::LayerView view{at::randn({1, kv_heads, own + 32, d}),
                          at::randn({1, kv_heads, own + 32, d}),
                          0,
                          own,
                          pk,
                          pv};
    members.push_back(
        {at::randn({1, heads, d}), view, prefix + own - 1, at::empty({1, heads * d})});
  }
  for (auto _ : state) {
    if (grouped) {
      if (!CascadeAttend(members, full, 0.125)) std::abort();
    } else {
      for (CascadeMember& m : members) {
        if (!FusedAttend(m.queries, m.view, m.q_start, full, 0.125, &m.out)) std::abort();
      }
    }
    benchmark::DoNotOptimize(members.back().out.data_ptr<float>());
  }
}

// range(2) requests on one prefix of range(1) tokens on bench-small, 2 threads: each request's
// cache gets the prefix copied (range(0) = 0) or read in place (1), its own 32 tokens are
// prefilled (untimed), then 64 decode steps of all of them batched are timed. Counters: generated
// tokens/s, and the K/V bytes held at the end (every cache's own storage, plus the snapshot once
// when shared).
void BM_SharedPrefixDecode(benchmark::State& state) {
  compat::SetNumThreads(2);
  Model& model = BenchModel("bench-small");
  const bool shared = state.range(0) != 0;
  const int64_t prefix_tokens = state.range(1), requests = state.range(2);
  constexpr int kSteps = 64;
  static std::map<int64_t, std::shared_ptr<const cache::Snapshot>> snapshots;
  auto& snapshot = snapshots[prefix_tokens];
  if (snapshot == nullptr) {
    std::vector<std::unique_ptr<cache::CacheLayer>> layers;
    for (int64_t i = 0; i < model.info().num_layers; ++i) {
      layers.push_back(std::make_unique<cache::DynamicLayer>());
    }
    cache::KvCache capture(std::move(layers));
    const std::vector<int32_t> prompt = Tokens(prefix_tokens, model.info().vocab_size);
    Batch batch;
    batch.sequences.push_back({prompt, &capture, false});
    if (!model.Forward(batch).ok()) std::abort();
    snapshot = *cache::Snapshot::Capture(capture, prompt, "bench");
  }
  int64_t kv_bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<std::unique_ptr<cache::KvCache>> caches;
    std::vector<std::vector<int32_t>> own;
    Batch prefill;
    for (int64_t r = 0; r < requests; ++r) {
      caches.push_back(*cache::KvCache::CreateDynamic(model.info().layer_specs));
      int shared_layers = 0;
      if (!snapshot->LoadInto(caches.back().get(), prefix_tokens, shared ? &shared_layers : nullptr)
               .ok()) {
        std::abort();
      }
      std::vector<int32_t> ids = Tokens(32 + r, model.info().vocab_size);
      own.push_back(std::vector<int32_t>(ids.end() - 32, ids.end()));
    }
    for (int64_t r = 0; r < requests; ++r) prefill.sequences.push_back({own[r], caches[r].get()});
    if (!model.Forward(prefill).ok()) std::abort();
    state.ResumeTiming();
    std::vector<int32_t> next(static_cast<size_t>(requests), 5);
    for (int i = 0; i < kSteps; ++i) {
      Batch step;
      for (int64_t r = 0; r < requests; ++r) {
        step.sequences.push_back({absl::MakeConstSpan(&next[r], 1), caches[r].get()});
      }
      auto out = model.Forward(step);
      if (!out.ok()) std::abort();
      for (int64_t r = 0; r < requests; ++r) {
        next[r] = static_cast<int32_t>(out->logits[r].argmax().item<int64_t>());
      }
    }
    kv_bytes = shared ? snapshot->bytes() : 0;
    for (const auto& c : caches) kv_bytes += c->Memory().device_bytes;
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kSteps * requests, benchmark::Counter::kIsRate);
  state.counters["kv_MiB"] = static_cast<double>(kv_bytes) / (1 << 20);
}

BENCHMARK(BM_SharedPrefixDecode)
    ->ArgsProduct({{0, 1}, {2000}, {1, 8, 32}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK(BM_SharedPrefixAttention)
    ->ArgsProduct({{0, 1}, {2000, 8000}, {8, 32}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, bench_small, std::string("bench-small"))
    ->Args({1, 32})
    ->Args({2, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, bench_small, std::string("bench-small"))
    ->Args({1, 512})
    ->Args({2, 512})
    ->Args({1, 2048})
    ->Args({2, 2048})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, bench_small_bf16, std::string("bench-small/bf16"))
    ->Args({1, 32})
    ->Args({2, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, bench_small_bf16, std::string("bench-small/bf16"))
    ->Args({1, 512})
    ->Args({2, 512})
    ->Args({1, 2048})
    ->Args({2, 2048})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, bench_medium, std::string("bench-medium"))
    ->Args({1, 32})
    ->Args({2, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, bench_medium, std::string("bench-medium"))
    ->Args({1, 512})
    ->Args({2, 512})
    ->Args({1, 2048})
    ->Args({2, 2048})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, bench_medium_bf16, std::string("bench-medium/bf16"))
    ->Args({1, 32})
    ->Args({2, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, bench_medium_bf16, std::string("bench-medium/bf16"))
    ->Args({1, 512})
    ->Args({2, 512})
    ->Args({1, 2048})
    ->Args({2, 2048})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvserve::model

// Comma-separated positive integers; exits naming the flag otherwise.
std::vector<int64_t> IntList(std::string_view flag, std::string_view text) {
  std::vector<int64_t> values;
  const std::vector<std::string> parts = absl::StrSplit(std::string(text), ',');
  for (const std::string& part : parts) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1) {
      std::cerr << flag << ": '" << std::string(text) << "' is not a list of positive integers\n";
      std::exit(2);
    }
    values.push_back(value);
  }
  return values;
}

int main(int argc, char** argv) {
  std::string model_dir;
  std::vector<int64_t> depths = {512, 2048};
  std::vector<int64_t> threads = {1, 2};
  std::vector<char*> rest;
  bool filtered = false;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&](std::string_view flag) -> std::string_view {
      if (arg.size() > flag.size() && arg.starts_with(flag) && arg[flag.size()] == '=') {
        return arg.substr(flag.size() + 1);
      }
      if (arg == flag && i + 1 < argc) return argv[++i];
      std::cerr << flag << " needs a value\n";
      std::exit(2);
    };
    if (arg.starts_with("--model")) {
      model_dir = std::string(value("--model"));
    } else if (arg.starts_with("--depths")) {
      depths = IntList("--depths", value("--depths"));
    } else if (arg.starts_with("--bf16-compute")) {
      absl::StatusOr<kvserve::model::Bf16Compute> mode =
          kvserve::model::ParseBf16Compute(value("--bf16-compute"));
      if (!mode.ok()) {
        std::cerr << mode.status().message() << "\n";
        return 2;
      }
      kvserve::model::LoadOptions().bf16_compute = *mode;
    } else if (arg.starts_with("--threads")) {
      threads = IntList("--threads", value("--threads"));
    } else {
      filtered = filtered || arg.starts_with("--benchmark_filter");
      rest.push_back(argv[i]);
    }
  }
  static std::string filter = "--benchmark_filter=/model/";
  if (!model_dir.empty()) {
    const std::string name = "dir:" + model_dir;
    for (int64_t depth : depths) {
      for (int64_t t : threads) {
        benchmark::RegisterBenchmark(
            "BM_Prefill/model",
            [name](benchmark::State& s) { kvserve::model::BM_Prefill(s, name); })
            ->Args({t, depth})
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(
            "BM_Decode/model", [name](benchmark::State& s) { kvserve::model::BM_Decode(s, name); })
            ->Args({t, depth})
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
    if (!filtered) rest.push_back(filter.data());
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
