// kvserve_device_bench: decode and prefix speed of a bench preset on one device (cuda:N or the
// CPU), without the server: prefill and decode tokens/s per cache strategy, and the time to
// first token of a long shared prefix computed cold against copied from a snapshot. A plain
// timed program (medians over --repeats runs after one warm-up); used by scripts/gpu/.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/command_line.h"
#include "base/model_source.h"
#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/kv_cache.h"
#include "cache/snapshot.h"
#include "cache/torch_compat.h"
#include "model/device_check.h"
#include "model/generator.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"

namespace {

namespace c = kvserve::cache;
namespace m = kvserve::model;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Deterministic prompt ids below the vocabulary (as scripts/bench_prefix.sh makes them).
std::vector<int32_t> Ids(int64_t n, int64_t vocab, int salt) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < n; ++t) ids.push_back(static_cast<int32_t>((7 * t + 11 + salt) % vocab));
  return ids;
}

absl::StatusOr<std::unique_ptr<c::KvCache>> NewCache(const std::string& implementation,
                                                     const m::Transformer& model,
                                                     int64_t max_tokens) {
  absl::StatusOr<c::CacheSpec> spec = c::CacheSpec::Parse(implementation);
  if (!spec.ok()) return spec.status();
  if (spec->is_static()) spec->max_cache_len = max_tokens;
  return c::MakeCache(*spec, model.info().layer_specs);
}

