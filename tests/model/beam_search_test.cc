// Tests for BeamSearch (Transformers' scorer rules) and the log-probability helpers, on toy
// "models": functions from the tokens generated so far to a row of logits.
#include "model/beam_search.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <vector>

namespace kvserve::model {
namespace {

using Toy = std::function<std::vector<float>(const std::vector<int32_t>&)>;

// Logits whose softmax is `probs` (which need not sum to 1: the softmax normalises).
std::vector<float> Logits(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// Pseudo-random logits of a hash of the tokens so far.
Toy Hashed(int vocab, uint64_t salt) {
  return [vocab, salt](const std::vector<int32_t>& tokens) {
    uint64_t h = 1469598103934665603ULL ^ salt;
    for (int32_t t : tokens) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ULL;
    std::vector<float> logits(vocab);
    for (int i = 0; i < vocab; ++i) {
      h = h * 6364136223846793005ULL + 1442695040888963407ULL;
      logits[i] = static_cast<float>((h >> 40) % 1000) / 150.0f;
    }
    return logits;
  };
}

double LogProb(const std::vector<float>& logits, int32_t token) {
  std::vector<float> lp;
  LogSoftmax(logits, &lp);
  return lp[token];
}

// Drives a search over `toy` the way the engine does: rows follow each step's parents.
std::vector<BeamHypothesis> Search(const BeamSearchOptions& options, const Toy& toy, int vocab,
                                   int64_t* steps = nullptr) {
  EXPECT_TRUE(options.Validate().ok());
  BeamSearch search(options, {});
  std::vector<std::vector<int32_t>> rows = {{}};
  while (!search.done()) {
    std::vector<float> logits;
    for (const auto& row : rows) {
      const std::vector<float> l = toy(row);
      logits.insert(logits.end(), l.begin(), l.end());
    }
    BeamSearch::Step step;
    const absl::Status s = search.Advance(logits, vocab, &step);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || step.done) break;
    EXPECT_EQ(step.parents.size(), static_cast<size_t>(options.num_beams));
    std::vector<std::vector<int32_t>> next;
    for (size_t i = 0; i < step.parents.size(); ++i) {
      next.push_back(rows[step.parents[i]]);
      next.back().push_back(step.tokens[i]);
    }
    rows = std::move(next);
  }
  if (steps != nullptr) *steps = search.steps();
  return search.Finalize();
}

// What every returned hypothesis must satisfy: its score is the sum of its tokens'
// log-probabilities over length^penalty, it ended exactly when its last token is an end
// token, and the list is sorted best first.
void CheckInvariants(const std::vector<BeamHypothesis>& best, const BeamSearchOptions& o,
                     const Toy& toy) {
  for (size_t j = 0; j < best.size(); ++j) {
    const BeamHypothesis& h = best[j];
    double sum = 0;
    std::vector<int32_t> prefix;
    for (int32_t t : h.tokens) {
      sum += LogProb(toy(prefix), t);
      prefix.push_back(t);
    }
    const double expected = sum / std::pow(static_cast<double>(h.tokens.size()), o.length_penalty);
    EXPECT_NEAR(h.score, expected, 1e-4) << "hypothesis " << j;
    const bool ends = !h.tokens.empty() && std::find(o.end_token_ids.begin(), o.end_token_ids.end(),
                                                     h.tokens.back()) != o.end_token_ids.end();
    EXPECT_EQ(h.ended, ends) << "hypothesis " << j;
    if (!h.ended) EXPECT_EQ(static_cast<int64_t>(h.tokens.size()), o.max_new_tokens);
    if (j > 0) EXPECT_GE(best[j - 1].score, h.score);
  }
}

TEST(BeamSearchTest, OneBeamIsGreedy) {
  const int vocab = 16;
  const Toy toy = Hashed(vocab, 3);
  BeamSearchOptions o{.num_beams = 1, .max_new_tokens = 7};
  const std::vector<BeamHypothesis> best = Search(o, toy, vocab);
  ASSERT_EQ(best.size(), 1u);
  std::vector<int32_t> greedy;
  for (int i = 0; i < 7; ++i) {
    const std::vector<float> l = toy(greedy);
    greedy.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
  }
  EXPECT_EQ(best[0].tokens, greedy);
  CheckInvariants(best, o, toy);
}

// Greedy takes the likelier first token (0.6) into a flat continuation (best 0.3: 0.18); two
// beams keep the 0.4 token, whose continuation is 0.9 (0.36).
TEST(BeamSearchTest, TwoBeamsFindWhatGreedyMisses) {
  const Toy toy = [](const std::vector<int32_t>& t) {
    if (t.empty()) return Logits({0.6, 0.4, 1e-6, 1e-6});
    if (t[0] == 0) return Logits({0.3, 0.3, 0.2, 0.2});
    return Logits({0.9, 0.05, 0.03, 0.02});
  };
  BeamSearchOptions o{.num_beams = 2, .num_return_sequences = 2, .max_new_tokens = 2};
  const std::vector<BeamHypothesis> best = Search(o, toy, 4);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_THAT(best[0].tokens, ::testing::ElementsAre(1, 0));
  EXPECT_NEAR(best[0].score, std::log(0.36) / 2, 1e-5);
  // Of the 0.18 continuations of token 0, the lower id kept its beam.
  EXPECT_THAT(best[1].tokens, ::testing::ElementsAre(0, 0));
  CheckInvariants(best, o, toy);

  BeamSearchOptions greedy = o;
  greedy.num_beams = 1;
  greedy.num_return_sequences = 1;
  EXPECT_THAT(Search(greedy, toy, 4)[0].tokens, ::testing::ElementsAre(0, 0));
}

// An end token among the best num_beams candidates finishes a hypothesis; ranked below
// them it is skipped, even where it would have been the second-best sequence.
TEST(BeamSearchTest, EndTokensRankedBelowTheBeamsAreSkipped) {
  // Step 1: beams [0] (0.4) and [1] (0.3). Step 2: [0, 3] (0.28, an end, rank 0) is a
  // hypothesis, [1, 0] (0.15) a beam, [1, 3] (0.12, an end, rank 2) skipped, [0, 0] (0.04) a
  // beam. Step 3 ends by length: [1, 0, 0] (0.075) joins the hypotheses. By the sum of
  // log-probabilities (length_penalty 0), [1, 3] would have been second.
  const Toy toy = [](const std::vector<int32_t>& t) {
    if (t.empty()) return Logits({0.4, 0.3, 0.2, 0.1});
    if (t.size() == 1) {
      return t[0] == 0 ? Logits({0.1, 0.1, 0.1, 0.7}) : Logits({0.5, 0.05, 0.05, 0.4});
    }
    return Logits({0.5, 0.2, 0.2, 0.1});
  };
  BeamSearchOptions o{.num_beams = 2,
                      .num_return_sequences = 2,
                      .early_stopping = EarlyStopping::kNever,
                      .length_penalty = 0.0,
                      .max_new_tokens = 3,
                      .end_token_ids = {3}};
  int64_t steps = 0;
  const std::vector<BeamHypothesis> best = Search(o, toy, 4, &steps);
  EXPECT_EQ(steps, 3);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_THAT(best[0].tokens, ::testing::ElementsAre(0, 3));
  EXPECT_TRUE(best[0].ended);
  EXPECT_NEAR(best[0].score, std::log(0.4 * 0.7), 1e-5);
  EXPECT_THAT(best[1].tokens, ::testing::ElementsAre(1, 0, 0));
  EXPECT_FALSE(best[1].ended);
  EXPECT_NEAR(best[1].score, std::log(0.3 * 0.5 * 0.5), 1e-5);
  CheckInvariants(best, o, toy);
}

// The early-stopping modes differ where they should: `true` stops with the first num_beams
// finished hypotheses; `never` keeps searching while a running beam could still win at the
// longest length, and finds the better long sequence.
TEST(BeamSearchTest, EarlyStoppingModes) {
  // Ends (token 3) are likely early, then a continuation of token 0 is near-certain.
  const Toy toy = [](const std::vector<int32_t>& t) {
    if (t.empty()) return Logits({0.45, 0.05, 0.05, 0.45});
    if (t.back() == 0) return Logits({0.97, 0.01, 0.01, 0.01});
    return Logits({0.2, 0.2, 0.2, 0.4});
  };
  BeamSearchOptions o{.num_beams = 2,
                      .num_return_sequences = 2,
                      .early_stopping = EarlyStopping::kTrue,
                      .length_penalty = 1.0,
                      .max_new_tokens = 6,
                      .end_token_ids = {3}};
  int64_t true_steps = 0;
  const std::vector<BeamHypothesis> stopped = Search(o, toy, 4, &true_steps);
  CheckInvariants(stopped, o, toy);
  o.early_stopping = EarlyStopping::kNever;
  int64_t never_steps = 0;
  const std::vector<BeamHypothesis> searched = Search(o, toy, 4, &never_steps);
  CheckInvariants(searched, o, toy);
  EXPECT_LT(true_steps, never_steps);
  ASSERT_FALSE(searched.empty());
  ASSERT_FALSE(stopped.empty());
  // [0, 0, 0, 0, 0, 0] scores log(0.45 * 0.97^5) / 6 ~ -0.16, far better than [3] (-0.80).
  EXPECT_GT(searched[0].score, stopped[0].score);
  EXPECT_EQ(searched[0].tokens, std::vector<int32_t>(6, 0));
}

// The length penalty decides between a short and a long finished hypothesis: 0 ranks by the
// sum of log-probabilities (the short one), 2 by the mean over length^2 (the long one).
TEST(BeamSearchTest, LengthPenaltyOrdersHypotheses) {
  const Toy toy = [](const std::vector<int32_t>& t) {
    if (t.empty()) return Logits({0.5, 0.05, 0.05, 0.4});
    if (t.size() < 3) return Logits({0.9, 0.02, 0.02, 0.06});
    return Logits({0.02, 0.02, 0.02, 0.94});
  };
  for (double penalty : {0.0, 2.0}) {
    SCOPED_TRACE(penalty);
    BeamSearchOptions o{.num_beams = 2,
                        .num_return_sequences = 2,
                        .early_stopping = EarlyStopping::kNever,
                        .length_penalty = penalty,
                        .max_new_tokens = 6,
                        .end_token_ids = {3}};
    const std::vector<BeamHypothesis> best = Search(o, toy, 4);
    CheckInvariants(best, o, toy);
    ASSERT_GE(best.size(), 1u);
    if (penalty == 0.0) {
      EXPECT_THAT(best[0].tokens, ::testing::ElementsAre(3));
    } else {
      EXPECT_GT(best[0].tokens.size(), 1u);
    }
  }
}

// Many random toys and option combinations: the invariants hold, num_return_sequences are
// returned, and more beams never return a worse best sequence when nothing ends early.
TEST(BeamSearchTest, RandomToysKeepTheInvariants) {
  const int vocab = 24;
  for (uint64_t salt = 0; salt < 12; ++salt) {
    const Toy toy = Hashed(vocab, salt);
    for (EarlyStopping e : {EarlyStopping::kFalse, EarlyStopping::kTrue, EarlyStopping::kNever}) {
      for (double lp : {0.5, 1.0, 2.0}) {
        for (int beams : {1, 2, 4, 8}) {
          BeamSearchOptions o{.num_beams = beams,
                              .num_return_sequences = std::min(beams, 3),
                              .early_stopping = e,
                              .length_penalty = lp,
                              .max_new_tokens = 5,
                              .end_token_ids = {5}};
          const std::vector<BeamHypothesis> best = Search(o, toy, vocab);
          EXPECT_EQ(best.size(), static_cast<size_t>(o.num_return_sequences));
          CheckInvariants(best, o, toy);
        }
      }
    }
  }
}

TEST(BeamSearchTest, RepetitionPenaltyAppliesToEachBeamsContext) {
  // Token 0 is the likeliest everywhere; a strong penalty moves every beam off a repeat.
  const Toy toy = [](const std::vector<int32_t>&) { return Logits({0.4, 0.3, 0.2, 0.1}); };
  BeamSearchOptions o{.num_beams = 2, .num_return_sequences = 2, .max_new_tokens = 2};
  o.repetition_penalty = 10.0;
  BeamSearch search(o, /*prompt=*/{1});
  std::vector<float> logits = toy({});
  BeamSearch::Step step;
  ASSERT_TRUE(search.Advance(logits, 4, &step).ok());
  // Token 1 is in the prompt: penalised, so beams are [0] and [2].
  EXPECT_THAT(step.tokens, ::testing::ElementsAre(0, 2));
  std::vector<float> two = toy({0});
  const std::vector<float> more = toy({2});
  two.insert(two.end(), more.begin(), more.end());
  ASSERT_TRUE(search.Advance(two, 4, &step).ok());
  ASSERT_TRUE(step.done);
  const std::vector<BeamHypothesis> best = search.Finalize();
  ASSERT_EQ(best.size(), 2u);
  // Each beam's own tokens are penalised too: [0, 2] and [2, 0] (equal scores; the one added
  // later first, as Transformers' stable sort and pop() give), never [0, 0] or [2, 2].
  EXPECT_THAT(best[0].tokens, ::testing::ElementsAre(2, 0));
  EXPECT_THAT(best[1].tokens, ::testing::ElementsAre(0, 2));
  EXPECT_EQ(best[0].score, best[1].score);
}

TEST(BeamSearchTest, ValidationAndShapeErrors) {
  EXPECT_FALSE((BeamSearchOptions{.num_beams = 0}).Validate().ok());
  EXPECT_THAT(
      std::string(
          (BeamSearchOptions{.num_beams = 2, .num_return_sequences = 3}).Validate().message()),
      ::testing::HasSubstr("num_return_sequences"));
  EXPECT_FALSE((BeamSearchOptions{.length_penalty = NAN}).Validate().ok());
  BeamSearch search(BeamSearchOptions{.num_beams = 2, .max_new_tokens = 3}, {});
  BeamSearch::Step step;
  const std::vector<float> logits(7, 0.0f);
  EXPECT_EQ(search.Advance(logits, 4, &step).code(), absl::StatusCode::kInvalidArgument);
  // Two beams need 4 candidates: a vocabulary of 3 cannot give them.
  const std::vector<float> three(3, 0.0f);
  EXPECT_EQ(search.Advance(three, 3, &step).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LogprobsTest, EqualAtenLogSoftmaxAndRankTheTop) {
  const std::vector<float> logits = {1.5f, -2.0f, 3.25f, 3.25f, 0.0f, -7.5f};
  std::vector<float> mine;
  LogSoftmax(logits, &mine);
  const at::Tensor reference =
      at::log_softmax(at::tensor(at::ArrayRef<float>(logits)).to(at::kDouble), 0);
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(mine[i], reference[i].item<double>(), 1e-6) << i;
  }
  const PositionLogprobs p = LogprobsAt(mine, 4, 3);
  EXPECT_EQ(p.chosen.token_id, 4);
  EXPECT_FLOAT_EQ(p.chosen.logprob, mine[4]);
  ASSERT_EQ(p.top.size(), 3u);
  // Ties go to the lower id.
  EXPECT_EQ(p.top[0].token_id, 2);
  EXPECT_EQ(p.top[1].token_id, 3);
  EXPECT_EQ(p.top[2].token_id, 0);
  EXPECT_TRUE(LogprobsAt(mine, 1, 0).top.empty());
  // NaN is impossible, not a poison.
  std::vector<float> with_nan = {0.0f, NAN, 0.0f};
  LogSoftmax(with_nan, &mine);
  EXPECT_NEAR(mine[0], std::log(0.5), 1e-6);
  EXPECT_TRUE(std::isinf(mine[1]) && mine[1] < 0);
}

}  // namespace
}  // namespace kvserve::model
