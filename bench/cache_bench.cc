// Cache strategy benchmarks: bytes held at a 4096-token context (bench-small shapes),
// quantization throughput, and decode speed of the bench-small model per strategy.
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/model_source.h"
#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/fp8_codec.h"
#include "cache/hqq_quantizer.h"
#include "cache/quanto_quantizer.h"
#include "model/generator.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"

namespace kvserve {
namespace {

// bench-small's cache shapes: 8 layers, 4 kv heads, head_dim 64, float32.
constexpr int kLayers = 8;
constexpr int64_t kKvHeads = 4;
constexpr int64_t kHeadDim = 64;
constexpr int64_t kContext = 4096;
// The context is a prefill followed by this many single-token decode steps, so that
// strategies with a residual hold what they hold mid-generation.
constexpr int64_t kDecodeSteps = 64;

struct Strategy {
  const char* name;
  const char* implementation;
  const char* cache_config;  // JSON, or empty
};

const std::vector<Strategy>& Strategies() {
  static const std::vector<Strategy> strategies = {
      {"dynamic", "dynamic", ""},
      {"static", "static", ""},
      {"offloaded", "offloaded", ""},
      {"offloaded_static", "offloaded_static", ""},
      {"quanto_int4", "quantized", R"({"backend": "quanto", "nbits": 4})"},
      {"quanto_int2", "quantized", R"({"backend": "quanto", "nbits": 2})"},
      {"hqq_int4", "quantized", R"({"backend": "hqq", "nbits": 4, "axis_key": 1,
                                    "axis_value": 1})"},
      {"hqq_int8", "quantized", R"({"backend": "hqq", "nbits": 8, "axis_key": 1,
                                    "axis_value": 1})"},
      {"fp8", "quantized", R"({"backend": "fp8"})"},
  };
  return strategies;
}

cache::CacheSpec SpecFor(const Strategy& s, int64_t max_cache_len) {
  cache::QuantizationConfig config;
  if (*s.cache_config) config = *cache::ParseQuantizationConfigJson(s.cache_config);
  cache::CacheSpec spec = *cache::CacheSpec::Parse(s.implementation, config);
  if (spec.is_static()) spec.max_cache_len = max_cache_len;
  return spec;
}

// Fills a cache for the bench-small layer shapes to kContext tokens of random K/V.
cache::MemoryUsage FillAndMeasure(const Strategy& s) {
  std::unique_ptr<cache::KvCache> kv =
      std::move(*cache::MakeCache(SpecFor(s, kContext), std::vector<cache::LayerSpec>(kLayers)));
  const int64_t prefill = kContext - kDecodeSteps;
  for (int64_t step = 0; step <= kDecodeSteps; ++step) {
    const int64_t n = step == 0 ? prefill : 1;
    kv->PrepareForward();
    for (int l = 0; l < kLayers; ++l) {
      const at::Tensor k = at::randn({1, kKvHeads, n, kHeadDim});
      const at::Tensor v = at::randn({1, kKvHeads, n, kHeadDim});
      if (!kv->Update(l, k, v).ok()) std::abort();
    }
  }
  return kv->Memory();
}

void BM_BytesAt4096(benchmark::State& state) {
  const Strategy& s = Strategies()[state.range(0)];
  static const int64_t dynamic_bytes = FillAndMeasure(Strategies()[0]).total();
  cache::MemoryUsage m;
  for (auto _ : state) m = FillAndMeasure(s);
  state.SetLabel(s.name);
  state.counters["device_bytes"] = static_cast<double>(m.device_bytes);
  state.counters["host_bytes"] = static_cast<double>(m.host_bytes);
  state.counters["ratio_to_dynamic"] =
      static_cast<double>(m.total()) / static_cast<double>(dynamic_bytes);
}
BENCHMARK(BM_BytesAt4096)->DenseRange(0, 8)->Iterations(1)->Unit(benchmark::kMillisecond);

// Quantizing one layer's keys at the full context: [1, 4, 4096, 64] float32 (4 MiB).
void BM_Quantize(benchmark::State& state) {
  const int backend = static_cast<int>(state.range(0));
  const int nbits = static_cast<int>(state.range(1));
  const at::Tensor x = at::randn({1, kKvHeads, kContext, kHeadDim});
  std::unique_ptr<cache::Quantizer> q;
  if (backend == 0) q = std::make_unique<cache::QuantoQuantizer>(nbits, 0, 64);
  if (backend == 1) q = std::make_unique<cache::HqqQuantizer>(nbits, 1, 64);
  for (auto _ : state) {
    if (q) {
      benchmark::DoNotOptimize(q->Quantize(x)->packed_bytes());
    } else {
      benchmark::DoNotOptimize(cache::ToFp8Storage(x / 0.01).data_ptr());
    }
  }
  state.SetLabel(backend == 0 ? "quanto" : backend == 1 ? "hqq" : "fp8");
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.nbytes()));
}
BENCHMARK(BM_Quantize)
    ->Args({0, 2})
    ->Args({0, 4})
    ->Args({1, 2})
    ->Args({1, 4})
    ->Args({1, 8})
    ->Args({2, 8})
    ->Unit(benchmark::kMillisecond);

void BM_Dequantize(benchmark::State& state) {
  const int nbits = static_cast<int>(state.range(0));
  const at::Tensor x = at::randn({1, kKvHeads, kContext, kHeadDim});
  const cache::QuantizedTensor q = *cache::QuantoQuantizer(nbits, 0, 64).Quantize(x);
  for (auto _ : state) benchmark::DoNotOptimize(q.Dequantize().data_ptr());
  state.SetLabel("quanto");
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.nbytes()));
}
BENCHMARK(BM_Dequantize)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond);

// Decode speed of the bench-small llama with each strategy: a kDecodePrompt-token prompt,
// then kDecodeTokens greedy steps; the time counted is the decode steps only.
constexpr int kDecodePrompt = 512;
constexpr int kDecodeTokens = 32;

model::Transformer& BenchModel() {
  static std::unique_ptr<model::Transformer> m = [] {
    auto files = model::MakeTinyModel({.arch = "llama", .preset = "bench-small", .seed = 1});
    return std::move(*model::Transformer::Load(base::ModelSource::FromMemory(*files), {}));
  }();
  return *m;
}

void BM_Decode(benchmark::State& state) {
  const Strategy& s = Strategies()[state.range(0)];
  model::Transformer& m = BenchModel();
  std::vector<int32_t> prompt;
  for (int i = 0; i < kDecodePrompt; ++i) prompt.push_back((i * 37 + 11) % 30000 + 3);
  model::GenerateOptions options;
  options.max_new_tokens = kDecodeTokens + 1;
  options.ignore_eos = true;
  int64_t steps = 0;
  double seconds = 0;
  for (auto _ : state) {
    std::unique_ptr<cache::KvCache> kv = std::move(
        *cache::MakeCache(SpecFor(s, kDecodePrompt + kDecodeTokens + 1), m.info().layer_specs));
    auto result = model::Generate(m, prompt, kv.get(), options);
    if (!result.ok()) {
      state.SkipWithError(std::string(result.status().message()).c_str());
      return;
    }
    state.SetIterationTime(result->decode_ms / 1000);
    steps += result->decode_steps;
    seconds += result->decode_ms / 1000;
  }
  state.SetLabel(s.name);
  state.counters["decode_tokens_per_s"] = static_cast<double>(steps) / seconds;
}
BENCHMARK(BM_Decode)->DenseRange(0, 8)->Iterations(2)->UseManualTime()->Unit(
    benchmark::kMillisecond);

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
