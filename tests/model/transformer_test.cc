// Tests for Transformer: cached decoding equals full recomputation for every architecture,
// ragged batches equal solo runs, and loading errors name what is wrong.
#include "model/transformer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cache/dynamic_sliding_window_layer.h"
#include "cache/kv_cache.h"
#include "model/generator.h"
#include "tests/model/tiny_models.h"

namespace kvserve::model {
namespace {

using testing::LoadTinyModel;
using testing::MaxAbsDiff;
using testing::Prompt;

struct EquivalenceCase {
  std::string arch;
  bool chunked;
  int prompt_length;
};

std::string CaseName(const ::testing::TestParamInfo<EquivalenceCase>& info) {
  return info.param.arch + (info.param.chunked ? "_chunked" : "") + "_prompt" +
         std::to_string(info.param.prompt_length);
}

class CachedEqualsRecomputedTest : public ::testing::TestWithParam<EquivalenceCase> {};

// 32 decode steps with the dynamic cache give the logits of recomputing the whole sequence
// without a cache at every step (float32, 1e-4), and therefore the same greedy tokens.
TEST_P(CachedEqualsRecomputedTest, LogitsMatchFullRecomputation) {
  const EquivalenceCase& c = GetParam();
  auto model = LoadTinyModel(c.arch, "tiny", c.chunked ? testing::MakeChunked : nullptr);
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 33;  // the prefill choice plus 32 decode steps
  options.ignore_eos = true;
  options.record_logits = true;
  const std::vector<int32_t> prompt = Prompt(c.prompt_length);

  auto cache = cache::KvCache::CreateDynamic(model->info().layer_specs);
  ASSERT_TRUE(cache.ok());
  auto cached = Generate(*model, prompt, cache->get(), options);
  ASSERT_TRUE(cached.ok()) << cached.status();
  auto recomputed = Generate(*model, prompt, nullptr, options);
  ASSERT_TRUE(recomputed.ok()) << recomputed.status();

  EXPECT_EQ(cached->tokens, recomputed->tokens);
  ASSERT_EQ(cached->logits.size(), recomputed->logits.size());
  for (size_t i = 0; i < cached->logits.size(); ++i) {
    ASSERT_LE(MaxAbsDiff(cached->logits[i], recomputed->logits[i]), 1e-4) << "step " << i;
  }
  EXPECT_EQ((*cache)->SeqLength(), c.prompt_length + 32);
}

INSTANTIATE_TEST_SUITE_P(
    AllArchitectures, CachedEqualsRecomputedTest, ::testing::ValuesIn([] {
      std::vector<EquivalenceCase> cases;
      for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"}) {
        for (int n : {1, 7, 64}) cases.push_back({arch, false, n});
      }
      for (int n : {1, 7, 64}) cases.push_back({"llama", true, n});
      return cases;
    }()),
    CaseName);

// Gemma's sliding layers stop growing at the window (the dynamic sliding layer keeps its last
// window - 1 tokens, as the cache guide says), its full layers keep every token.
TEST(TransformerTest, GemmaSlidingLayersStopGrowingAtTheWindow) {
  for (const char* arch : {"gemma2", "gemma3"}) {
    auto model = LoadTinyModel(arch, "tiny");
    ASSERT_NE(model, nullptr);
    const std::vector<cache::LayerSpec>& specs = model->info().layer_specs;
    ASSERT_EQ(specs.size(), 2u);
    EXPECT_EQ(specs[0], (cache::LayerSpec{cache::LayerType::kSlidingAttention, 16})) << arch;
    EXPECT_EQ(specs[1], (cache::LayerSpec{cache::LayerType::kFullAttention, 0})) << arch;
    auto cache = cache::KvCache::CreateDynamic(specs);
    ASSERT_TRUE(cache.ok());
    GenerateOptions options;
    options.max_new_tokens = 5;
    options.ignore_eos = true;
    ASSERT_TRUE(Generate(*model, Prompt(40), cache->get(), options).ok());
    // 44 tokens seen (the last choice is not run): the sliding layer holds 15 of them.
    EXPECT_EQ((*cache)->SeqLength(), 44);
    const auto* sliding =
        dynamic_cast<const cache::DynamicSlidingWindowLayer*>(&(*cache)->layer(0));
    ASSERT_NE(sliding, nullptr) << arch;
    EXPECT_EQ(sliding->SeqLength(), 44) << arch;
    EXPECT_EQ(sliding->num_stored_tokens(), 15) << arch;
    EXPECT_EQ((*cache)->layer(1).SeqLength(), 44) << arch;
  }
}

// The attention and final soft-caps of Gemma 2 change what the model computes: without them
// the logits differ (the tiny preset's caps are low enough to bite).
TEST(TransformerTest, Gemma2SoftCapsApply) {
  auto capped = LoadTinyModel("gemma2", "tiny");
  auto uncapped_attention =
      LoadTinyModel("gemma2", "tiny", [](ModelConfig& c) { c.attn_logit_softcapping.reset(); });
  auto uncapped_final =
      LoadTinyModel("gemma2", "tiny", [](ModelConfig& c) { c.final_logit_softcapping.reset(); });
  ASSERT_TRUE(capped && uncapped_attention && uncapped_final);
  const std::vector<int32_t> prompt = Prompt(12);
  Batch batch;
  batch.sequences.push_back({prompt});
  auto a = capped->Forward(batch);
  auto b = uncapped_attention->Forward(batch);
  auto c = uncapped_final->Forward(batch);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_GT(MaxAbsDiff(a->logits[0], b->logits[0]), 1e-3);
  EXPECT_GT(MaxAbsDiff(a->logits[0], c->logits[0]), 1e-2);
  // The final cap bounds every logit.
  EXPECT_LT(a->logits[0].abs().max().item<float>(), 5.0f);
  EXPECT_GT(c->logits[0].abs().max().item<float>(), 5.0f);
}

// The logits of every position of one forward equal the per-position recomputation.
TEST(TransformerTest, AllLogitsMatchPerPositionRuns) {
  auto model = LoadTinyModel("mistral");
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> prompt = Prompt(40);
  Batch batch;
  batch.sequences.push_back({prompt, nullptr, /*all_logits=*/true});
  auto all = model->Forward(batch);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->logits[0].size(0), 40);
  for (int n : {1, 15, 16, 17, 40}) {
    Batch prefix;
    prefix.sequences.push_back({absl::MakeConstSpan(prompt.data(), n), nullptr, false});
    auto out = model->Forward(prefix);
    ASSERT_TRUE(out.ok());
    EXPECT_LE(MaxAbsDiff(out->logits[0], all->logits[0][n - 1]), 1e-4) << n;
  }
}

