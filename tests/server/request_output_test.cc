// Tests of RequestOutput without an engine: logits in, what the sink hears and how the cache's
// rows must change out, for one row (greedy, end of sequence, length, stop strings, held-back
// text at a cut), independent samples (expanding from the prompt's row, finished ones leaving)
// and beam search.
#include "server/request_output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kVocab = 300;

// Every piece of output, per sequence.
class RecordingSink final : public RequestSink {
 public:
  void OnOutput(const SequenceOutput& output) override {
    if (static_cast<int>(text.size()) <= output.index) {
      text.resize(output.index + 1);
      tokens.resize(output.index + 1);
      finish.resize(output.index + 1);
    }
    text[output.index] += output.text;
    tokens[output.index].insert(tokens[output.index].end(), output.token_ids.begin(),
                                output.token_ids.end());
    if (output.finish) finish[output.index] = output.finish;
    logprobs += static_cast<int>(output.logprobs.size());
  }
  void OnFinish(const GenerationSummary&) override {}
  void OnError(const absl::Status&) override {}

  std::vector<std::string> text;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::optional<FinishReason>> finish;
  int logprobs = 0;
};

// [rows, vocab] logits whose argmax in row r is best[r].
at::Tensor Logits(const std::vector<int32_t>& best) {
  at::Tensor t = at::zeros({static_cast<int64_t>(best.size()), kVocab});
  for (size_t r = 0; r < best.size(); ++r) t[r][best[r]] = 10.0;
  return best.size() == 1 ? t[0] : t;
}

class RequestOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = *tokenizer::Tokenizer::FromJson(tokenizer::MakeTinyTokenizerJson(kVocab),
                                                 tokenizer::MakeTinyTokenizerConfigJson());
    model_.eos_token_ids = {tokenizer::kTinyEosId};
    model_.vocab_size = kVocab;
    model_.tokenizer = tokenizer_.get();
    request_.prompt_ids = {tokenizer::kTinyBosId, 'h'};
    request_.max_new_tokens = 4;
  }

  std::unique_ptr<RequestOutput> Start() {
    absl::StatusOr<std::unique_ptr<RequestOutput>> out =
        RequestOutput::Start(request_, request_.prompt_ids, &model_, &sink_);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? std::move(*out) : nullptr;
  }

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  OutputModel model_;
  GenerationRequest request_;
  RecordingSink sink_;
};

TEST_F(RequestOutputTest, OneRowHandsOutTextAndEndsAtLengthOrEndOfSequence) {
  auto out = Start();
  ASSERT_FALSE(out->multi_row());
  absl::StatusOr<OutputStep> step = out->OnLogits(Logits({'o'}));
  ASSERT_TRUE(step.ok());
  EXPECT_FALSE(step->finished);
  EXPECT_EQ(step->tokens_sampled, 1);
  EXPECT_THAT(step->row_changes, IsEmpty());
  step = out->OnLogits(Logits({'k'}));
  EXPECT_THAT(out->tokens(), ElementsAre(tokenizer::kTinyBosId, 'h', 'o', 'k'));
  step = out->OnLogits(Logits({tokenizer::kTinyEosId}));
  ASSERT_TRUE(step->finished);
  EXPECT_EQ(*step->finished, FinishReason::kEos);
  EXPECT_EQ(sink_.text[0], "ok");
  EXPECT_EQ(out->num_generated(), 3);
  EXPECT_EQ(out->completion_tokens(), 3);

  request_.ignore_eos = true;
  sink_ = {};
  auto longer = Start();
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(longer->OnLogits(Logits({'a'}))->finished);
  EXPECT_EQ(*longer->OnLogits(Logits({tokenizer::kTinyEosId}))->finished, FinishReason::kLength);
}

