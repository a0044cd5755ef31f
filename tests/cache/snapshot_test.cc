// Tests for Snapshot: capture from a dynamic cache, loading into every cache strategy (equal
// to a direct prefill of the same tokens), isolation from the caches, and refusals.
#include "cache/snapshot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cache/cache_factory.h"
#include "cache/cross_attention_state.h"
#include "cache/dynamic_layer.h"
#include "cache/fp8_layer.h"
#include "cache/kv_cache.h"
#include "cache/quantized_layer.h"

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kHeads = 2;
constexpr int64_t kDim = 4;
constexpr int64_t kPrefix = 6;

// Synthetic K/V of layer `layer` for tokens [0, n): [1, kHeads, n, kDim], distinct per layer,
// per token and between keys and values, and irregular enough that quantization is lossy.
at::Tensor Kv(int layer, int64_t n, bool values) {
  const at::Tensor token = at::arange(n, at::kFloat).view({1, 1, n, 1});
  const at::Tensor head = at::arange(kHeads, at::kFloat).view({1, kHeads, 1, 1});
  const at::Tensor dim = at::arange(kDim, at::kFloat).view({1, 1, 1, kDim});
  // Token t's elements do not depend on n, so Kv(l, n) starts with Kv(l, m) for m < n.
  return (at::sin(token * 0.7 + head * 1.9 + dim * 1.3 + layer * 5 + (values ? 11 : 0)) * 3)
      .contiguous();
}

// A capture cache as the engine builds it: every layer a plain DynamicLayer, prefilled with
// `n` tokens in one update.
std::unique_ptr<KvCache> CaptureCache(int num_layers, int64_t n) {
  std::vector<std::unique_ptr<CacheLayer>> layers;
  for (int i = 0; i < num_layers; ++i) layers.push_back(std::make_unique<DynamicLayer>());
  auto cache = std::make_unique<KvCache>(std::move(layers));
  for (int i = 0; i < num_layers; ++i) {
    EXPECT_TRUE(cache->Update(i, Kv(i, n, false), Kv(i, n, true)).ok());
  }
  return cache;
}

std::vector<int32_t> TokenIds(int64_t n) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(100 + i));
  return ids;
}

std::shared_ptr<const Snapshot> MakeSnapshot(int num_layers, int64_t n = kPrefix) {
  std::unique_ptr<KvCache> capture = CaptureCache(num_layers, n);
  absl::StatusOr<std::shared_ptr<const Snapshot>> snapshot =
      Snapshot::Capture(*capture, TokenIds(n), "model-a");
  EXPECT_TRUE(snapshot.ok()) << snapshot.status();
  return snapshot.ok() ? *snapshot : nullptr;
}

// Every tensor the cache's layers store (for offloaded layers, the wrapped layer's storage).
std::vector<at::Tensor> StoredTensors(KvCache& cache) {
  std::vector<at::Tensor> out;
  for (int i = 0; i < cache.num_layers(); ++i) {
    EXPECT_TRUE(cache.layer(i).ForEachTensor([&](at::Tensor& t) { out.push_back(t); }));
  }
  return out;
}

TEST(SnapshotTest, CaptureCopiesEveryLayer) {
  std::unique_ptr<KvCache> capture = CaptureCache(2, kPrefix);
  absl::StatusOr<std::shared_ptr<const Snapshot>> captured =
      Snapshot::Capture(*capture, TokenIds(kPrefix), "model-a");
  ASSERT_TRUE(captured.ok()) << captured.status();
  const Snapshot& s = **captured;
  EXPECT_EQ(s.num_tokens(), kPrefix);
  EXPECT_THAT(s.token_ids(), ElementsAre(100, 101, 102, 103, 104, 105));
  EXPECT_EQ(s.fingerprint(), "model-a");
  EXPECT_EQ(s.num_layers(), 2);
  // 2 layers x (keys + values) x 2 heads x 6 tokens x 4 dims x 4 bytes: no spare capacity.
  EXPECT_EQ(s.bytes(), 2 * 2 * 2 * 6 * 4 * 4);
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(s.keys(i).sizes(), ElementsAre(1, kHeads, kPrefix, kDim));
    EXPECT_TRUE(s.keys(i).is_contiguous());
    EXPECT_TRUE(s.values(i).is_contiguous());
    EXPECT_TRUE(at::equal(s.keys(i), Kv(i, kPrefix, false)));
    EXPECT_TRUE(at::equal(s.values(i), Kv(i, kPrefix, true)));
    EXPECT_EQ(s.keys(i).device(), at::Device(at::kCPU));
  }
  // Writing to the capture cache afterwards leaves the snapshot as it was.
  for (at::Tensor& t : StoredTensors(*capture)) t.fill_(-1);
  ASSERT_TRUE(capture->Update(0, Kv(0, 1, false), Kv(0, 1, true)).ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(at::equal(s.keys(i), Kv(i, kPrefix, false)));
    EXPECT_TRUE(at::equal(s.values(i), Kv(i, kPrefix, true)));
  }
}