// Three sequences of different lengths in one ragged batch, each with its own cache, give
// each sequence's solo logits: in prefill, and in a mixed step (two decodes and a prefill).
TEST(TransformerTest, RaggedBatchEqualsSoloRuns) {
  for (const char* arch : {"llama", "mistral", "qwen3"}) {
    SCOPED_TRACE(arch);
    auto model = LoadTinyModel(arch);
    ASSERT_NE(model, nullptr);
    const std::vector<std::vector<int32_t>> prompts = {Prompt(5, 1), Prompt(23, 2), Prompt(40, 3)};
    const auto& specs = model->info().layer_specs;

    std::vector<std::unique_ptr<cache::KvCache>> batched, solo;
    Batch batch;
    for (const auto& p : prompts) {
      batched.push_back(*cache::KvCache::CreateDynamic(specs));
      solo.push_back(*cache::KvCache::CreateDynamic(specs));
      batch.sequences.push_back({p, batched.back().get(), false});
    }
    auto together = model->Forward(batch);
    ASSERT_TRUE(together.ok()) << together.status();
    for (size_t s = 0; s < prompts.size(); ++s) {
      Batch one;
      one.sequences.push_back({prompts[s], solo[s].get(), false});
      auto alone = model->Forward(one);
      ASSERT_TRUE(alone.ok());
      EXPECT_LE(MaxAbsDiff(together->logits[s], alone->logits[0]), 1e-4) << s;
    }

    // A mixed step: sequences 0 and 1 decode one token, sequence 2 prefills 9 more.
    const std::vector<int32_t> next0 = {7}, next1 = {99}, more2 = Prompt(9, 4);
    Batch mixed;
    mixed.sequences.push_back({next0, batched[0].get(), false});
    mixed.sequences.push_back({next1, batched[1].get(), false});
    mixed.sequences.push_back({more2, batched[2].get(), false});
    auto step = model->Forward(mixed);
    ASSERT_TRUE(step.ok());
    const std::vector<std::vector<int32_t>> inputs = {next0, next1, more2};
    for (size_t s = 0; s < inputs.size(); ++s) {
      Batch one;
      one.sequences.push_back({inputs[s], solo[s].get(), false});
      auto alone = model->Forward(one);
      ASSERT_TRUE(alone.ok());
      EXPECT_LE(MaxAbsDiff(step->logits[s], alone->logits[0]), 1e-4) << s;
      EXPECT_EQ(batched[s]->SeqLength(), solo[s]->SeqLength());
    }
  }
}

