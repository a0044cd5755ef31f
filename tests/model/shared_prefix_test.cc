// A prefix read in place (shared segment) generates what a copied prefix generates: greedy
// tokens identical and logits within float32 summation error, on llama, mistral (sliding
// window), qwen3, phi3, gemma2 (soft-capped scores, sliding and global layers) and gemma3 tiny
// models, alone, batched, with beams and after a crop into the prefix; and the attention
// kernels over a segmented view (soft-capped or not) equal those over the joined view.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "cache/dynamic_layer.h"
#include "cache/kv_cache.h"
#include "cache/snapshot.h"
#include "model/attention.h"
#include "model/cascade_attention.h"
#include "model/cpu_kernels.h"
#include "model/tiled_attention.h"
#include "tests/model/tiny_models.h"

namespace kvserve::model {
namespace {

using testing::LoadTinyModel;
using testing::MaxAbsDiff;
using testing::Prompt;

constexpr float kTolerance = 1e-4f;

// The prefix's snapshot, prefilled by the model into a capture cache of DynamicLayers.
std::shared_ptr<const cache::Snapshot> CaptureSnapshot(Transformer& model,
                                                       const std::vector<int32_t>& prefix) {
  std::vector<std::unique_ptr<cache::CacheLayer>> layers;
  for (int64_t i = 0; i < model.info().num_layers; ++i) {
    layers.push_back(std::make_unique<cache::DynamicLayer>());
  }
  cache::KvCache capture(std::move(layers));
  Batch batch;
  batch.sequences.push_back({.token_ids = prefix, .cache = &capture});
  EXPECT_TRUE(model.Forward(batch).ok());
  auto snapshot = cache::Snapshot::Capture(capture, prefix, "test");
  EXPECT_TRUE(snapshot.ok()) << snapshot.status();
  return snapshot.ok() ? *snapshot : nullptr;
}

// A dynamic cache holding the snapshot's tokens, read in place (`shared`) or copied.
std::unique_ptr<cache::KvCache> Load(Transformer& model, const cache::Snapshot& snapshot,
                                     bool shared, int* shared_layers) {
  auto kv = cache::KvCache::CreateDynamic(model.info().layer_specs);
  EXPECT_TRUE(kv.ok());
  EXPECT_TRUE(
      snapshot.LoadInto(kv->get(), snapshot.num_tokens(), shared ? shared_layers : nullptr).ok());
  return std::move(*kv);
}

int Argmax(const at::Tensor& logits) { return static_cast<int>(logits.argmax().item<int64_t>()); }

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<at::Tensor> logits;
};

void ExpectSame(const Trace& shared, const Trace& copied) {
  EXPECT_EQ(shared.tokens, copied.tokens);
  ASSERT_EQ(shared.logits.size(), copied.logits.size());
  for (size_t i = 0; i < shared.logits.size(); ++i) {
    EXPECT_LT(MaxAbsDiff(shared.logits[i], copied.logits[i]), kTolerance) << "step " << i;
  }
}

class SharedPrefixModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = LoadTinyModel(GetParam(), "tiny");
    ASSERT_NE(model_, nullptr);
    snapshot_ = CaptureSnapshot(*model_, Prompt(40));
    ASSERT_NE(snapshot_, nullptr);
  }

  // Greedy decoding of two sequences batched together, both on the prefix: a suffix each,
  // then `steps` tokens; with a crop of `crop` tokens (into the prefix when > the suffix and
  // generated tokens) and a regeneration after it when crop > 0.
  std::vector<Trace> Greedy(bool shared, int steps, int64_t crop = 0) {
    std::vector<std::unique_ptr<cache::KvCache>> caches;
    std::vector<Trace> traces(2);
    std::vector<std::vector<int32_t>> next = {Prompt(6, 1), Prompt(9, 2)};
    for (int s = 0; s < 2; ++s) {
      int shared_layers = 0;
      caches.push_back(Load(*model_, *snapshot_, shared, &shared_layers));
      // Every dynamic layer reads the prefix in place (a sliding one the part it keeps).
      if (shared) {
        EXPECT_EQ(shared_layers, model_->info().num_layers);
      }
    }
    for (int step = 0; step < steps; ++step) {
      if (crop > 0 && step == steps / 2) {
        for (int s = 0; s < 2; ++s) {
          EXPECT_TRUE(caches[s]->Crop(-crop).ok());
          next[s] = {static_cast<int32_t>(7 + s)};
        }
      }
      Batch batch;
      for (int s = 0; s < 2; ++s) {
        batch.sequences.push_back({.token_ids = next[s], .cache = caches[s].get()});
      }
      absl::StatusOr<ForwardOutput> out = model_->Forward(batch);
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) return traces;
      for (int s = 0; s < 2; ++s) {
        traces[s].logits.push_back(out->logits[s]);
        traces[s].tokens.push_back(Argmax(out->logits[s]));
        next[s] = {traces[s].tokens.back()};
      }
    }
    return traces;
  }

  std::unique_ptr<Transformer> model_;
  std::shared_ptr<const cache::Snapshot> snapshot_;
};