// An encoder-decoder capture keeps the cache's cross-attention state (shared, not copied) and
// names its encoder input as its content; a decoder-only one names its tokens.
TEST(SnapshotTest, CaptureKeepsAnEncoderDecoderCrossState) {
  EXPECT_EQ(MakeSnapshot(2)->cross_attention(), nullptr);
  EXPECT_EQ(MakeSnapshot(2)->content_ids(), TokenIds(kPrefix));
  std::unique_ptr<KvCache> capture = CaptureCache(2, kPrefix);
  auto state = std::make_shared<CrossAttentionState>();
  state->encoder_ids = {7, 8, 9};
  capture->set_cross_attention(state);
  absl::StatusOr<std::shared_ptr<const Snapshot>> snapshot =
      Snapshot::Capture(*capture, TokenIds(kPrefix), "fingerprint");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ((*snapshot)->cross_attention().get(), state.get());
  EXPECT_THAT((*snapshot)->content_ids(), ElementsAre(7, 8, 9));
  EXPECT_EQ((*snapshot)->num_tokens(), kPrefix);
  EXPECT_EQ(capture->Clone()->cross_attention().get(), state.get());
  capture->Reset();
  EXPECT_EQ(capture->cross_attention(), nullptr);
}

TEST(SnapshotTest, CaptureRefusesWhatIsNotAFullDynamicCapture) {
  // A sliding layer (here DynamicSlidingWindowLayer) may have dropped tokens.
  auto sliding = *KvCache::CreateDynamic({{}, {LayerType::kSlidingAttention, 4}});
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(sliding->Update(i, Kv(i, 3, false), Kv(i, 3, true)).ok());
  absl::StatusOr<std::shared_ptr<const Snapshot>> s =
      Snapshot::Capture(*sliding, TokenIds(3), "model-a");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("layer 1 of the capture cache is not a DynamicLayer"));

  std::unique_ptr<KvCache> capture = CaptureCache(2, kPrefix);
  s = Snapshot::Capture(*capture, TokenIds(5), "model-a");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("layer 0 of the capture cache holds 6 tokens but 5"));

  s = Snapshot::Capture(*capture, {}, "model-a");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);

  KvCache no_layers({});
  s = Snapshot::Capture(no_layers, TokenIds(1), "model-a");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);

  auto batch2 = *KvCache::CreateDynamic({{}});
  const at::Tensor k = at::zeros({2, kHeads, 3, kDim});
  ASSERT_TRUE(batch2->Update(0, k, k).ok());
  s = Snapshot::Capture(*batch2, TokenIds(3), "model-a");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("batch 2"));
}

// One strategy and model shape for the load-equivalence test.
struct LoadCase {
  std::string name;
  std::string implementation;
  QuantizationConfig config;
  std::vector<LayerSpec> layers;
};

// Names the case in gtest's failure messages.
void PrintTo(const LoadCase& c, std::ostream* os) { *os << c.name; }

std::unique_ptr<KvCache> MakeFor(const LoadCase& c) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse(c.implementation, c.config, true, 16);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<KvCache>> cache = MakeCache(*spec, c.layers);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(*cache) : nullptr;
}

class SnapshotLoadTest : public ::testing::TestWithParam<LoadCase> {};

