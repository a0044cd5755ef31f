// Prefill and decode speed of the Transformer on the tiny-model maker's bench presets.
// Reports tokens/s as a counter; the argument is the number of threads.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <memory>

#include "cache/kv_cache.h"
#include "cache/torch_compat.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"

namespace kvserve::model {
namespace {

// Models are made once per preset and kept for the whole run. A preset name ending in
// "/bf16" makes the checkpoint in bfloat16, as real checkpoints are shipped; kvserve keeps
// those weights in bfloat16 and computes in float32.
Transformer& BenchModel(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Transformer>> models;
  auto& slot = models[name];
  if (!slot) {
    const bool bf16 = name.ends_with("/bf16");
    const std::string preset = bf16 ? name.substr(0, name.size() - 5) : name;
    auto files = MakeTinyModel({.arch = "llama",
                                .preset = preset,
                                .seed = 1,
                                .weights_dtype = bf16 ? WeightsDtype::kBF16 : WeightsDtype::kF32});
    if (!files.ok()) std::abort();
    auto model = Transformer::Load(base::ModelSource::FromMemory(*files), {});
    if (!model.ok()) std::abort();
    slot = *std::move(model);
  }
  return *slot;
}

std::vector<int32_t> Tokens(int64_t n) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919) % 31000 + 3);
  return ids;
}

// Decode: one sequence, one token per step after a 32-token prompt.
void BM_Decode(benchmark::State& state, const std::string& preset) {
  compat::SetNumThreads(static_cast<int>(state.range(0)));
  Transformer& model = BenchModel(preset);
  const std::vector<int32_t> prompt = Tokens(32);
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
  Transformer& model = BenchModel(preset);
  const int64_t tokens = state.range(1);
  const std::vector<int32_t> prompt = Tokens(tokens);
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

BENCHMARK_CAPTURE(BM_Decode, bench_small, std::string("bench-small"))
    ->Arg(1)
    ->Arg(2)
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
    ->Arg(1)
    ->Arg(2)
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
    ->Arg(1)
    ->Arg(2)
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
    ->Arg(1)
    ->Arg(2)
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

BENCHMARK_MAIN();
