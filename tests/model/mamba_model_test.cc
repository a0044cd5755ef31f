// MambaModel: its config (Transformers' defaults, errors naming the field), the cached forward
// against the cold one (prefill, chunked prefill, single-token decode), state snapshots that
// resume exactly and load only whole, beams reordering the states by row, and the refusal of
// every strategy that needs K/V, naming the family and the strategy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "base/model_source.h"
#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/mamba_state_layer.h"
#include "cache/snapshot.h"
#include "model/beam_search.h"
#include "model/generator.h"
#include "model/mamba_model.h"
#include "model/tiny_model_maker.h"
#include "tests/model/tiny_models.h"

namespace kvserve::model {
namespace {

using ::testing::HasSubstr;
using testing::MaxAbsDiff;
using testing::Prompt;

std::unique_ptr<MambaModel> LoadTinyMamba(const std::string& preset = "tiny") {
  absl::StatusOr<std::map<std::string, std::string>> files =
      MakeTinyModel({.arch = "mamba", .preset = preset, .seed = 7});
  EXPECT_TRUE(files.ok()) << files.status();
  if (!files.ok()) return nullptr;
  auto model = MambaModel::Load(base::ModelSource::FromMemory(*files), {});
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<cache::KvCache> DynamicCache(const Model& model) {
  auto kv = cache::MakeCache(*cache::CacheSpec::Parse("dynamic"), model.info().layer_specs);
  EXPECT_TRUE(kv.ok()) << kv.status();
  return kv.ok() ? *std::move(kv) : nullptr;
}

// Logits of every position of `ids` in one forward without a cache: [n, vocab].
at::Tensor ColdLogits(MambaModel& model, const std::vector<int32_t>& ids) {
  Batch batch;
  batch.sequences.push_back({.token_ids = ids, .all_logits = true});
  auto out = model.Forward(batch);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->logits[0] : at::Tensor();
}

// Runs `ids` on `cache` (all logits).
at::Tensor RunOn(MambaModel& model, cache::KvCache* cache, const std::vector<int32_t>& ids,
                 int64_t rows = 1) {
  Batch batch;
  batch.sequences.push_back({.token_ids = ids, .cache = cache, .all_logits = true, .rows = rows});
  auto out = model.Forward(batch);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->logits[0] : at::Tensor();
}

std::vector<int32_t> Slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return std::vector<int32_t>(v.begin() + from, v.begin() + to);
}

TEST(MambaConfigTest, DefaultsAndErrorsNameTheField) {
  auto c = MambaConfig::Parse(R"({"model_type": "mamba", "hidden_size": 100})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->time_step_rank, 7);  // "auto": ceil(100 / 16)
  EXPECT_EQ(c->intermediate_size(), 200);
  EXPECT_EQ(c->state_size, 16);
  EXPECT_EQ(c->conv_kernel, 4);
  EXPECT_TRUE(c->tie_word_embeddings);
  auto again = MambaConfig::Parse(c->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *c);
  auto bad = MambaConfig::Parse(R"({"model_type": "mamba", "state_size": 0})");
  EXPECT_THAT(bad.status().message(), HasSubstr("state_size"));
  bad = MambaConfig::Parse(R"({"model_type": "mamba", "time_step_rank": "big"})");
  EXPECT_THAT(bad.status().message(), HasSubstr("time_step_rank"));
  bad = MambaConfig::Parse(R"({"model_type": "mamba", "conv_kernel": 1.5})");
  EXPECT_THAT(bad.status().message(), HasSubstr("conv_kernel"));
}

TEST(MambaModelTest, LoadModelChoosesTheFamilyFromModelType) {
  auto files = MakeTinyModel({.arch = "mamba", .preset = "tiny", .seed = 7});
  ASSERT_TRUE(files.ok());
  auto model = LoadModel(base::ModelSource::FromMemory(*files), {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().model_type, "mamba");
  ASSERT_EQ((*model)->info().layer_specs.size(), 2u);
  EXPECT_TRUE((*model)->info().layer_specs[0].is_state());
  EXPECT_NE(dynamic_cast<MambaModel*>(model->get()), nullptr);
}

// Prefill in one forward, in chunks, and token by token all give the cold forward's logits.
TEST(MambaModelTest, CachedForwardMatchesColdForward) {
  auto model = LoadTinyMamba();
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> ids = Prompt(23);
  const at::Tensor cold = ColdLogits(*model, ids);
  ASSERT_EQ(cold.size(0), 23);
  for (const std::vector<size_t>& cuts : std::vector<std::vector<size_t>>{
           {0, 23}, {0, 2, 23}, {0, 9, 10, 11, 23}, {0, 1, 2, 3, 4, 5, 6, 7, 23}}) {
    auto kv = DynamicCache(*model);
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      parts.push_back(RunOn(*model, kv.get(), Slice(ids, cuts[i], cuts[i + 1])));
    }
    EXPECT_LE(MaxAbsDiff(at::cat(parts, 0), cold), 1e-4) << "chunks " << cuts.size() - 1;
    EXPECT_EQ(kv->SeqLength(), 23);
  }
}

TEST(MambaModelTest, GreedyTokensCachedEqualCold) {
  auto model = LoadTinyMamba();
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 16;
  options.ignore_eos = true;
  options.record_logits = true;
  const std::vector<int32_t> prompt = Prompt(11, 3);
  auto kv = DynamicCache(*model);
  auto cached = Generate(*model, prompt, kv.get(), options);
  auto cold = Generate(*model, prompt, nullptr, options);
  ASSERT_TRUE(cached.ok()) << cached.status();
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ(cached->tokens, cold->tokens);
  for (size_t i = 0; i < cached->logits.size(); ++i) {
    EXPECT_LE(MaxAbsDiff(cached->logits[i], cold->logits[i]), 1e-4) << "step " << i;
  }
  // The tiny model's greedy output is not a constant (the states carry the prompt).
  EXPECT_GT(std::set<int32_t>(cold->tokens.begin(), cold->tokens.end()).size(), 1u);
}

TEST(MambaModelTest, SnapshotResumesExactlyAndLoadsOnlyWhole) {
  auto model = LoadTinyMamba();
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> ids = Prompt(30, 5);
  const at::Tensor cold = ColdLogits(*model, ids);
  auto capture = DynamicCache(*model);
  RunOn(*model, capture.get(), Slice(ids, 0, 20));
  auto snapshot = cache::Snapshot::Capture(*capture, Slice(ids, 0, 20), "fp");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE((*snapshot)->holds_states());
  // The capture cache goes on; the snapshot is a copy.
  RunOn(*model, capture.get(), Slice(ids, 20, 25));

  auto resumed = DynamicCache(*model);
  ASSERT_TRUE((*snapshot)->LoadInto(resumed.get(), 20).ok());
  EXPECT_EQ(resumed->SeqLength(), 20);
  const at::Tensor tail = RunOn(*model, resumed.get(), Slice(ids, 20, 30));
  EXPECT_LE(MaxAbsDiff(tail, cold.narrow(0, 20, 10)), 1e-4);

  auto partial = DynamicCache(*model);
  absl::Status status = (*snapshot)->LoadInto(partial.get(), 19);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("loads only whole"));
  EXPECT_EQ(partial->SeqLength(), 0);
}

TEST(MambaModelTest, StatesCannotBeCroppedButStepsRollBack) {
  auto model = LoadTinyMamba();
  ASSERT_NE(model, nullptr);
  auto kv = DynamicCache(*model);
  RunOn(*model, kv.get(), Prompt(6));
  absl::Status crop = kv->Crop(-1);
  EXPECT_EQ(crop.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(crop.message(), HasSubstr("Mamba state cannot be cropped"));
  EXPECT_TRUE(kv->Crop(0).ok());
  EXPECT_EQ(kv->SeqLength(), 6);
  // A rollback point shares the states, which the forward replaces instead of writing into.
  auto& layer = static_cast<cache::MambaStateLayer&>(kv->layer(0));
  const at::Tensor before = layer.ssm_state().clone();
  auto point = layer.RollbackPoint();
  RunOn(*model, kv.get(), {9});
  EXPECT_GT(MaxAbsDiff(layer.ssm_state(), before), 0.0f);
  layer.RestoreRollbackPoint(std::move(point));
  EXPECT_EQ(layer.SeqLength(), 6);
  EXPECT_EQ(MaxAbsDiff(layer.ssm_state(), before), 0.0f);
  EXPECT_FALSE(layer.Update(at::zeros({1, 1, 1, 1}), at::zeros({1, 1, 1, 1})).ok());
}

// A cached beam search (rows reordered by the search's parents each step) gives what a search
// that recomputes every beam from its tokens without a cache gives.
TEST(MambaModelTest, BeamsReorderStatesByRow) {
  auto model = LoadTinyMamba();
  ASSERT_NE(model, nullptr);
  const int64_t vocab = model->info().vocab_size;
  const std::vector<int32_t> prompt = Prompt(9, 2);
  BeamSearchOptions options;
  options.num_beams = 4;
  options.num_return_sequences = 4;
  options.max_new_tokens = 8;
  ASSERT_TRUE(options.Validate().ok());

  // Cached.
  BeamSearch cached(options, prompt);
  auto kv = DynamicCache(*model);
  at::Tensor logits = RunOn(*model, kv.get(), prompt)[-1].contiguous();
  bool permuted = false;
  while (true) {
    BeamSearch::Step step;
    ASSERT_TRUE(
        cached
            .Advance({logits.data_ptr<float>(), static_cast<size_t>(logits.numel())}, vocab, &step)
            .ok());
    if (step.done) break;
    if (kv->BatchSize() == 1) {
      ASSERT_TRUE(kv->RepeatInterleave(options.num_beams).ok());
    } else {
      std::vector<int64_t> parents = step.parents;
      for (size_t i = 0; i < parents.size(); ++i) permuted |= parents[i] != int64_t(i);
      ASSERT_TRUE(kv->Reorder(at::tensor(parents, at::kLong)).ok());
    }
    logits = RunOn(*model, kv.get(), step.tokens, options.num_beams).squeeze(1).contiguous();
  }
  EXPECT_TRUE(permuted) << "the test needs a step whose parents are not the identity";

  // Cold: every beam's logits from its whole sequence.
  BeamSearch cold(options, prompt);
  std::vector<std::vector<int32_t>> beams = {prompt};
  logits = ColdLogits(*model, prompt)[-1].contiguous();
  while (true) {
    BeamSearch::Step step;
    ASSERT_TRUE(
        cold.Advance({logits.data_ptr<float>(), static_cast<size_t>(logits.numel())}, vocab, &step)
            .ok());
    if (step.done) break;
    std::vector<std::vector<int32_t>> next;
    std::vector<at::Tensor> rows;
    for (size_t i = 0; i < step.tokens.size(); ++i) {
      next.push_back(beams[beams.size() == 1 ? 0 : step.parents[i]]);
      next.back().push_back(step.tokens[i]);
      rows.push_back(ColdLogits(*model, next.back())[-1]);
    }
    beams = std::move(next);
    logits = at::stack(rows, 0).contiguous();
  }
  const std::vector<BeamHypothesis> a = cached.Finalize();
  const std::vector<BeamHypothesis> b = cold.Finalize();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "hypothesis " << i;
    EXPECT_NEAR(a[i].score, b[i].score, 1e-4) << "hypothesis " << i;
  }
}

TEST(MambaModelTest, StrategiesThatNeedKeysAndValuesAreRefusedByName) {
  auto model = LoadTinyMamba();
  ASSERT_NE(model, nullptr);
  const auto& layers = model->info().layer_specs;
  for (const char* impl : {"static", "offloaded", "offloaded_static", "quantized"}) {
    auto spec = cache::CacheSpec::Parse(impl, {}, true, 64);
    ASSERT_TRUE(spec.ok()) << impl << ": " << spec.status();
    absl::Status fits = cache::CheckSpecForModel(*spec, layers, model->info().head_dim);
    EXPECT_EQ(fits.code(), absl::StatusCode::kInvalidArgument) << impl;
    EXPECT_THAT(fits.message(), HasSubstr(absl::StrCat("cache_implementation '", impl, "'")));
    EXPECT_THAT(fits.message(), HasSubstr("mamba family"));
    EXPECT_THAT(fits.message(), HasSubstr("keys/values"));
    EXPECT_FALSE(cache::MakeCache(*spec, layers).ok()) << impl;
  }
  EXPECT_TRUE(cache::CheckSpecForModel(*cache::CacheSpec::Parse("dynamic"), layers, 1).ok());
  EXPECT_TRUE(cache::CheckSpecForModel(*cache::CacheSpec::Parse("", {}, false), layers, 1).ok());
}

}  // namespace
}  // namespace kvserve::model