TEST_P(SharedPrefixModelTest, BatchedGreedyMatchesTheCopy) {
  const std::vector<Trace> shared = Greedy(true, 10);
  const std::vector<Trace> copied = Greedy(false, 10);
  for (int s = 0; s < 2; ++s) ExpectSame(shared[s], copied[s]);
}

TEST_P(SharedPrefixModelTest, ACropIntoThePrefixMatchesTheCopy) {
  // Sequence 0 holds 40 + 6 + 4 tokens at the crop: 25 back reaches into the prefix. Sliding
  // layers cannot crop back that far without recording, so only full-attention models run it.
  for (const auto& spec : model_->info().layer_specs) {
    if (spec.is_sliding()) GTEST_SKIP() << "sliding layers refuse crops past their window";
  }
  const std::vector<Trace> shared = Greedy(true, 8, 25);
  const std::vector<Trace> copied = Greedy(false, 8, 25);
  for (int s = 0; s < 2; ++s) ExpectSame(shared[s], copied[s]);
}

TEST_P(SharedPrefixModelTest, BeamRowsShareThePrefixAndMatchTheCopy) {
  std::vector<Trace> traces;
  for (bool shared : {true, false}) {
    int shared_layers = 0;
    auto kv = Load(*model_, *snapshot_, shared, &shared_layers);
    Trace trace;
    Batch batch;
    const std::vector<int32_t> suffix = Prompt(5, 3);
    batch.sequences.push_back({.token_ids = suffix, .cache = kv.get()});
    auto out = model_->Forward(batch);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(kv->RepeatInterleave(3).ok());
    std::vector<int32_t> rows = {Argmax(out->logits[0]), 5, 9};
    for (int step = 0; step < 6; ++step) {
      Batch b;
      b.sequences.push_back({.token_ids = rows, .cache = kv.get(), .rows = 3});
      auto o = model_->Forward(b);
      ASSERT_TRUE(o.ok()) << o.status();
      trace.logits.push_back(o->logits[0]);  // [3, vocab]
      for (int r = 0; r < 3; ++r) rows[r] = Argmax(o->logits[0][r]);
      trace.tokens.insert(trace.tokens.end(), rows.begin(), rows.end());
      // A beam reorder: row 0 continues row 2, row 2 row 0.
      ASSERT_TRUE(kv->Reorder(at::tensor(std::vector<int64_t>{2, 1, 0})).ok());
      std::swap(rows[0], rows[2]);
    }
    traces.push_back(std::move(trace));
  }
  ExpectSame(traces[0], traces[1]);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, SharedPrefixModelTest,
                         ::testing::Values("llama", "mistral", "qwen3", "phi3", "gemma2",
                                           "gemma3"));