// Loading n tokens from the snapshot leaves the cache exactly as one direct update of those n
// tokens leaves a fresh cache of the same strategy: same length and memory, and the next two
// single-token updates return identical views. A layer whose contents depend on how updates
// are split (quantized) holds the prefix staged until its first update, which then gets prefix
// and token together: the direct cache gets those n + 1 tokens in one update too.
TEST_P(SnapshotLoadTest, LoadEqualsOneDirectUpdate) {
  const LoadCase& c = GetParam();
  const int num_layers = static_cast<int>(c.layers.size());
  std::shared_ptr<const Snapshot> snapshot = MakeSnapshot(num_layers);
  ASSERT_NE(snapshot, nullptr);
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{5}, kPrefix}) {
    SCOPED_TRACE("num_tokens " + std::to_string(n));
    std::unique_ptr<KvCache> loaded = MakeFor(c);
    std::unique_ptr<KvCache> direct = MakeFor(c);
    ASSERT_NE(loaded, nullptr);
    ASSERT_TRUE(snapshot->LoadInto(loaded.get(), n).ok());
    const bool staged = loaded->layer(0).ContentsDependOnUpdateSplit();
    auto prefix = [&](int i, bool values) {
      return Kv(i, kPrefix, values).narrow(2, 0, n).contiguous();
    };
    if (staged) {
      EXPECT_EQ(loaded->Memory().total(), 0);
      for (int i = 0; i < num_layers; ++i) EXPECT_EQ(loaded->layer(i).SeqLength(), 0);
    } else {
      for (int i = 0; i < num_layers; ++i) {
        ASSERT_TRUE(direct->Update(i, prefix(i, false), prefix(i, true)).ok());
      }
      EXPECT_EQ(direct->SeqLength(), n);
      EXPECT_EQ(loaded->Memory(), direct->Memory());
    }
    EXPECT_EQ(loaded->SeqLength(), n);
    for (int step = 0; step < 2; ++step) {
      for (int i = 0; i < num_layers; ++i) {
        SCOPED_TRACE("step " + std::to_string(step) + " layer " + std::to_string(i));
        const at::Tensor k = Kv(i + 7, 1, false) + step;
        const at::Tensor v = Kv(i + 7, 1, true) - step;
        absl::StatusOr<LayerView> a = loaded->Update(i, k, v);
        absl::StatusOr<LayerView> b = staged && step == 0
                                          ? direct->Update(i, at::cat({prefix(i, false), k}, 2),
                                                           at::cat({prefix(i, true), v}, 2))
                                          : direct->Update(i, k, v);
        ASSERT_TRUE(a.ok()) << a.status();
        ASSERT_TRUE(b.ok()) << b.status();
        EXPECT_EQ(a->kv_offset, b->kv_offset);
        EXPECT_EQ(a->num_valid, b->num_valid);
        EXPECT_TRUE(at::equal(a->keys, b->keys));
        EXPECT_TRUE(at::equal(a->values, b->values));
      }
      EXPECT_EQ(loaded->SeqLength(), n + step + 1);
      EXPECT_EQ(loaded->Memory(), direct->Memory());
    }
  }
}

// The loaded cache shares no storage with the snapshot: overwriting all of it changes nothing
// in the snapshot, and a second load still gives the original tokens. (A staged prefix is held
// as views until the layer's first update, which copies it into the layer's own storage.)
TEST_P(SnapshotLoadTest, LoadedCacheSharesNothingWithTheSnapshot) {
  const LoadCase& c = GetParam();
  const int num_layers = static_cast<int>(c.layers.size());
  std::shared_ptr<const Snapshot> snapshot = MakeSnapshot(num_layers);
  ASSERT_NE(snapshot, nullptr);
  for (int64_t n : {int64_t{3}, kPrefix}) {
    std::unique_ptr<KvCache> loaded = MakeFor(c);
    ASSERT_TRUE(snapshot->LoadInto(loaded.get(), n).ok());
    if (loaded->layer(0).ContentsDependOnUpdateSplit()) {
      for (int i = 0; i < num_layers; ++i) {
        ASSERT_TRUE(loaded->Update(i, Kv(i + 7, 1, false), Kv(i + 7, 1, true)).ok());
      }
    }
    std::vector<at::Tensor> stored = StoredTensors(*loaded);
    ASSERT_FALSE(stored.empty());
    for (at::Tensor& t : stored) {
      for (int i = 0; i < num_layers; ++i) {
        EXPECT_FALSE(t.is_alias_of(snapshot->keys(i)));
        EXPECT_FALSE(t.is_alias_of(snapshot->values(i)));
      }
      t.fill_(0);
    }
    for (int i = 0; i < num_layers; ++i) {
      EXPECT_TRUE(at::equal(snapshot->keys(i), Kv(i, kPrefix, false)));
      EXPECT_TRUE(at::equal(snapshot->values(i), Kv(i, kPrefix, true)));
    }
  }
}

