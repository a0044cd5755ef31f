// CUDA paths (ctest label gpu): every cache strategy generates on the GPU what recomputation
// without a cache generates, offloaded layers prefetch on a side stream without racing the
// compute stream, and a real CUDA out-of-memory error is recovered by converting the cache to
// its offloaded form. Each test skips, saying why, on builds without CUDA or without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/model_source.h"
#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/kv_cache.h"
#include "cache/torch_compat.h"
#include "model/generator.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"
#include "tests/model/tiny_models.h"

#if defined(KVSERVE_WITH_CUDA)
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace kvserve::model {
namespace {

using testing::MaxAbsDiff;
using testing::Prompt;

// Why the CUDA tests cannot run here, or "" when they can.
std::string WhyNoGpu() {
  if (!compat::kWithCuda) return "built without CUDA (" + compat::BuildDescription() + ")";
  const compat::CudaDevices devices = compat::VisibleCudaDevices();
  if (devices.count == 0) return "no usable CUDA device: " + devices.reason;
  return "";
}

#define SKIP_WITHOUT_GPU()                                \
  do {                                                    \
    if (const std::string why = WhyNoGpu(); !why.empty()) \
      GTEST_SKIP() << "needs a CUDA GPU: " << why;        \
  } while (0)

const c10::Device kCuda(c10::kCUDA, 0);

std::unique_ptr<Transformer> LoadOn(const std::string& arch, const std::string& preset,
                                    const c10::Device& device) {
  absl::StatusOr<ModelConfig> config = PresetConfig(arch, preset);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return nullptr;
  auto files = MakeModelFiles(*config, 7, WeightsDtype::kF32);
  EXPECT_TRUE(files.ok()) << files.status();
  if (!files.ok()) return nullptr;
  TransformerOptions options;
  options.device = device;
  auto model = Transformer::Load(base::ModelSource::FromMemory(*files), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// Generates with `implementation` ("" and use_cache=false: recompute every step).
absl::StatusOr<GenerateResult> GenerateWith(Transformer& model, const std::vector<int32_t>& prompt,
                                            const std::string& implementation,
                                            const cache::QuantizationConfig& config,
                                            const GenerateOptions& options, bool use_cache = true) {
  absl::StatusOr<cache::CacheSpec> spec =
      cache::CacheSpec::Parse(implementation, config, use_cache);
  if (!spec.ok()) return spec.status();
  if (spec->is_static()) {
    spec->max_cache_len = cache::StaticCacheLength(
        static_cast<int64_t>(prompt.size()) + options.max_new_tokens, spec->max_cache_len);
  }
  absl::StatusOr<std::unique_ptr<cache::KvCache>> kv =
      cache::MakeCache(*spec, model.info().layer_specs);
  if (!kv.ok()) return kv.status();
  return Generate(model, prompt, kv->get(), options);
}

struct StrategyCase {
  std::string arch;
  std::string implementation;  // as cache_implementation
  std::string cache_config;    // JSON for quantized
};

std::string CaseName(const ::testing::TestParamInfo<StrategyCase>& info) {
  std::string name = info.param.arch + "_" + info.param.implementation;
  if (info.param.cache_config.find("hqq") != std::string::npos) name += "_hqq";
  if (info.param.cache_config.find("fp8") != std::string::npos) name += "_fp8";
  return name;
}

class GpuCachedEqualsRecomputedTest : public ::testing::TestWithParam<StrategyCase> {};

// Exact strategies: the same tokens as recomputing the whole sequence every step, logits
// within float32 rounding. Quantized caches: the same first 8 tokens (as on the CPU).
TEST_P(GpuCachedEqualsRecomputedTest, SameTokensAsRecomputation) {
  SKIP_WITHOUT_GPU();
  const StrategyCase& c = GetParam();
  const bool quantized = c.implementation == "quantized";
  auto model = LoadOn(c.arch, quantized ? "small" : "tiny", kCuda);
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.max_new_tokens = quantized ? 8 : 20;
  options.ignore_eos = true;
  options.record_logits = !quantized;
  const std::vector<int32_t> prompt = Prompt(quantized ? 24 : 40);
  cache::QuantizationConfig config;
  if (!c.cache_config.empty()) {
    absl::StatusOr<cache::QuantizationConfig> parsed =
        cache::ParseQuantizationConfigJson(c.cache_config);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    config = *parsed;
  }
  auto recomputed = GenerateWith(*model, prompt, "", {}, options, /*use_cache=*/false);
  ASSERT_TRUE(recomputed.ok()) << recomputed.status();
  auto cached = GenerateWith(*model, prompt, c.implementation, config, options);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(cached->tokens, recomputed->tokens);
  ASSERT_EQ(cached->logits.size(), recomputed->logits.size());
  for (size_t i = 0; i < cached->logits.size(); ++i) {
    ASSERT_LE(MaxAbsDiff(cached->logits[i], recomputed->logits[i]), 1e-3) << "step " << i;
  }
}

std::vector<StrategyCase> AllStrategies() {
  std::vector<StrategyCase> cases;
  for (const char* arch : {"llama", "mistral", "qwen3"}) {
    for (const char* impl : {"dynamic", "static", "offloaded", "offloaded_static"}) {
      cases.push_back({arch, impl, ""});
    }
  }
  // Quantized caches refuse sliding layers (mistral), as the reference does.
  for (const char* arch : {"llama", "qwen3"}) {
    cases.push_back({arch, "quantized",
                     R"({"backend": "hqq", "nbits": 8, "axis_key": 1, "axis_value": 1,
                         "residual_length": 2})"});
    cases.push_back({arch, "quantized", R"({"backend": "fp8"})"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GpuCachedEqualsRecomputedTest,
                         ::testing::ValuesIn(AllStrategies()), CaseName);

// The GPU computes what the CPU computes (float32, greedy).
TEST(GpuModelTest, MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  auto gpu = LoadOn("llama", "tiny", kCuda);
  auto cpu = LoadOn("llama", "tiny", c10::Device(c10::kCPU));
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 8;
  options.ignore_eos = true;
  auto on_gpu = GenerateWith(*gpu, Prompt(16), "dynamic", {}, options);
  auto on_cpu = GenerateWith(*cpu, Prompt(16), "dynamic", {}, options);
  ASSERT_TRUE(on_gpu.ok() && on_cpu.ok());
  EXPECT_LE(MaxAbsDiff(on_gpu->prompt_logits, on_cpu->prompt_logits), 1e-3);
  EXPECT_EQ(on_gpu->tokens, on_cpu->tokens);
}

#if defined(KVSERVE_WITH_CUDA)

constexpr int kLayers = 6;
constexpr int64_t kHeads = 8, kHeadDim = 128;

std::unique_ptr<cache::KvCache> MakeFullAttentionCache(const std::string& implementation) {
  const std::vector<cache::LayerSpec> specs(kLayers);
  absl::StatusOr<cache::CacheSpec> spec = cache::CacheSpec::Parse(implementation);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto kv = cache::MakeCache(*spec, specs);
  EXPECT_TRUE(kv.ok()) << kv.status();
  return kv.ok() ? *std::move(kv) : nullptr;
}

// Offloaded layers live in pinned host memory between their updates; each one is brought
// back on a side stream (prefetched while the previous layer computes) and written back
// after its update. With the compute stream kept busy by a spin kernel before every update,
// a prefetch that did not wait for the earlier write-back, or an update that did not wait
// for its prefetch, reads stale or missing tokens; the views must equal a device-resident
// dynamic cache's, bit for bit, at every step.
TEST(GpuOffloadTest, SideStreamPrefetchMatchesDeviceResidentCache) {
  SKIP_WITHOUT_GPU();
  auto offloaded = MakeFullAttentionCache("offloaded");
  auto resident = MakeFullAttentionCache("dynamic");
  ASSERT_NE(offloaded, nullptr);
  ASSERT_NE(resident, nullptr);
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(0);
  at::manual_seed(3);
  const auto options = at::TensorOptions().dtype(at::kFloat).device(kCuda);
  for (int step = 0; step < 6; ++step) {
    const int64_t tokens = step == 0 ? 512 : 1;  // a prefill, then decode steps
    offloaded->PrepareForward();
    for (int layer = 0; layer < kLayers; ++layer) {
      const at::Tensor k = at::randn({1, kHeads, tokens, kHeadDim}, options);
      const at::Tensor v = at::randn({1, kHeads, tokens, kHeadDim}, options);
      at::cuda::sleep(2'000'000);  // about a millisecond of work queued on the compute stream
      absl::StatusOr<cache::LayerView> got = offloaded->Update(layer, k, v);
      ASSERT_TRUE(got.ok()) << got.status();
      absl::StatusOr<cache::LayerView> want = resident->Update(layer, k, v);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_TRUE(got->keys.is_cuda());
      ASSERT_EQ(got->num_valid, want->num_valid);
      const int64_t n = want->num_valid;
      EXPECT_TRUE(at::equal(got->keys.narrow(2, 0, n), want->keys.narrow(2, 0, n)))
          << "step " << step << " layer " << layer;
      EXPECT_TRUE(at::equal(got->values.narrow(2, 0, n), want->values.narrow(2, 0, n)))
          << "step " << step << " layer " << layer;
      EXPECT_EQ(c10::cuda::getCurrentCUDAStream(0), compute) << "the compute stream changed";
    }
  }
  // Between forwards every layer's storage is on the host, pinned for asynchronous copies.
  for (int layer = 0; layer < kLayers; ++layer) {
    int tensors = 0;
    offloaded->layer(layer).ForEachTensor([&](at::Tensor& t) {
      ++tensors;
      EXPECT_TRUE(t.device().is_cpu()) << "layer " << layer;
      EXPECT_TRUE(t.is_pinned()) << "layer " << layer;
    });
    EXPECT_GT(tensors, 0) << "layer " << layer;
  }
  EXPECT_EQ(offloaded->Memory().device_bytes, 0);
}

// Holds nearly all free device memory, then gives `keep_bytes` of it back.
class DeviceBallast {
 public:
  explicit DeviceBallast(int64_t keep_bytes) {
    const auto options = at::TensorOptions().dtype(at::kByte).device(kCuda);
    for (int64_t chunk = int64_t{1} << 30; chunk >= (int64_t{16} << 20); chunk /= 2) {
      while (true) {
        try {
          held_.push_back(at::empty({chunk}, options));
        } catch (const compat::OutOfMemoryError&) {
          break;
        }
      }
    }
    // Free chunks (16 MiB each at the end of the list) until `keep_bytes` are available.
    int64_t freed = 0;
    while (freed < keep_bytes && !held_.empty()) {
      freed += held_.back().numel();
      held_.pop_back();
    }
    compat::EmptyDeviceCache();
  }
  ~DeviceBallast() {
    held_.clear();
    compat::EmptyDeviceCache();
  }

 private:
  std::vector<at::Tensor> held_;
};

// A dynamic cache grows until the CUDA caching allocator itself runs out of memory; as the
// engine does, the step is rolled back, the cache converted to its offloaded form (same
// contents, host-resident), the allocator emptied and the step retried, which then fits
// because only one or two layers are on the device at a time. The contents equal a host
// copy of everything written.
TEST(GpuOutOfMemoryTest, RealCudaOomIsRecoveredByOffloading) {
  SKIP_WITHOUT_GPU();
  auto cache = MakeFullAttentionCache("dynamic");
  ASSERT_NE(cache, nullptr);
  // 256 tokens a step: 1 MiB of keys and 1 MiB of values per layer, 12 MiB a step. A dynamic
  // layer grows by concatenation (old and new copy at once), so 160 MiB of free memory runs
  // out after about ten steps; offloaded, only the layer being updated and the one being
  // prefetched are on the device.
  const int64_t tokens_per_step = 256;
  std::vector<std::vector<at::Tensor>> written_k(kLayers), written_v(kLayers);
  bool converted = false;
  int steps_after_conversion = 0;
  {
    DeviceBallast ballast(/*keep_bytes=*/int64_t{160} << 20);
    at::manual_seed(5);
    for (int step = 0; step < 40 && steps_after_conversion < 3; ++step) {
      // Made on the host and copied in layer by layer inside the step, so that an allocation
      // failing for the inputs is handled like one failing for the cache.
      std::vector<at::Tensor> ks, vs;
      for (int layer = 0; layer < kLayers; ++layer) {
        ks.push_back(at::randn({1, kHeads, tokens_per_step, kHeadDim}));
        vs.push_back(at::randn({1, kHeads, tokens_per_step, kHeadDim}));
      }
      bool done = false;
      for (int attempt = 0; attempt < 2 && !done; ++attempt) {
        cache->BeginStep();
        try {
          cache->PrepareForward();
          for (int layer = 0; layer < kLayers; ++layer) {
            absl::StatusOr<cache::LayerView> view =
                cache->Update(layer, ks[layer].to(kCuda), vs[layer].to(kCuda));
            ASSERT_TRUE(view.ok()) << view.status();
          }
          cache->CommitStep();
          done = true;
        } catch (const compat::OutOfMemoryError& e) {
          ASSERT_FALSE(converted) << "out of memory again after offloading: " << e.what();
          ASSERT_TRUE(cache->RollbackStep().ok());
          compat::EmptyDeviceCache();
          EXPECT_GT(cache->ConvertToOffloaded(), 0);
          compat::EmptyDeviceCache();
          converted = true;
        }
      }
      ASSERT_TRUE(done) << "step " << step;
      if (converted) ++steps_after_conversion;
      for (int layer = 0; layer < kLayers; ++layer) {
        written_k[layer].push_back(ks[layer]);
        written_v[layer].push_back(vs[layer]);
      }
    }
  }
  ASSERT_TRUE(converted) << "the device never ran out of memory; nothing was tested";
  EXPECT_TRUE(cache->fully_offloaded());
  EXPECT_EQ(cache->Memory().device_bytes, 0);
  // One more (tiny) step returns every layer's full contents.
  const auto options = at::TensorOptions().dtype(at::kFloat).device(kCuda);
  cache->PrepareForward();
  for (int layer = 0; layer < kLayers; ++layer) {
    const at::Tensor k = at::zeros({1, kHeads, 1, kHeadDim}, options);
    absl::StatusOr<cache::LayerView> view = cache->Update(layer, k, k);
    ASSERT_TRUE(view.ok()) << view.status();
    const int64_t n = view->num_valid - 1;
    EXPECT_TRUE(at::equal(view->keys.narrow(2, 0, n).cpu(), at::cat(written_k[layer], 2)))
        << "layer " << layer;
    EXPECT_TRUE(at::equal(view->values.narrow(2, 0, n).cpu(), at::cat(written_v[layer], 2)))
        << "layer " << layer;
  }
}

#endif  // KVSERVE_WITH_CUDA

}  // namespace
}  // namespace kvserve::model