// The kernels over a view split into a shared prefix segment and own columns equal those over
// the same columns joined into one tensor.
TEST(SegmentedAttentionTest, KernelsEqualTheJoinedView) {
  at::manual_seed(3);
  const int64_t heads = 4, kv_heads = 2, d = 16, prefix = 37, own = 29;
  const at::Tensor pk = at::randn({1, kv_heads, prefix, d});
  const at::Tensor pv = at::randn({1, kv_heads, prefix, d});
  // Own columns in a buffer with spare slots (num_valid < columns), as a cache returns them.
  const at::Tensor ok = at::randn({1, kv_heads, own + 7, d});
  const at::Tensor ov = at::randn({1, kv_heads, own + 7, d});
  cache::LayerView segmented{ok, ov, 0, own, pk, pv};
  cache::LayerView joined{at::cat({pk, ok}, 2), at::cat({pv, ov}, 2), 0, prefix + own};
  const std::vector<cache::LayerSpec> specs = {{cache::LayerType::kFullAttention, 0},
                                               {cache::LayerType::kSlidingAttention, 20},
                                               {cache::LayerType::kChunkedAttention, 16}};
  for (const cache::LayerSpec& spec : specs) {
    // softcap 0.5: Gemma 2's capped scores (the random scores here exceed the cap often).
    for (double softcap : {0.0, 0.5}) {
      SCOPED_TRACE(::testing::Message() << static_cast<int>(spec.type) << " softcap " << softcap);
      for (int64_t n : {1, 3, 29}) {
        const int64_t q_start = prefix + own - n;
        const at::Tensor q = at::randn({n, heads, d});
        const at::Tensor expected = Attend(q, joined, q_start, spec, 0.25, nullptr, softcap);
        EXPECT_LT(MaxAbsDiff(Attend(q, segmented, q_start, spec, 0.25, nullptr, softcap), expected),
                  kTolerance);
        MaskCache masks;
        EXPECT_LT(MaxAbsDiff(Attend(q, segmented, q_start, spec, 0.25, &masks, softcap), expected),
                  kTolerance);
        at::Tensor fused;
        ASSERT_TRUE(FusedAttend(q, segmented, q_start, spec, 0.25, &fused, softcap));
        EXPECT_LT(MaxAbsDiff(fused, expected), kTolerance);
        if (softcap > 0) continue;  // the tiled kernel does not cap (the forward skips it)
        for (SimdLevel level : {SimdLevel::kPortable, TiledAttentionLevel()}) {
          at::Tensor tiled;
          ASSERT_TRUE(TiledAttend(q, segmented, q_start, spec, 0.25, &tiled, level));
          EXPECT_LT(MaxAbsDiff(tiled, expected), kTolerance);
        }
      }
    }
  }
}