TEST_F(RequestOutputTest, AStopStringEndsTheSequenceAndIsCutFromTheText) {
  request_.stop_strings = {"cd"};
  auto out = Start();
  EXPECT_FALSE(out->OnLogits(Logits({'a'}))->finished);
  EXPECT_FALSE(out->OnLogits(Logits({'c'}))->finished);
  EXPECT_EQ(*out->OnLogits(Logits({'d'}))->finished, FinishReason::kStop);
  EXPECT_EQ(sink_.text[0], "a");
}

TEST_F(RequestOutputTest, ACutReleasesWhatTheStopMatcherHeldBack) {
  request_.stop_strings = {"xyz"};
  auto out = Start();
  ASSERT_TRUE(out->OnLogits(Logits({'x'})).ok());
  EXPECT_EQ(sink_.text[0], "");  // could start "xyz"
  EXPECT_EQ(out->Cut(FinishReason::kCancelled), FinishReason::kCancelled);
  EXPECT_EQ(sink_.text[0], "x");
}

TEST_F(RequestOutputTest, SamplesExpandFromThePromptsRowAndFinishedOnesLeave) {
  request_.sampling.do_sample = true;
  request_.sampling.temperature = 0.01;
  request_.num_return_sequences = 3;
  auto out = Start();
  ASSERT_TRUE(out->multi_row());
  EXPECT_FALSE(out->decoding_rows());
  // The first step draws all three from the prompt's one row.
  absl::StatusOr<OutputStep> step = out->OnLogits(Logits({'a'}));
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->tokens_sampled, 3);
  ASSERT_EQ(step->row_changes.size(), 1u);
  EXPECT_EQ(step->row_changes[0].repeats, 3);
  EXPECT_EQ(out->rows(), 3);
  EXPECT_TRUE(out->decoding_rows());
  // Sample 1 ends; its row leaves the batch.
  step = out->OnLogits(Logits({'b', tokenizer::kTinyEosId, 'c'}));
  ASSERT_TRUE(step.ok());
  ASSERT_EQ(step->row_changes.size(), 1u);
  EXPECT_THAT(step->row_changes[0].parents, ElementsAre(0, 2));
  EXPECT_EQ(step->new_rows, 2);
  EXPECT_THAT(out->row_tokens(), ElementsAre('b', 'c'));
  EXPECT_EQ(sink_.finish[1], FinishReason::kEos);
  // The others end at the length limit... or by a cut, with what they have.
  EXPECT_EQ(out->Cut(FinishReason::kCancelled), FinishReason::kCancelled);
  EXPECT_EQ(sink_.text[0], "ab");
  EXPECT_EQ(sink_.text[2], "ac");
  EXPECT_EQ(out->completion_tokens(), 6);  // the end-of-sequence token counts
}

TEST_F(RequestOutputTest, BeamsRepeatThePromptThenReorderAndEndWithTheBest) {
  request_.num_beams = 2;
  request_.num_return_sequences = 2;
  request_.max_new_tokens = 2;
  auto out = Start();
  absl::StatusOr<OutputStep> step = out->OnLogits(Logits({'a'}));
  ASSERT_TRUE(step.ok());
  ASSERT_EQ(step->row_changes.size(), 1u);
  EXPECT_EQ(step->row_changes[0].repeats, 2);
  EXPECT_EQ(out->rows(), 2);
  step = out->OnLogits(Logits({'b', 'c'}));
  ASSERT_TRUE(step.ok());
  ASSERT_TRUE(step->finished);
  EXPECT_EQ(sink_.text.size(), 2u);
  EXPECT_EQ(sink_.tokens[0].size(), 2u);
}

TEST_F(RequestOutputTest, RefusedSamplingIsInvalidArgumentNamingSampling) {
  request_.sampling.do_sample = true;
  request_.sampling.top_p = 0;
  absl::StatusOr<std::unique_ptr<RequestOutput>> out =
      RequestOutput::Start(request_, request_.prompt_ids, &model_, &sink_);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), ::testing::StartsWith("sampling: "));
}

}  // namespace
}  // namespace kvserve::server