const std::vector<LayerSpec> kFull = {{}, {}};
// Sliding window 4 is shorter than the 6-token prefix; window 8 is longer.
const std::vector<LayerSpec> kShortWindow = {
    {}, {LayerType::kSlidingAttention, 4}, {LayerType::kChunkedAttention, 4}};
const std::vector<LayerSpec> kLongWindow = {{}, {LayerType::kSlidingAttention, 8}};

LoadCase Case(std::string name, std::string implementation, std::vector<LayerSpec> layers) {
  LoadCase c;
  c.name = std::move(name);
  c.implementation = std::move(implementation);
  c.layers = std::move(layers);
  return c;
}

// A quantized case; residual_length 2 makes the two updates after the load append to the
// residual and then flush it.
LoadCase Quantized(std::string name, std::string backend, std::optional<int64_t> nbits,
                   std::optional<int64_t> axis, std::optional<int64_t> q_group_size) {
  LoadCase c = Case(std::move(name), "quantized", kFull);
  c.config.backend = std::move(backend);
  c.config.nbits = nbits;
  c.config.axis_key = axis;
  c.config.axis_value = axis;
  c.config.q_group_size = q_group_size;
  if (c.config.backend != "fp8") c.config.residual_length = 2;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, SnapshotLoadTest,
    ::testing::Values(Case("dynamic", "dynamic", kFull), Case("static", "static", kFull),
                      Case("offloaded", "offloaded", kFull),
                      Case("offloaded_static", "offloaded_static", kFull),
                      Quantized("quanto", "quanto", 4, 0, std::nullopt),
                      Quantized("quanto_per_channel", "quanto", 2, -1, 2),
                      Quantized("hqq", "hqq", 4, 0, 2), Quantized("hqq_axis1", "hqq", 3, 1, 2),
                      Quantized("fp8", "fp8", std::nullopt, std::nullopt, std::nullopt),
                      Case("dynamic_short_window", "dynamic", kShortWindow),
                      Case("static_short_window", "static", kShortWindow),
                      Case("offloaded_short_window", "offloaded", kShortWindow),
                      Case("offloaded_static_short_window", "offloaded_static", kShortWindow),
                      Case("dynamic_long_window", "dynamic", kLongWindow),
                      Case("static_long_window", "static", kLongWindow),
                      Case("offloaded_long_window", "offloaded", kLongWindow),
                      Case("offloaded_static_long_window", "offloaded_static", kLongWindow)),
    [](const ::testing::TestParamInfo<LoadCase>& info) { return info.param.name; });

class QuantizedReuseTest : public ::testing::TestWithParam<LoadCase> {};

// What a quantized layer stores, exactly: codes, scales and zeros of both stores (a residual
// only once it holds tokens), or an fp8 layer's scales; its stored tokens show in the views.
void ExpectSameState(CacheLayer& a, CacheLayer& b) {
  EXPECT_EQ(a.SeqLength(), b.SeqLength());
  EXPECT_EQ(a.Memory(), b.Memory());
  if (auto* qa = dynamic_cast<QuantizedLayer*>(&a)) {
    auto* qb = dynamic_cast<QuantizedLayer*>(&b);
    ASSERT_NE(qb, nullptr);
    EXPECT_EQ(qa->num_quantized_tokens(), qb->num_quantized_tokens());
    EXPECT_EQ(qa->num_residual_tokens(), qb->num_residual_tokens());
    std::vector<at::Tensor> ta;
    std::vector<at::Tensor> tb;
    // The residual's storage has spare columns; compare its live tokens (below) instead.
    if (qa->num_residual_tokens() == 0) {
      qa->ForEachTensor([&](at::Tensor& t) { ta.push_back(t); });
      qb->ForEachTensor([&](at::Tensor& t) { tb.push_back(t); });
    }
    ASSERT_EQ(ta.size(), tb.size());
    for (size_t i = 0; i < ta.size(); ++i) EXPECT_TRUE(at::equal(ta[i], tb[i])) << "tensor " << i;
    EXPECT_TRUE(at::equal(qa->quantized_keys().Codes(), qb->quantized_keys().Codes()));
    EXPECT_TRUE(at::equal(qa->quantized_values().Codes(), qb->quantized_values().Codes()));
    EXPECT_TRUE(at::equal(qa->quantized_keys().Dequantize(), qb->quantized_keys().Dequantize()));
    EXPECT_TRUE(
        at::equal(qa->quantized_values().Dequantize(), qb->quantized_values().Dequantize()));
    return;
  }
  auto* fa = dynamic_cast<Fp8Layer*>(&a);
  auto* fb = dynamic_cast<Fp8Layer*>(&b);
  ASSERT_NE(fa, nullptr);
  ASSERT_NE(fb, nullptr);
  EXPECT_EQ(fa->key_scale(), fb->key_scale());
  EXPECT_EQ(fa->value_scale(), fb->value_scale());
}