absl::Status Run(const kvserve::base::CommandLine& cl) {
  const std::string device_flag = cl.GetString("device", "cuda:0");
  if (absl::Status s = m::CheckDeviceUsable(device_flag); !s.ok()) return s;
  const c10::Device device(device_flag);
  absl::StatusOr<int64_t> threads =
      cl.GetInt("threads", std::max(1u, std::thread::hardware_concurrency()));
  absl::StatusOr<int64_t> prompt_tokens = cl.GetInt("prompt-tokens", 512);
  absl::StatusOr<int64_t> new_tokens = cl.GetInt("new-tokens", 128);
  absl::StatusOr<int64_t> prefix_tokens = cl.GetInt("prefix-tokens", 2000);
  absl::StatusOr<int64_t> suffix_tokens = cl.GetInt("suffix-tokens", 32);
  absl::StatusOr<int64_t> repeats = cl.GetInt("repeats", 3);
  for (const absl::Status& s : {threads.status(), prompt_tokens.status(), new_tokens.status(),
                                prefix_tokens.status(), suffix_tokens.status(), repeats.status()}) {
    if (!s.ok()) return s;
  }
  kvserve::compat::SetNumThreads(static_cast<int>(*threads));

  const std::string dtype_name = cl.GetString("dtype", "float32");
  m::TransformerOptions options;
  options.device = device;
  m::WeightsDtype weights = m::WeightsDtype::kF32;
  if (dtype_name == "bfloat16") {
    options.dtype = at::kBFloat16;
    weights = m::WeightsDtype::kBF16;
  } else if (dtype_name == "float16") {
    options.dtype = at::kHalf;
    weights = m::WeightsDtype::kF16;
  } else if (dtype_name != "float32") {
    return absl::InvalidArgumentError("--dtype must be float32, bfloat16 or float16");
  }
  const std::string arch = cl.GetString("arch", "llama");
  const std::string preset = cl.GetString("preset", "bench-small");
  absl::StatusOr<m::ModelConfig> config = m::PresetConfig(arch, preset);
  if (!config.ok()) return config.status();
  auto files = m::MakeModelFiles(*config, 1, weights);
  if (!files.ok()) return files.status();
  auto model = m::Transformer::Load(kvserve::base::ModelSource::FromMemory(*files), options);
  if (!model.ok()) return model.status();
  const int64_t vocab = (*model)->info().vocab_size;
  std::printf("device %s (%s), %s %s, %s\n", device_flag.c_str(),
              kvserve::compat::BuildDescription().c_str(), arch.c_str(), preset.c_str(),
              dtype_name.c_str());

  // Decode: one prompt, then new_tokens greedy steps, per strategy.
  for (const std::string implementation : {"dynamic", "static", "offloaded"}) {
    std::vector<double> prefill_tps, decode_tps;
    for (int64_t r = 0; r <= *repeats; ++r) {
      auto cache = NewCache(implementation, **model, *prompt_tokens + *new_tokens);
      if (!cache.ok()) return cache.status();
      m::GenerateOptions gen;
      gen.max_new_tokens = *new_tokens;
      gen.ignore_eos = true;
      absl::StatusOr<m::GenerateResult> result =
          m::Generate(**model, Ids(*prompt_tokens, vocab, 0), cache->get(), gen);
      if (!result.ok()) return result.status();
      if (r == 0) continue;  // warm-up
      prefill_tps.push_back(result->prompt_tokens / (result->prefill_ms / 1000.0));
      decode_tps.push_back(result->decode_steps / (result->decode_ms / 1000.0));
    }
    std::printf(
        "decode   %-10s prompt %lld: prefill %8.0f tokens/s (%.0f-%.0f); decode %7.1f tokens/s "
        "(%.1f-%.1f)\n",
        implementation.c_str(), static_cast<long long>(*prompt_tokens), Median(prefill_tps),
        *std::min_element(prefill_tps.begin(), prefill_tps.end()),
        *std::max_element(prefill_tps.begin(), prefill_tps.end()), Median(decode_tps),
        *std::min_element(decode_tps.begin(), decode_tps.end()),
        *std::max_element(decode_tps.begin(), decode_tps.end()));
  }

  // Prefix: time to the first token of prefix + suffix, cold (one forward over everything)
  // against the prefix deep-copied from a snapshot and only the suffix computed.
  const std::vector<int32_t> prefix = Ids(*prefix_tokens, vocab, 0);
  const std::vector<int32_t> suffix = Ids(*suffix_tokens, vocab, 5);
  std::vector<int32_t> whole = prefix;
  whole.insert(whole.end(), suffix.begin(), suffix.end());
  auto capture = c::KvCache::CreateDynamic((*model)->info().layer_specs);
  if (!capture.ok()) return capture.status();
  m::Batch capture_batch;
  capture_batch.sequences.push_back({prefix, capture->get()});
  if (auto out = (*model)->Forward(capture_batch); !out.ok()) return out.status();
  auto snapshot = c::Snapshot::Capture(**capture, prefix, "bench");
  if (!snapshot.ok()) return snapshot.status();
  for (const std::string implementation : {"dynamic", "static"}) {
    std::vector<double> cold_ms, warm_ms;
    for (int64_t r = 0; r <= *repeats; ++r) {
      auto cold = NewCache(implementation, **model, static_cast<int64_t>(whole.size()) + 1);
      auto warm = NewCache(implementation, **model, static_cast<int64_t>(whole.size()) + 1);
      if (!cold.ok()) return cold.status();
      if (!warm.ok()) return warm.status();
      Clock::time_point t0 = Clock::now();
      m::Batch batch;
      batch.sequences.push_back({whole, cold->get()});
      if (auto out = (*model)->Forward(batch); !out.ok()) return out.status();
      const double cold_time = MsSince(t0);
      t0 = Clock::now();
      if (absl::Status s = (*snapshot)->LoadInto(warm->get(), *prefix_tokens); !s.ok()) return s;
      batch.sequences = {{suffix, warm->get()}};
      if (auto out = (*model)->Forward(batch); !out.ok()) return out.status();
      const double warm_time = MsSince(t0);
      if (r == 0) continue;  // warm-up
      cold_ms.push_back(cold_time);
      warm_ms.push_back(warm_time);
    }
    std::printf(
        "prefix   %-10s %lld + %lld tokens: TTFT cold %8.1f ms, from snapshot %7.1f ms "
        "(%.1fx)\n",
        implementation.c_str(), static_cast<long long>(*prefix_tokens),
        static_cast<long long>(*suffix_tokens), Median(cold_ms), Median(warm_ms),
        Median(cold_ms) / std::max(Median(warm_ms), 1e-9));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<kvserve::base::CommandLine> cl = kvserve::base::CommandLine::Parse(
      argc, argv,
      {{"device", "cuda:N or cpu", "cuda:0"},
       {"arch", "llama | mistral | qwen2 | qwen3 | phi3", "llama"},
       {"preset", "tiny | small | bench-small | bench-medium", "bench-small"},
       {"dtype", "float32 | bfloat16 | float16 (weights made in this dtype)", "float32"},
       {"threads", "CPU threads", "all cores"},
       {"prompt-tokens", "prompt length of the decode runs", "512"},
       {"new-tokens", "decode steps per run", "128"},
       {"prefix-tokens", "shared prefix length", "2000"},
       {"suffix-tokens", "request tokens after the prefix", "32"},
       {"repeats", "timed runs per measurement (after one warm-up)", "3"}});
  if (!cl.ok()) {
    std::cerr << "kvserve_device_bench: " << cl.status().message() << "\n";
    return 2;
  }
  if (cl->help_requested()) {
    std::cout << cl->Usage("kvserve_device_bench", "Decode and prefix speed on one device.");
    return 0;
  }
  if (absl::Status s = Run(*cl); !s.ok()) {
    std::cerr << "kvserve_device_bench: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
