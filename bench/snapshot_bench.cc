// kvserve_snapshot_bench: the deep copy of a prefix snapshot into a request's cache
// (Snapshot::LoadInto) against a plain memcpy of the same bytes, for bench-small's shape.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/dynamic_layer.h"
#include "cache/kv_cache.h"
#include "cache/snapshot.h"
#include "cache/torch_compat.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  namespace c = kvserve::cache;
  kvserve::compat::SetNumThreads(2);
  const int64_t layers = 8, kv_heads = 4, head_dim = 64;  // bench-small
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 2000;
  std::vector<std::unique_ptr<c::CacheLayer>> capture_layers;
  for (int64_t i = 0; i < layers; ++i)
    capture_layers.push_back(std::make_unique<c::DynamicLayer>());
  c::KvCache capture(std::move(capture_layers));
  for (int i = 0; i < layers; ++i) {
    (void)capture.Update(i, at::randn({1, kv_heads, tokens, head_dim}),
                         at::randn({1, kv_heads, tokens, head_dim}));
  }
  std::vector<int32_t> ids(tokens, 1);
  auto snapshot = *c::Snapshot::Capture(capture, ids, "bench");
  const std::vector<c::LayerSpec> specs(layers);
  const char* names[] = {"dynamic", "static", "offloaded", "offloaded_static", "quantized"};
  std::vector<char> source(snapshot->bytes()), target(snapshot->bytes());
  std::memset(source.data(), 1, source.size());
  std::vector<double> memcpy_ms;
  for (int r = 0; r < 15; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(target.data(), source.data(), source.size());
    memcpy_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double copy = Median(memcpy_ms);
  std::printf("snapshot: %lld tokens, %.1f MB; memcpy of the same bytes: %.2f ms\n",
              static_cast<long long>(tokens), snapshot->bytes() / 1e6, copy);
  for (const char* name : names) {
    c::CacheSpec spec = *c::CacheSpec::Parse(name);
    if (spec.is_static()) spec.max_cache_len = tokens + 64;
    std::vector<double> ms;
    for (int r = 0; r < 15; ++r) {
      auto cache = *c::MakeCache(spec, specs);
      const auto t0 = std::chrono::steady_clock::now();
      const absl::Status loaded = snapshot->LoadInto(cache.get(), tokens);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (!loaded.ok()) {
        std::printf("%s: %s\n", name, std::string(loaded.message()).c_str());
        break;
      }
    }
    std::printf("LoadInto %-16s %8.2f ms  (%.1fx memcpy)\n", name, Median(ms), Median(ms) / copy);
  }
  return 0;
}