// Reuse is invisible for quantized strategies: a cache that gets a snapshot's first P tokens
// (LoadInto) and then the suffix S in one update holds exactly the state, and returns exactly
// the view, of a cold cache given all P + S tokens in one update; so do the steps after it.
// (Were the prefix quantized alone at load, the suffix would go to the residual instead.)
TEST_P(QuantizedReuseTest, ReuseEqualsAColdPrefill) {
  constexpr int64_t kP = 5;
  constexpr int64_t kS = 3;
  const LoadCase& c = GetParam();
  const int num_layers = static_cast<int>(c.layers.size());
  // Cut from one tensor per layer, so that prefix and suffix are bitwise the cold prompt's.
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  for (int i = 0; i < num_layers; ++i) {
    keys.push_back(Kv(i, kP + kS, false));
    values.push_back(Kv(i, kP + kS, true));
  }
  std::vector<std::unique_ptr<CacheLayer>> capture_layers;
  for (int i = 0; i < num_layers; ++i) capture_layers.push_back(std::make_unique<DynamicLayer>());
  KvCache capture(std::move(capture_layers));
  for (int i = 0; i < num_layers; ++i) {
    ASSERT_TRUE(capture
                    .Update(i, keys[i].narrow(2, 0, kP).contiguous(),
                            values[i].narrow(2, 0, kP).contiguous())
                    .ok());
  }
  absl::StatusOr<std::shared_ptr<const Snapshot>> snapshot =
      Snapshot::Capture(capture, TokenIds(kP), "model-a");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();

  std::unique_ptr<KvCache> reused = MakeFor(c);
  std::unique_ptr<KvCache> cold = MakeFor(c);
  ASSERT_NE(reused, nullptr);
  ASSERT_NE(cold, nullptr);
  ASSERT_TRUE((*snapshot)->LoadInto(reused.get(), kP).ok());
  EXPECT_EQ(reused->SeqLength(), kP);
  for (int i = 0; i < num_layers; ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    absl::StatusOr<LayerView> a = reused->Update(i, keys[i].narrow(2, kP, kS).contiguous(),
                                                 values[i].narrow(2, kP, kS).contiguous());
    absl::StatusOr<LayerView> b = cold->Update(i, keys[i], values[i]);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->kv_offset, b->kv_offset);
    EXPECT_EQ(a->num_valid, b->num_valid);
    EXPECT_TRUE(at::equal(a->keys, b->keys));
    EXPECT_TRUE(at::equal(a->values, b->values));
    ExpectSameState(reused->layer(i), cold->layer(i));
  }
  EXPECT_EQ(reused->SeqLength(), kP + kS);
  EXPECT_EQ(reused->Memory(), cold->Memory());
  // Decode steps (with residual_length 2, the second flushes the residual).
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < num_layers; ++i) {
      SCOPED_TRACE("step " + std::to_string(step) + " layer " + std::to_string(i));
      const at::Tensor k = Kv(i + 7, 1, false) + step;
      const at::Tensor v = Kv(i + 7, 1, true) - step;
      absl::StatusOr<LayerView> a = reused->Update(i, k, v);
      absl::StatusOr<LayerView> b = cold->Update(i, k, v);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_TRUE(at::equal(a->keys, b->keys));
      EXPECT_TRUE(at::equal(a->values, b->values));
      ExpectSameState(reused->layer(i), cold->layer(i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, QuantizedReuseTest,
    ::testing::Values(Quantized("quanto_int4", "quanto", 4, 0, std::nullopt),
                      Quantized("quanto_int2", "quanto", 2, -1, 2),
                      Quantized("hqq", "hqq", 4, 0, 2),
                      Quantized("fp8", "fp8", std::nullopt, std::nullopt, std::nullopt)),
    [](const ::testing::TestParamInfo<LoadCase>& info) { return info.param.name; });

TEST(SnapshotTest, SlidingLayerKeepsItsWindowAfterALoad) {
  std::shared_ptr<const Snapshot> snapshot = MakeSnapshot(2);
  auto cache = *MakeCache(*CacheSpec::Parse("dynamic"), {{}, {LayerType::kSlidingAttention, 4}});
  ASSERT_TRUE(snapshot->LoadInto(cache.get(), kPrefix).ok());
  EXPECT_EQ(cache->layer(0).SeqLength(), kPrefix);
  EXPECT_EQ(cache->layer(1).SeqLength(), kPrefix);
  // The next token sees the last window-1 = 3 prefix tokens (positions 3, 4, 5) and itself.
  absl::StatusOr<LayerView> view = cache->Update(1, Kv(9, 1, false), Kv(9, 1, true));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->kv_offset, 3);
  EXPECT_EQ(view->num_valid, 4);
  EXPECT_TRUE(at::equal(view->keys.narrow(2, 0, 3), Kv(1, kPrefix, false).narrow(2, 3, 3)));
}

TEST(SnapshotTest, LoadRefusals) {
  std::shared_ptr<const Snapshot> snapshot = MakeSnapshot(2);

  EXPECT_EQ(snapshot->LoadInto(nullptr, 3).code(), absl::StatusCode::kInvalidArgument);

  auto three_layers = *KvCache::CreateDynamic({{}, {}, {}});
  absl::Status s = snapshot->LoadInto(three_layers.get(), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the cache has 3 layers but the snapshot has 2"));

  auto cache = *KvCache::CreateDynamic({{}, {}});
  s = snapshot->LoadInto(cache.get(), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cannot load 0 tokens from a snapshot of 6"));
  EXPECT_EQ(snapshot->LoadInto(cache.get(), kPrefix + 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->SeqLength(), 0);

  // Nor into a quantized cache whose layers hold a staged prefix already.
  auto quantized = MakeFor(Quantized("quanto", "quanto", 4, 0, std::nullopt));
  ASSERT_TRUE(snapshot->LoadInto(quantized.get(), 2).ok());
  EXPECT_EQ(snapshot->LoadInto(quantized.get(), 3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(quantized->SeqLength(), 2);

  ASSERT_TRUE(snapshot->LoadInto(cache.get(), 2).ok());
  s = snapshot->LoadInto(cache.get(), 2);  // not empty any more
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("layer 0 already holds 2 tokens"));
  EXPECT_EQ(cache->SeqLength(), 2);

  // A static cache too short for the prefix is refused before any layer changes.
  auto short_static = *MakeCache(*CacheSpec::Parse("static", {}, true, 4), {{}, {}});
  s = snapshot->LoadInto(short_static.get(), 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("layer 0 holds at most 4 tokens; the prefix needs 5"));
  EXPECT_EQ(short_static->layer(0).SeqLength(), 0);
  EXPECT_EQ(short_static->layer(1).SeqLength(), 0);
  EXPECT_TRUE(snapshot->LoadInto(short_static.get(), 4).ok());
}

TEST(SnapshotTest, LoadsIntoSeveralCachesIndependently) {
  std::shared_ptr<const Snapshot> snapshot = MakeSnapshot(1);
  auto a = *KvCache::CreateDynamic({{}});
  auto b = *KvCache::CreateDynamic({{}});
  ASSERT_TRUE(snapshot->LoadInto(a.get(), kPrefix).ok());
  ASSERT_TRUE(snapshot->LoadInto(b.get(), kPrefix).ok());
  for (at::Tensor& t : StoredTensors(*a)) t.fill_(42);
  const DynamicLayer& layer = static_cast<const DynamicLayer&>(b->layer(0));
  EXPECT_TRUE(at::equal(layer.keys(), Kv(0, kPrefix, false)));
  EXPECT_TRUE(at::equal(layer.values(), Kv(0, kPrefix, true)));
}

}  // namespace
}  // namespace kvserve::cache