// Rows of several sequences on one segment attend together (cascade) as each would alone.
TEST(SegmentedAttentionTest, CascadeEqualsEachMemberAlone) {
  at::manual_seed(5);
  const int64_t heads = 4, kv_heads = 2, d = 16, prefix = 41;
  const at::Tensor pk = at::randn({1, kv_heads, prefix, d});
  const at::Tensor pv = at::randn({1, kv_heads, prefix, d});
  const cache::LayerSpec full{cache::LayerType::kFullAttention, 0};
  std::vector<CascadeMember> members;
  std::vector<at::Tensor> expected;
  // Tails of 1 to 12 tokens (spare slots past num_valid), queries of 1 to 3 positions at
  // their ends (a short prefill: causal within the tail).
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t own = 1 + 3 * i + (i == 3 ? 2 : 0), n = 1 + i % 3;
    const at::Tensor keys = at::randn({1, kv_heads, own + 5, d});
    const at::Tensor values = at::randn({1, kv_heads, own + 5, d});
    cache::LayerView view{keys, values, 0, own, pk, pv};
    const int64_t q_start = prefix + own - n;
    const at::Tensor q = at::randn({n, heads, d});
    expected.push_back(Attend(q, view, q_start, full, 0.3));
    members.push_back({q, view, q_start, at::empty({n, heads * d})});
  }
  ASSERT_TRUE(CanCascade(members, full));
  ASSERT_TRUE(CascadeAttend(members, full, 0.3));
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_LT(MaxAbsDiff(members[i].out, expected[i]), kTolerance) << "member " << i;
  }
  // Not a group: a sliding layer, another segment, a query inside the segment, one member.
  EXPECT_FALSE(CanCascade(members, {cache::LayerType::kSlidingAttention, 8}));
  std::vector<CascadeMember> other = members;
  other[1].view.prefix_keys = pk.clone();
  EXPECT_FALSE(CanCascade(other, full));
  other = members;
  other[2].q_start = prefix - 1;
  EXPECT_FALSE(CanCascade(other, full));
  EXPECT_FALSE(CascadeAttend({members[0]}, full, 0.3));
  // The tensor-op form (the CUDA path), run here on the CPU in float32 and in bfloat16.
  for (CascadeMember& m : members) m.out = at::empty_like(m.out);
  ASSERT_TRUE(CanCascadeTensors(members, full));
  ASSERT_TRUE(CascadeAttendTensors(members, full, 0.3));
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_LT(MaxAbsDiff(members[i].out, expected[i]), kTolerance) << "tensor ops, member " << i;
  }
  EXPECT_FALSE(CanCascadeTensors(members, {cache::LayerType::kSlidingAttention, 8}));
  EXPECT_FALSE(CanCascadeTensors(other, full));  // a query inside the segment
  EXPECT_FALSE(CascadeAttendTensors({members[0]}, full, 0.3));
  {
    const at::Tensor pk16 = pk.to(at::kBFloat16), pv16 = pv.to(at::kBFloat16);
    std::vector<CascadeMember> bf16 = members;
    for (size_t i = 0; i < bf16.size(); ++i) {
      CascadeMember& m = bf16[i];
      m.queries = m.queries.to(at::kBFloat16);
      m.view.keys = m.view.keys.to(at::kBFloat16);
      m.view.values = m.view.values.to(at::kBFloat16);
      m.view.prefix_keys = pk16;
      m.view.prefix_values = pv16;
      m.out = at::empty({m.queries.size(0), heads * d}, at::kBFloat16);
    }
    ASSERT_TRUE(CascadeAttendTensors(bf16, full, 0.3));
    for (size_t i = 0; i < bf16.size(); ++i) {
      const at::Tensor alone =
          Attend(bf16[i].queries, bf16[i].view, bf16[i].q_start, full, 0.3).to(at::kFloat);
      EXPECT_LT(MaxAbsDiff(bf16[i].out.to(at::kFloat), alone), 0.05) << "bf16, member " << i;
    }
  }
  // Soft-capped scores (Gemma 2): the cap applies to the segment's and the tails' scores.
  for (CascadeMember& m : members) m.out = at::empty_like(m.out);
  ASSERT_TRUE(CascadeAttend(members, full, 0.3, /*softcap=*/0.5));
  for (size_t i = 0; i < members.size(); ++i) {
    const at::Tensor capped =
        Attend(members[i].queries, members[i].view, members[i].q_start, full, 0.3, nullptr, 0.5);
    EXPECT_GT(MaxAbsDiff(capped, expected[i]), kTolerance) << "the cap changes member " << i;
    EXPECT_LT(MaxAbsDiff(members[i].out, capped), kTolerance) << "member " << i;
  }
  for (CascadeMember& m : members) m.out = at::empty_like(m.out);
  ASSERT_TRUE(CascadeAttendTensors(members, full, 0.3, /*softcap=*/0.5));
  for (size_t i = 0; i < members.size(); ++i) {
    const at::Tensor capped =
        Attend(members[i].queries, members[i].view, members[i].q_start, full, 0.3, nullptr, 0.5);
    EXPECT_LT(MaxAbsDiff(members[i].out, capped), kTolerance) << "tensor ops, member " << i;
  }
}

// A segment of several blocks (300 columns: 256 + 44), a head size that is not a multiple of
// 64 (80), and groups of 6, 9 and 15 query rows per kv head (query rows in chunks of 8, values
// weighted 4, 3, 2 and 1 rows at a time by the AVX-512 kernel where the CPU has it).
TEST(SegmentedAttentionTest, CascadeOverSeveralSegmentBlocks) {
  at::manual_seed(9);
  const int64_t heads = 6, kv_heads = 2, d = 80, prefix = 300;
  const at::Tensor pk = at::randn({1, kv_heads, prefix, d});
  const at::Tensor pv = at::randn({1, kv_heads, prefix, d});
  const cache::LayerSpec full{cache::LayerType::kFullAttention, 0};
  for (int64_t count : {2, 3, 5}) {
    SCOPED_TRACE(::testing::Message() << count << " members");
    std::vector<CascadeMember> members;
    std::vector<at::Tensor> expected;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t own = 2 + i;
      const at::Tensor keys = at::randn({1, kv_heads, own + 3, d});
      const at::Tensor values = at::randn({1, kv_heads, own + 3, d});
      cache::LayerView view{keys, values, 0, own, pk, pv};
      const at::Tensor q = at::randn({1, heads, d});
      expected.push_back(Attend(q, view, prefix + own - 1, full, 0.11));
      members.push_back({q, view, prefix + own - 1, at::empty({1, heads * d})});
    }
    ASSERT_TRUE(CascadeAttend(members, full, 0.11));
    for (size_t i = 0; i < members.size(); ++i) {
      EXPECT_LT(MaxAbsDiff(members[i].out, expected[i]), kTolerance) << "member " << i;
    }
  }
}

}  // namespace
}  // namespace kvserve::model