// Beams as batch rows of one cache: a prompt prefilled once and repeated to 3 rows, then
// steps of one token per row (with a reorder between them, and a multi-token step), give
// each row the logits of its own single-row cache; beside another sequence in the batch.
TEST(TransformerTest, RowsOfOneCacheEqualSeparateCaches) {
  for (const char* arch : {"llama", "mistral", "phi3"}) {
    SCOPED_TRACE(arch);
    auto model = LoadTinyModel(arch);
    ASSERT_NE(model, nullptr);
    const auto& specs = model->info().layer_specs;
    const std::vector<int32_t> prompt = Prompt(21, 5);
    auto rows_cache = *cache::KvCache::CreateDynamic(specs);
    auto other_cache = *cache::KvCache::CreateDynamic(specs);
    Batch prefill;
    prefill.sequences.push_back({prompt, rows_cache.get(), false});
    ASSERT_TRUE(model->Forward(prefill).ok());
    // Three single-row copies of the prefilled prompt.
    std::vector<std::unique_ptr<cache::KvCache>> solo;
    for (int r = 0; r < 3; ++r) solo.push_back(rows_cache->Clone());
    ASSERT_TRUE(rows_cache->RepeatInterleave(3).ok());
    ASSERT_EQ(rows_cache->BatchSize(), 3);

    auto check_step = [&](const std::vector<std::vector<int32_t>>& per_row) {
      std::vector<int32_t> flat;
      for (const auto& row : per_row) flat.insert(flat.end(), row.begin(), row.end());
      const std::vector<int32_t> other = Prompt(4, 9);
      Batch batch;
      batch.sequences.push_back({other, other_cache.get(), false});
      model::SequenceInput rows;
      rows.token_ids = flat;
      rows.cache = rows_cache.get();
      rows.rows = 3;
      batch.sequences.push_back(rows);
      auto together = model->Forward(batch);
      ASSERT_TRUE(together.ok()) << together.status();
      ASSERT_EQ(together->logits[1].dim(), 2);
      ASSERT_EQ(together->logits[1].size(0), 3);
      for (int r = 0; r < 3; ++r) {
        Batch one;
        one.sequences.push_back({per_row[r], solo[r].get(), false});
        auto alone = model->Forward(one);
        ASSERT_TRUE(alone.ok());
        EXPECT_LE(MaxAbsDiff(together->logits[1][r], alone->logits[0]), 1e-4) << "row " << r;
      }
      EXPECT_EQ(rows_cache->SeqLength(), solo[0]->SeqLength());
    };
    check_step({{7}, {99}, {180}});
    // Beam reorder: rows become old rows 2, 0, 0.
    const std::vector<int64_t> parents = {2, 0, 0};
    ASSERT_TRUE(
        rows_cache->Reorder(at::from_blob(const_cast<int64_t*>(parents.data()), {3}, at::kLong))
            .ok());
    std::vector<std::unique_ptr<cache::KvCache>> reordered;
    for (int64_t p : parents) reordered.push_back(solo[p]->Clone());
    solo = std::move(reordered);
    check_step({{11, 12}, {13, 14}, {15, 16}});
  }
}

TEST(TransformerTest, RowsMustDivideTheTokens) {
  auto model = LoadTinyModel("llama");
  ASSERT_NE(model, nullptr);
  auto kv = *cache::KvCache::CreateDynamic(model->info().layer_specs);
  const std::vector<int32_t> ids = {1, 2, 3};
  Batch batch;
  model::SequenceInput input;
  input.token_ids = ids;
  input.cache = kv.get();
  input.rows = 2;
  batch.sequences.push_back(input);
  auto r = model->Forward(batch);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("2 rows"));
  batch.sequences[0].cache = nullptr;
  batch.sequences[0].token_ids = absl::Span<const int32_t>(ids).subspan(0, 2);
  EXPECT_THAT(std::string(model->Forward(batch).status().message()),
              ::testing::HasSubstr("no cache"));
}

TEST(TransformerTest, RejectsBadInputs) {
  auto model = LoadTinyModel("llama");
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> out_of_vocab = {1, 320};
  Batch batch;
  batch.sequences.push_back({out_of_vocab, nullptr, false});
  auto r = model->Forward(batch);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("320"), std::string::npos);

  Batch empty_seq;
  empty_seq.sequences.push_back({{}, nullptr, false});
  EXPECT_EQ(model->Forward(empty_seq).status().code(), absl::StatusCode::kInvalidArgument);

  auto wrong_cache = *cache::KvCache::CreateDynamic({{cache::LayerType::kFullAttention, 0}});
  const std::vector<int32_t> ok_ids = {1, 2};
  Batch mismatched;
  mismatched.sequences.push_back({ok_ids, wrong_cache.get(), false});
  EXPECT_EQ(model->Forward(mismatched).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TransformerTest, LoadErrorsNameTheTensor) {
  auto config = PresetConfig("llama", "tiny");
  ASSERT_TRUE(config.ok());
  auto files = *MakeModelFiles(*config, 1, WeightsDtype::kF32);

  // Another architecture's config over these weights: the fused phi3 names are missing and
  // the separate q/k/v names are unexpected.
  auto phi3 = *PresetConfig("phi3", "tiny");
  auto wrong = files;
  wrong["config.json"] = phi3.ToJson();
  auto r = Transformer::Load(base::ModelSource::FromMemory(wrong), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("qkv_proj"), std::string::npos) << r.status();

  // A config whose sizes disagree with the tensors.
  auto bigger = *config;
  bigger.intermediate_size = 256;
  wrong = files;
  wrong["config.json"] = bigger.ToJson();
  r = Transformer::Load(base::ModelSource::FromMemory(wrong), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mlp"), std::string::npos) << r.status();

  wrong = files;
  wrong.erase("config.json");
  EXPECT_EQ(Transformer::Load(base::ModelSource::FromMemory(wrong), {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TransformerTest, Bf16CheckpointLoadsAsFloat32) {
  auto config = *PresetConfig("llama", "tiny");
  auto f32 = *MakeModelFiles(config, 3, WeightsDtype::kF32);
  auto bf16 = *MakeModelFiles(config, 3, WeightsDtype::kBF16);
  EXPECT_LT(bf16["model.safetensors"].size(), f32["model.safetensors"].size());
  auto a = *Transformer::Load(base::ModelSource::FromMemory(f32), {});
  auto b = *Transformer::Load(base::ModelSource::FromMemory(bf16), {});
  const std::vector<int32_t> ids = Prompt(12);
  Batch batch;
  batch.sequences.push_back({ids, nullptr, false});
  auto la = a->Forward(batch);
  auto lb = b->Forward(batch);
  ASSERT_TRUE(la.ok() && lb.ok());
  // bf16 weights round to 8 bits of mantissa: close, and the same argmax on peaked logits.
  EXPECT_LT(MaxAbsDiff(la->logits[0], lb->logits[0]), 0.5);
  EXPECT_EQ(la->logits[0].argmax().item<int64_t>(), lb->logits[0].argmax().item<int64_t>());
}

// A bfloat16 checkpoint keeps its projection weights in bfloat16 (auto); with
// --bf16-compute exact they are widened exactly: its logits equal those of the same checkpoint
// converted to float32 at load, up to summation order; prefill (GEMM on widened weights) and
// decode (the 16-bit kernel) agree with recomputation as for float32.
TEST(TransformerTest, Bf16WeightsStayBf16AndComputeLikeFloat32) {
  auto config = *PresetConfig("qwen3", "tiny");
  auto files = *MakeModelFiles(config, 5, WeightsDtype::kBF16);
  TransformerOptions exact_options;
  exact_options.bf16_compute = Bf16Compute::kExact;
  auto narrow = *Transformer::Load(base::ModelSource::FromMemory(files), exact_options);
  EXPECT_FALSE(narrow->info().bf16_activations);
  TransformerOptions wide_options;
  wide_options.weight_dtype = at::kFloat;
  auto wide = *Transformer::Load(base::ModelSource::FromMemory(files), wide_options);
  EXPECT_EQ(narrow->info().weight_dtype, at::kBFloat16);
  EXPECT_EQ(narrow->info().dtype, at::kFloat);
  EXPECT_EQ(wide->info().weight_dtype, at::kFloat);

  const std::vector<int32_t> ids = Prompt(40);
  auto cache = *cache::KvCache::CreateDynamic(narrow->info().layer_specs);
  std::vector<int32_t> prompt(ids.begin(), ids.begin() + 30);
  Batch prefill;
  prefill.sequences.push_back({prompt, cache.get(), false});
  ASSERT_TRUE(narrow->Forward(prefill).ok());
  for (size_t t = 30; t < ids.size(); ++t) {
    Batch step;
    step.sequences.push_back({absl::MakeConstSpan(&ids[t], 1), cache.get(), false});
    auto cached = narrow->Forward(step);
    std::vector<int32_t> upto(ids.begin(), ids.begin() + static_cast<int64_t>(t) + 1);
    Batch full;
    full.sequences.push_back({upto, nullptr, false});
    auto recomputed = narrow->Forward(full);
    auto reference = wide->Forward(full);
    ASSERT_TRUE(cached.ok() && recomputed.ok() && reference.ok());
    EXPECT_LT(MaxAbsDiff(cached->logits[0], recomputed->logits[0]), 1e-4) << t;
    EXPECT_LT(MaxAbsDiff(recomputed->logits[0], reference->logits[0]), 1e-4) << t;
  }

  // A float32 checkpoint can be narrowed on request; the embedding follows.
  auto f32_files = *MakeModelFiles(config, 5, WeightsDtype::kF32);
  TransformerOptions half_options;
  half_options.weight_dtype = at::kHalf;
  auto half = *Transformer::Load(base::ModelSource::FromMemory(f32_files), half_options);
  EXPECT_EQ(half->info().weight_dtype, at::kHalf);
  Batch batch;
  batch.sequences.push_back({ids, nullptr, false});
  auto f32_model = *Transformer::Load(base::ModelSource::FromMemory(f32_files), {});
  EXPECT_EQ(f32_model->info().weight_dtype, at::kFloat);
  auto a = f32_model->Forward(batch);
  auto b = half->Forward(batch);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->logits[0].argmax().item<int64_t>(), b->logits[0].argmax().item<int64_t>());
}

// --bf16-compute auto on a CPU with AVX512-BF16: activations rounded to bfloat16 for the
// products. Logits stay close to the exact ones with the same argmax; a prefill (oneDNN's
// bf16 matmul over > 16 rows) then single-token steps (the vdpbf16ps kernel) agree with
// recomputing the whole prompt, to bfloat16's precision; a float32 checkpoint is unaffected.
TEST(TransformerTest, Bf16NativeComputeStaysCloseAndConsistent) {
  if (ResolveBf16Compute(Bf16Compute::kNative) != Bf16Compute::kNative) {
    GTEST_SKIP() << "no AVX512-BF16 on this CPU (or KVSERVE_CPU_ISA caps it)";
  }
  for (const char* arch : {"llama", "qwen3"}) {
    auto config = *PresetConfig(arch, "tiny");
    auto files = *MakeModelFiles(config, 8, WeightsDtype::kBF16);
    auto native = *Transformer::Load(base::ModelSource::FromMemory(files), {});
    TransformerOptions exact_options;
    exact_options.bf16_compute = Bf16Compute::kExact;
    auto exact = *Transformer::Load(base::ModelSource::FromMemory(files), exact_options);
    EXPECT_TRUE(native->info().bf16_activations);
    EXPECT_FALSE(exact->info().bf16_activations);

    const std::vector<int32_t> ids = Prompt(48);
    auto cache = *cache::KvCache::CreateDynamic(native->info().layer_specs);
    std::vector<int32_t> prompt(ids.begin(), ids.begin() + 40);
    Batch prefill;
    prefill.sequences.push_back({prompt, cache.get(), false});
    ASSERT_TRUE(native->Forward(prefill).ok());
    double largest_rounding = 0;
    for (size_t t = 40; t < ids.size(); ++t) {
      Batch step;
      step.sequences.push_back({absl::MakeConstSpan(&ids[t], 1), cache.get(), false});
      auto cached = native->Forward(step);
      std::vector<int32_t> upto(ids.begin(), ids.begin() + static_cast<int64_t>(t) + 1);
      Batch full;
      full.sequences.push_back({upto, nullptr, false});
      auto recomputed = native->Forward(full);
      auto reference = exact->Forward(full);
      ASSERT_TRUE(cached.ok() && recomputed.ok() && reference.ok());
      EXPECT_LT(MaxAbsDiff(cached->logits[0], recomputed->logits[0]), 0.05) << arch << " " << t;
      const double rounding = MaxAbsDiff(recomputed->logits[0], reference->logits[0]);
      EXPECT_LT(rounding, 0.1) << arch << " " << t;
      largest_rounding = std::max(largest_rounding, rounding);
      EXPECT_EQ(recomputed->logits[0].argmax().item<int64_t>(),
                reference->logits[0].argmax().item<int64_t>())
          << arch << " " << t;
    }
    EXPECT_GT(largest_rounding, 1e-4) << arch << ": the activations were not rounded";
  }
  auto f32 = *Transformer::Load(base::ModelSource::FromMemory(*MakeModelFiles(
                                    *PresetConfig("llama", "tiny"), 8, WeightsDtype::kF32)),
                                {});
  EXPECT_FALSE(f32->info().bf16_activations);
}

TEST(TransformerTest, Bf16ComputeFlagValues) {
  EXPECT_EQ(*ParseBf16Compute("auto"), Bf16Compute::kNative);
  EXPECT_EQ(*ParseBf16Compute("exact"), Bf16Compute::kExact);
  const absl::Status bad = ParseBf16Compute("fast").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("--bf16-compute"));
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("auto, exact"));
}

TEST(TransformerTest, WeightDtypeCombinationsItCannotRunAreRefused) {
  auto files = *MakeModelFiles(*PresetConfig("llama", "tiny"), 5, WeightsDtype::kF32);
  TransformerOptions options;
  options.weight_dtype = at::kDouble;
  options.dtype = at::kFloat;
  auto bad = Transformer::Load(base::ModelSource::FromMemory(files), options);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("weight_dtype"));
  options.weight_dtype = at::kHalf;
  options.dtype = at::kBFloat16;  // narrow weights need float32 activations
  bad = Transformer::Load(base::ModelSource::FromMemory(files), options);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("weight_dtype"));
  options.weight_dtype = at::kBFloat16;  // equal to dtype: plain bfloat16 inference
  EXPECT_TRUE(Transformer::Load(base::ModelSource::FromMemory(files), options).ok());
}

}  // namespace
}  // namespace kvserve::model
