// Tests of Scheduler: admission order, chunked prefill, decode priority, limits, abort, the
// Update protocol, the admission hook, and a full run driving a FakeModel.
#include "server/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "cache/kv_cache.h"
#include "tests/support/fake_model.h"

namespace kvserve::server {
namespace {

using model::testing::FakeModel;
using model::testing::FakeModelOptions;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A plan as text, one entry per sequence: "<id>:<P|D><tokens>@<start>", then "s" when it
// samples and "+" when newly admitted. Rejections follow as "!<id>".
std::string Describe(const StepPlan& plan) {
  std::vector<std::string> parts;
  for (const ScheduledSequence& s : plan.sequences) {
    parts.push_back(absl::StrCat(s.id, ":", s.is_prefill ? "P" : "D", s.num_tokens, "@",
                                 s.start_position, s.samples ? "s" : "",
                                 s.newly_admitted ? "+" : "",
                                 s.rows > 1 ? absl::StrCat("x", s.rows) : ""));
  }
  for (RequestId id : plan.rejected) parts.push_back(absl::StrCat("!", id));
  return absl::StrJoin(parts, " ");
}

std::unique_ptr<Scheduler> MakeScheduler(SchedulerOptions options,
                                         std::unique_ptr<AdmissionPolicy> policy = nullptr) {
  auto scheduler = Scheduler::Create(options, std::move(policy));
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return scheduler.ok() ? *std::move(scheduler) : nullptr;
}

// Schedules one step and returns its description ("" for an empty plan).
std::string Step(Scheduler& scheduler) {
  absl::StatusOr<StepPlan> plan = scheduler.Schedule();
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? Describe(*plan) : plan.status().ToString();
}

// Reports every sequence of the plan in flight as unfinished, except those in `finished`.
absl::Status Finish(Scheduler& scheduler, const std::vector<RequestId>& scheduled,
                    const std::vector<RequestId>& finished = {}) {
  std::vector<SequenceResult> results;
  for (RequestId id : scheduled) {
    const bool done = std::find(finished.begin(), finished.end(), id) != finished.end();
    results.push_back({.id = id, .finished = done});
  }
  return scheduler.Update(results);
}

TEST(SchedulerTest, CreateValidatesOptions) {
  const auto expect_invalid = [](SchedulerOptions options, const char* field) {
    auto scheduler = Scheduler::Create(options);
    ASSERT_FALSE(scheduler.ok()) << field;
    EXPECT_EQ(scheduler.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(scheduler.status().message()), HasSubstr(field));
  };
  expect_invalid({.max_batch_size = 0}, "max_batch_size");
  expect_invalid({.max_batch_size = 8, .max_batch_tokens = 7}, "max_batch_tokens");
  expect_invalid({.max_queue = 0}, "max_queue");

  auto scheduler = Scheduler::Create({});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  EXPECT_EQ((*scheduler)->options().max_batch_size, 32);
  EXPECT_EQ((*scheduler)->options().max_batch_tokens, 2048);
  EXPECT_EQ((*scheduler)->options().max_queue, 256);
  EXPECT_TRUE(Scheduler::Create({.max_batch_size = 4, .max_batch_tokens = 4, .max_queue = 1}).ok());
}

TEST(SchedulerTest, AddValidatesAndChangesNothingOnFailure) {
  auto s = MakeScheduler({});
  ASSERT_NE(s, nullptr);
  const auto expect_invalid = [&](absl::Status status, const char* field) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(status.message()), HasSubstr(field));
  };
  expect_invalid(s->Add(1, 0, 4), "num_prompt_tokens");
  expect_invalid(s->Add(1, 4, 0), "max_new_tokens");
  expect_invalid(s->Add(1, 4, 4, -1), "num_cached_tokens");
  expect_invalid(s->Add(1, 4, 4, 4), "num_cached_tokens");
  EXPECT_EQ(s->num_waiting(), 0);
  EXPECT_FALSE(s->Contains(1));

  ASSERT_TRUE(s->Add(1, 4, 4, 3).ok());
  EXPECT_EQ(s->Add(1, 5, 5).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s->num_waiting(), 1);
  EXPECT_EQ(s->num_generated(1), 0);
  EXPECT_EQ(s->num_generated(2), std::nullopt);
}

TEST(SchedulerTest, EmptySchedulerPlansNothingAndExpectsNoUpdate) {
  auto s = MakeScheduler({});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Step(*s), "");
  EXPECT_FALSE(s->has_plan_in_flight());
  EXPECT_EQ(s->Update({}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SchedulerTest, AdmitsFirstComeFirstServedWithinBatchSize) {
  auto s = MakeScheduler({.max_batch_size = 2, .max_batch_tokens = 100});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 3, 4).ok());
  ASSERT_TRUE(s->Add(2, 2, 4).ok());
  ASSERT_TRUE(s->Add(3, 4, 4).ok());

  EXPECT_EQ(Step(*s), "1:P3@0s+ 2:P2@0s+");
  EXPECT_EQ(s->num_running(), 2);
  EXPECT_EQ(s->num_waiting(), 1);
  ASSERT_TRUE(Finish(*s, {1, 2}).ok());
  EXPECT_EQ(s->num_generated(1), 1);

  // The batch is full: request 3 waits while 1 and 2 decode.
  EXPECT_EQ(Step(*s), "1:D1@3s 2:D1@2s");
  ASSERT_TRUE(Finish(*s, {1, 2}, {1}).ok());
  EXPECT_FALSE(s->Contains(1));

  // 1's slot goes to 3.
  EXPECT_EQ(Step(*s), "2:D1@3s 3:P4@0s+");
  ASSERT_TRUE(Finish(*s, {2, 3}).ok());
  EXPECT_EQ(Step(*s), "2:D1@4s 3:D1@4s");
  EXPECT_EQ(s->num_generated(2), 3);
}

TEST(SchedulerTest, BatchSizeLimitHoldsUnderLoad) {
  auto s = MakeScheduler({.max_batch_size = 3, .max_batch_tokens = 100});
  ASSERT_NE(s, nullptr);
  for (RequestId id = 1; id <= 7; ++id) ASSERT_TRUE(s->Add(id, 2, 2).ok());
  // Every request prefills in one step and decodes once: finished after two steps each.
  std::vector<std::string> steps;
  while (s->num_running() + s->num_waiting() > 0) {
    absl::StatusOr<StepPlan> plan = s->Schedule();
    ASSERT_TRUE(plan.ok());
    EXPECT_LE(plan->sequences.size(), 3u);
    EXPECT_LE(s->num_running(), 3);
    steps.push_back(Describe(*plan));
    std::vector<SequenceResult> results;
    for (const ScheduledSequence& seq : plan->sequences) {
      results.push_back({.id = seq.id, .finished = !seq.is_prefill});
    }
    ASSERT_TRUE(s->Update(results).ok());
  }
  EXPECT_THAT(steps, ElementsAre("1:P2@0s+ 2:P2@0s+ 3:P2@0s+", "1:D1@2s 2:D1@2s 3:D1@2s",
                                 "4:P2@0s+ 5:P2@0s+ 6:P2@0s+", "4:D1@2s 5:D1@2s 6:D1@2s",
                                 "7:P2@0s+", "7:D1@2s"));
}

TEST(SchedulerTest, LongPrefillIsChunkedToTheTokenBudget) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 20, 3).ok());
  EXPECT_EQ(Step(*s), "1:P8@0+");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(s->num_generated(1), 0);  // a chunk short of the prompt's end samples nothing
  EXPECT_EQ(Step(*s), "1:P8@8");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(Step(*s), "1:P4@16s");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(s->num_generated(1), 1);
  EXPECT_EQ(Step(*s), "1:D1@20s");
}

TEST(SchedulerTest, DecodesGoFirstAndPrefillsTakeTheRestOfTheBudget) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 2, 10).ok());
  EXPECT_EQ(Step(*s), "1:P2@0s+");
  ASSERT_TRUE(Finish(*s, {1}).ok());

  // A long prompt arrives; 1 keeps decoding every step while 2 prefills in 7-token chunks.
  ASSERT_TRUE(s->Add(2, 20, 10).ok());
  EXPECT_EQ(Step(*s), "1:D1@2s 2:P7@0+");
  ASSERT_TRUE(Finish(*s, {1, 2}).ok());
  ASSERT_TRUE(s->Add(3, 5, 10).ok());
  // A slot is free for 3, but 2's chunk spends the budget: 3 keeps waiting.
  EXPECT_EQ(Step(*s), "1:D1@3s 2:P7@7");
  EXPECT_EQ(s->num_waiting(), 1);
  ASSERT_TRUE(Finish(*s, {1, 2}).ok());
  // 2's last 6 tokens leave one token of budget, which 3's first chunk takes.
  EXPECT_EQ(Step(*s), "1:D1@4s 2:P6@14s 3:P1@0+");
  ASSERT_TRUE(Finish(*s, {1, 2, 3}).ok());
  EXPECT_EQ(Step(*s), "1:D1@5s 2:D1@20s 3:P4@1s");
  ASSERT_TRUE(Finish(*s, {1, 2, 3}).ok());
  EXPECT_EQ(Step(*s), "1:D1@6s 2:D1@21s 3:D1@5s");
}

// Jump-forward: tokens a request appends after its sampled one run with its next decode, in one
// step; what the budget cannot take this step runs in the next one, which alone samples.
TEST(SchedulerTest, ForcedTokensRunWithTheNextDecode) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 2, 20).ok());
  EXPECT_EQ(Step(*s), "1:P2@0s+");
  ASSERT_TRUE(s->Update({{.id = 1, .finished = false, .forced_tokens = 3}}).ok());
  EXPECT_EQ(s->num_generated(1), 4);
  EXPECT_EQ(Step(*s), "1:D4@2s");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  // 10 forced tokens: 7 fit beside the sampled one; the step does not sample.
  EXPECT_EQ(Step(*s), "1:D1@6s");
  ASSERT_TRUE(s->Update({{.id = 1, .finished = false, .forced_tokens = 10}}).ok());
  EXPECT_EQ(Step(*s), "1:D8@7");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(s->num_generated(1), 16);
  EXPECT_EQ(Step(*s), "1:D3@15s");
  // Forcing past max_new_tokens without finishing is refused, as sampling past it is.
  EXPECT_EQ(s->Update({{.id = 1, .finished = false, .forced_tokens = 3}}).code(),
            absl::StatusCode::kInvalidArgument);
}

// Beams or samples of one request decode as rows: one token per row from the step after the
// prompt's; their rows are reserved in the token budget from admission on, so a request whose
// rows would not fit beside the running ones waits; rows only shrink.
TEST(SchedulerTest, RowsDecodeTogetherAndAreReservedAtAdmission) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Add(9, 3, 5, 0, PrefillMode::kChunked, 9).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Add(9, 3, 5, 0, PrefillMode::kChunked, 0).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s->Add(1, 3, 5, 0, PrefillMode::kChunked, 4).ok());
  EXPECT_EQ(Step(*s), "1:P3@0s+");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(Step(*s), "1:D1@3sx4");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  // 4 + 4 rows fit the 8 tokens: admitted, its chunk takes what the decode rows leave.
  ASSERT_TRUE(s->Add(2, 6, 5, 0, PrefillMode::kChunked, 4).ok());
  EXPECT_EQ(Step(*s), "1:D1@4sx4 2:P4@0+");
  ASSERT_TRUE(Finish(*s, {1, 2}).ok());
  // A one-row request would be a ninth row: it waits although the step has budget left.
  ASSERT_TRUE(s->Add(3, 2, 5).ok());
  EXPECT_EQ(Step(*s), "1:D1@5sx4 2:P2@4s");
  EXPECT_EQ(s->num_waiting(), 1);
  ASSERT_TRUE(Finish(*s, {1, 2}).ok());
  // Two of 1's samples ended: its rows shrink and 3 fits.
  EXPECT_EQ(s->SetRows(1, 3).code(), absl::StatusCode::kOk);
  EXPECT_EQ(s->SetRows(1, 2).code(), absl::StatusCode::kOk);
  EXPECT_EQ(s->SetRows(1, 3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->SetRows(77, 1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Step(*s), "1:D1@6sx2 2:D1@6sx4 3:P2@0s+");
  absl::StatusOr<StepPlan> plan = s->Schedule();
  EXPECT_FALSE(plan.ok());  // the previous plan is still in flight
}

TEST(SchedulerTest, WholePromptRequestWaitsForRoomThenPrefillsInOneStep) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 2, 10).ok());
  EXPECT_EQ(Step(*s), "1:P2@0s+");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  // 7 prompt tokens fit beside 1's decode: one chunk, not split.
  ASSERT_TRUE(s->Add(2, 7, 3, 0, PrefillMode::kWhole).ok());
  // 8 do not fit beside the decodes; 2 waits and blocks 4 behind it (FCFS).
  ASSERT_TRUE(s->Add(3, 8, 3, 0, PrefillMode::kWhole).ok());
  ASSERT_TRUE(s->Add(4, 1, 3).ok());
  EXPECT_EQ(Step(*s), "1:D1@2s 2:P7@0s+");
  ASSERT_TRUE(Finish(*s, {1, 2}).ok());
  EXPECT_EQ(Step(*s), "1:D1@3s 2:D1@7s");
  EXPECT_EQ(s->num_waiting(), 2);
  ASSERT_TRUE(Finish(*s, {1, 2}, /*finished=*/{1, 2}).ok());
  // Alone, a whole prompt may take the full budget.
  EXPECT_EQ(Step(*s), "3:P8@0s+");
}

TEST(SchedulerTest, WholePromptLongerThanTheBudgetRunsInAStepOfItsOwn) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 20, 3, 0, PrefillMode::kWhole).ok());
  ASSERT_TRUE(s->Add(2, 3, 3).ok());
  EXPECT_EQ(Step(*s), "1:P20@0s+");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(Step(*s), "1:D1@20s 2:P3@0s+");
}

TEST(SchedulerTest, HeadOfQueueBlocksLaterRequestsUntilAdmitted) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 20, 2).ok());
  ASSERT_TRUE(s->Add(2, 2, 2).ok());
  EXPECT_EQ(Step(*s), "1:P8@0+");
  EXPECT_EQ(s->num_waiting(), 1);
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(Step(*s), "1:P8@8");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(Step(*s), "1:P4@16s 2:P2@0s+");
}

TEST(SchedulerTest, CachedPromptTokensAreNotRecomputed) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 16});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 10, 5, 6).ok());
  ASSERT_TRUE(s->Add(2, 30, 5, 20).ok());
  EXPECT_EQ(Step(*s), "1:P4@6s+ 2:P10@20s+");
}

TEST(SchedulerTest, QueueLimitIsResourceExhausted) {
  auto s = MakeScheduler({.max_batch_size = 1, .max_batch_tokens = 8, .max_queue = 2});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 2, 4).ok());
  ASSERT_TRUE(s->Add(2, 2, 4).ok());
  absl::Status full = s->Add(3, 2, 4);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("queue is full"));
  EXPECT_FALSE(s->Contains(3));

  // Admission makes room in the queue (running requests do not count against it).
  EXPECT_EQ(Step(*s), "1:P2@0s+");
  EXPECT_TRUE(s->Add(3, 2, 4).ok());
  EXPECT_EQ(s->Add(4, 2, 4).code(), absl::StatusCode::kResourceExhausted);
  // So does an abort.
  EXPECT_TRUE(s->Abort(2));
  EXPECT_TRUE(s->Add(4, 2, 4).ok());
  EXPECT_EQ(s->num_waiting(), 2);
}

// A tenant at its running limit waits without blocking other tenants behind it; its queued
// requests beyond the limit are refused naming the flag; requests without a tenant are not
// limited.
TEST(SchedulerTest, PerTenantRunningAndQueuedLimits) {
  auto s = MakeScheduler({.max_batch_size = 8,
                          .max_batch_tokens = 100,
                          .max_running_per_tenant = 1,
                          .max_queued_per_tenant = 1});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 2, 4, 0, PrefillMode::kChunked, 1, "alice").ok());
  EXPECT_EQ(Step(*s), "1:P2@0s+");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  // Alice runs 1: her next waits (one may), a third is refused.
  ASSERT_TRUE(s->Add(2, 2, 4, 0, PrefillMode::kChunked, 1, "alice").ok());
  absl::Status refused = s->Add(3, 2, 4, 0, PrefillMode::kChunked, 1, "alice");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()),
              AllOf(HasSubstr("tenant 'alice'"), HasSubstr("--tenant-max-queued-requests")));
  // Bob and a request without a tenant pass alice's waiting one.
  ASSERT_TRUE(s->Add(4, 3, 4, 0, PrefillMode::kChunked, 1, "bob").ok());
  ASSERT_TRUE(s->Add(5, 1, 4).ok());
  ASSERT_TRUE(s->Add(6, 1, 4).ok());
  EXPECT_EQ(Step(*s), "1:D1@2s 4:P3@0s+ 5:P1@0s+ 6:P1@0s+");
  EXPECT_EQ(s->num_waiting(), 1);
  ASSERT_TRUE(Finish(*s, {1, 4, 5, 6}, {1}).ok());
  // Alice's first finished: her second is admitted.
  EXPECT_EQ(Step(*s), "4:D1@3s 5:D1@1s 6:D1@1s 2:P2@0s+");
  ASSERT_TRUE(Finish(*s, {4, 5, 6, 2}).ok());
  EXPECT_TRUE(s->Add(3, 2, 4, 0, PrefillMode::kChunked, 1, "alice").ok());
  // An abort gives the place back.
  EXPECT_TRUE(s->Abort(3));
  EXPECT_TRUE(s->Add(7, 2, 4, 0, PrefillMode::kChunked, 1, "alice").ok());
  EXPECT_EQ(s->num_waiting(), 1);
}

TEST(SchedulerTest, PerTenantLimitsMustNotBeNegative) {
  EXPECT_FALSE(Scheduler::Create({.max_running_per_tenant = -1}).ok());
  EXPECT_FALSE(Scheduler::Create({.max_queued_per_tenant = -1}).ok());
}

TEST(SchedulerTest, AbortWaitingRequest) {
  auto s = MakeScheduler({.max_batch_size = 1, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 2, 2).ok());
  ASSERT_TRUE(s->Add(2, 2, 2).ok());
  ASSERT_TRUE(s->Add(3, 2, 2).ok());
  EXPECT_EQ(Step(*s), "1:P2@0s+");
  EXPECT_TRUE(s->Abort(2));
  EXPECT_FALSE(s->Contains(2));
  EXPECT_FALSE(s->Abort(2));
  EXPECT_FALSE(s->Abort(99));
  EXPECT_EQ(s->num_waiting(), 1);
  ASSERT_TRUE(Finish(*s, {1}).ok());
  EXPECT_EQ(Step(*s), "1:D1@2s");
  ASSERT_TRUE(Finish(*s, {1}, {1}).ok());
  EXPECT_FALSE(s->Abort(1));  // finished already
  EXPECT_EQ(Step(*s), "3:P2@0s+");
}

TEST(SchedulerTest, AbortRunningRequestBetweenStepsFreesItsSlot) {
  auto s = MakeScheduler({.max_batch_size = 2, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 20, 4).ok());
  ASSERT_TRUE(s->Add(2, 3, 4).ok());
  ASSERT_TRUE(s->Add(3, 3, 4).ok());
  EXPECT_EQ(Step(*s), "1:P8@0+");
  ASSERT_TRUE(Finish(*s, {1}).ok());
  // Aborting 1 mid-prefill frees the budget and the slot for 2 and 3.
  EXPECT_TRUE(s->Abort(1));
  EXPECT_EQ(s->num_running(), 0);
  EXPECT_EQ(Step(*s), "2:P3@0s+ 3:P3@0s+");
}

TEST(SchedulerTest, AbortDuringAStepIgnoresItsResult) {
  auto s = MakeScheduler({.max_batch_size = 2, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 2, 4).ok());
  ASSERT_TRUE(s->Add(2, 2, 4).ok());
  ASSERT_TRUE(s->Add(3, 2, 4).ok());
  EXPECT_EQ(Step(*s), "1:P2@0s+ 2:P2@0s+");
  EXPECT_TRUE(s->Abort(1));  // the forward for 1 is already running
  EXPECT_EQ(s->num_running(), 1);
  // 1's result is accepted and ignored; 2 progresses.
  ASSERT_TRUE(Finish(*s, {1, 2}).ok());
  EXPECT_FALSE(s->Contains(1));
  EXPECT_EQ(s->num_generated(2), 1);
  EXPECT_EQ(Step(*s), "2:D1@2s 3:P2@0s+");

  // The aborted sequence's result may also be left out.
  EXPECT_TRUE(s->Abort(3));
  ASSERT_TRUE(Finish(*s, {2}).ok());
  EXPECT_EQ(Step(*s), "2:D1@3s");
}

TEST(SchedulerTest, UpdateProtocolIsCheckedAllOrNothing) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 2, 2).ok());
  ASSERT_TRUE(s->Add(2, 2, 2).ok());
  EXPECT_EQ(s->Update({}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Step(*s), "1:P2@0s+ 2:P2@0s+");
  EXPECT_TRUE(s->has_plan_in_flight());
  EXPECT_EQ(s->Schedule().status().code(), absl::StatusCode::kFailedPrecondition);

  const auto expect_invalid = [&](std::vector<SequenceResult> results, const char* what) {
    absl::Status status = s->Update(results);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(status.message()), HasSubstr(what));
    EXPECT_TRUE(s->has_plan_in_flight()) << what;
  };
  expect_invalid({{.id = 1, .finished = true}}, "request 2 was scheduled but has no result");
  expect_invalid({{.id = 1}, {.id = 2}, {.id = 3}}, "request 3 is not in the plan");
  expect_invalid({{.id = 1, .finished = true}, {.id = 1}, {.id = 2}},
                 "request 1 has more than one result");
  // Nothing was applied by the failed updates.
  EXPECT_EQ(s->num_generated(1), 0);
  EXPECT_EQ(s->num_generated(2), 0);
  EXPECT_TRUE(s->Contains(1));

  ASSERT_TRUE(s->Update(std::vector<SequenceResult>{{.id = 2}, {.id = 1, .finished = true}}).ok());
  EXPECT_EQ(s->num_generated(2), 1);
  EXPECT_FALSE(s->has_plan_in_flight());
  EXPECT_FALSE(s->Contains(1));
  EXPECT_EQ(Step(*s), "2:D1@2s");
  // 2 has sampled its second and last allowed token: it must be reported finished.
  expect_invalid({{.id = 2}}, "max_new_tokens = 2");
}

TEST(SchedulerTest, LastAllowedTokenMustFinishTheRequest) {
  auto s = MakeScheduler({.max_batch_size = 4, .max_batch_tokens = 8});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(7, 3, 1).ok());
  EXPECT_EQ(Step(*s), "7:P3@0s+");
  absl::Status status = s->Update(std::vector<SequenceResult>{{.id = 7}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("request 7"));
  ASSERT_TRUE(s->Update(std::vector<SequenceResult>{{.id = 7, .finished = true}}).ok());
  EXPECT_FALSE(s->Contains(7));
  EXPECT_EQ(s->num_running(), 0);
}

// A policy scripted per request id, recording what it was asked.
class ScriptedPolicy final : public AdmissionPolicy {
 public:
  struct Asked {
    RequestId id;
    int64_t max_cache_tokens;
    std::vector<RequestId> admitted_this_step;
  };

  explicit ScriptedPolicy(std::map<RequestId, Decision>* decisions, std::vector<Asked>* asked,
                          std::map<RequestId, int64_t>* cached = nullptr)
      : decisions_(decisions), asked_(asked), cached_(cached) {}

  Answer Admit(const AdmissionQuery& query) override {
    asked_->push_back({query.id,
                       query.max_cache_tokens(),
                       {query.admitted_this_step.begin(), query.admitted_this_step.end()}});
    Answer answer;
    if (auto it = decisions_->find(query.id); it != decisions_->end()) answer.decision = it->second;
    if (cached_ != nullptr) {
      if (auto it = cached_->find(query.id); it != cached_->end()) {
        answer.num_cached_tokens = it->second;
      }
    }
    return answer;
  }

 private:
  std::map<RequestId, Decision>* decisions_;
  std::vector<Asked>* asked_;
  std::map<RequestId, int64_t>* cached_;
};

TEST(SchedulerTest, ThePolicyChoosesTheCachedTokensAtAdmission) {
  std::map<RequestId, AdmissionPolicy::Decision> decisions;
  std::vector<ScriptedPolicy::Asked> asked;
  std::map<RequestId, int64_t> cached = {{1, 6}, {2, 99}};
  auto s = MakeScheduler({.max_batch_size = 8, .max_batch_tokens = 64},
                         std::make_unique<ScriptedPolicy>(&decisions, &asked, &cached));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 10, 2).ok());
  ASSERT_TRUE(s->Add(2, 5, 2, 1).ok());
  absl::StatusOr<StepPlan> plan = s->Schedule();
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->sequences.size(), 2u);
  // 6 of 10 prompt tokens come from a prefix chosen at admission: 4 are computed from 6 on.
  EXPECT_EQ(plan->sequences[0].start_position, 6);
  EXPECT_EQ(plan->sequences[0].num_tokens, 4);
  EXPECT_TRUE(plan->sequences[0].samples);
  // An answer past the prompt is clamped: the last prompt token is always computed.
  EXPECT_EQ(plan->sequences[1].start_position, 4);
  EXPECT_EQ(plan->sequences[1].num_tokens, 1);
}

TEST(SchedulerTest, AWholePromptWaitsForRoomCountingOnlyWhatItComputes) {
  std::map<RequestId, AdmissionPolicy::Decision> decisions;
  std::vector<ScriptedPolicy::Asked> asked;
  std::map<RequestId, int64_t> cached = {{2, 90}};
  auto s = MakeScheduler({.max_batch_size = 8, .max_batch_tokens = 64},
                         std::make_unique<ScriptedPolicy>(&decisions, &asked, &cached));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 10, 5).ok());
  // 100 prompt tokens, 90 cached: the 10 it computes fit beside request 1's prefill.
  ASSERT_TRUE(s->Add(2, 100, 5, 0, PrefillMode::kWhole).ok());
  absl::StatusOr<StepPlan> plan = s->Schedule();
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->sequences.size(), 2u);
  EXPECT_EQ(plan->sequences[1].id, 2u);
  EXPECT_EQ(plan->sequences[1].num_tokens, 10);
}

TEST(SchedulerTest, AdmissionPolicyDefersAndRejects) {
  using Decision = AdmissionPolicy::Decision;
  std::map<RequestId, Decision> decisions;
  std::vector<ScriptedPolicy::Asked> asked;
  auto s = MakeScheduler({.max_batch_size = 8, .max_batch_tokens = 64},
                         std::make_unique<ScriptedPolicy>(&decisions, &asked));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Add(1, 4, 3).ok());
  ASSERT_TRUE(s->Add(2, 5, 4, 2).ok());
  ASSERT_TRUE(s->Add(3, 2, 2).ok());
  ASSERT_TRUE(s->Add(4, 2, 2).ok());
  decisions[2] = Decision::kReject;
  decisions[3] = Decision::kDefer;

  // 1 fits, 2 can never fit, 3 does not fit yet and blocks 4 behind it.
  EXPECT_EQ(Step(*s), "1:P4@0s+ !2");
  ASSERT_EQ(asked.size(), 3u);
  EXPECT_EQ(asked[0].id, 1u);
  EXPECT_EQ(asked[0].max_cache_tokens, 4 + 3 - 1);
  EXPECT_TRUE(asked[0].admitted_this_step.empty());
  EXPECT_EQ(asked[1].id, 2u);
  EXPECT_EQ(asked[1].max_cache_tokens, 5 + 4 - 1);
  EXPECT_THAT(asked[1].admitted_this_step, ElementsAre(1u));
  EXPECT_EQ(asked[2].id, 3u);
  EXPECT_THAT(asked[2].admitted_this_step, ElementsAre(1u));
  EXPECT_FALSE(s->Contains(2));
  EXPECT_EQ(s->num_waiting(), 2);
  ASSERT_TRUE(Finish(*s, {1}).ok());

  // Still deferred while 1 runs.
  asked.clear();
  EXPECT_EQ(Step(*s), "1:D1@4s");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_TRUE(asked[0].admitted_this_step.empty());
  ASSERT_TRUE(Finish(*s, {1}, {1}).ok());

  // Nothing runs any more, so a deferral could never end: 3 is rejected and 4 admitted.
  EXPECT_EQ(Step(*s), "4:P2@0s+ !3");
  EXPECT_EQ(s->num_waiting(), 0);
}

TEST(SchedulerTest, DefaultPolicyAdmitsEverything) {
  AdmitAllPolicy policy;
  const AdmissionPolicy::Answer answer =
      policy.Admit({.id = 1, .num_prompt_tokens = 1000000, .max_new_tokens = 1000000});
  EXPECT_EQ(answer.decision, AdmissionPolicy::Decision::kAdmit);
  EXPECT_FALSE(answer.num_cached_tokens.has_value());
}

// The engine's loop in miniature: scheduler plans, FakeModel runs, greedy picks. Every request
// must get exactly the tokens it would get alone, and its cache must hold exactly
// prompt + generated - 1 tokens at the end.
TEST(SchedulerTest, DrivesFakeModelToTheSameTokensAsSoloRuns) {
  auto model_or = FakeModel::Create({.vocab_size = 97});
  ASSERT_TRUE(model_or.ok());
  FakeModel& model = **model_or;
  auto s = MakeScheduler({.max_batch_size = 3, .max_batch_tokens = 6});
  ASSERT_NE(s, nullptr);

  struct Live {
    std::vector<int32_t> tokens;  // prompt, then generated
    int64_t prompt_len = 0;
    int64_t max_new_tokens = 0;
    std::unique_ptr<cache::KvCache> cache;
    std::vector<int32_t> generated;
  };
  std::map<RequestId, Live> live;
  std::map<RequestId, Live> done;
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 6, 7}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, {40}, {90, 91, 92, 93, 94}, {8, 8}};
  const std::vector<int64_t> max_new = {4, 3, 6, 2, 5};
  for (size_t i = 0; i < prompts.size(); ++i) {
    const RequestId id = i + 1;
    ASSERT_TRUE(s->Add(id, static_cast<int64_t>(prompts[i].size()), max_new[i]).ok());
    live[id] = {.tokens = prompts[i],
                .prompt_len = static_cast<int64_t>(prompts[i].size()),
                .max_new_tokens = max_new[i]};
  }

  int steps = 0;
  while (s->num_running() + s->num_waiting() > 0) {
    ASSERT_LT(++steps, 100);
    absl::StatusOr<StepPlan> plan = s->Schedule();
    ASSERT_TRUE(plan.ok());
    ASSERT_FALSE(plan->empty());
    EXPECT_LE(plan->num_tokens(), 6);
    model::Batch batch;
    for (const ScheduledSequence& seq : plan->sequences) {
      Live& r = live.at(seq.id);
      if (seq.newly_admitted) {
        auto cache = cache::KvCache::CreateDynamic(model.info().layer_specs);
        ASSERT_TRUE(cache.ok());
        r.cache = *std::move(cache);
      }
      ASSERT_EQ(r.cache->SeqLength(), seq.start_position);
      batch.sequences.push_back(
          {.token_ids = absl::MakeConstSpan(r.tokens).subspan(seq.start_position, seq.num_tokens),
           .cache = r.cache.get()});
    }
    auto out = model.Forward(batch);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<SequenceResult> results;
    for (size_t i = 0; i < plan->sequences.size(); ++i) {
      const ScheduledSequence& seq = plan->sequences[i];
      Live& r = live.at(seq.id);
      bool finished = false;
      if (seq.samples) {
        const int32_t next = static_cast<int32_t>(out->logits[i].argmax().item<int64_t>());
        r.tokens.push_back(next);
        r.generated.push_back(next);
        finished = static_cast<int64_t>(r.generated.size()) == r.max_new_tokens;
      }
      results.push_back({.id = seq.id, .finished = finished});
    }
    ASSERT_TRUE(s->Update(results).ok());
    for (const SequenceResult& result : results) {
      if (result.finished) {
        done[result.id] = std::move(live.at(result.id));
        live.erase(result.id);
      }
    }
  }

  ASSERT_EQ(done.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Live& r = done.at(i + 1);
    // Alone: each token follows from the previous one and its position.
    std::vector<int32_t> want;
    int32_t last = prompts[i].back();
    int64_t position = static_cast<int64_t>(prompts[i].size()) - 1;
    for (int64_t n = 0; n < max_new[i]; ++n) {
      last = model.NextToken(last, position++);
      want.push_back(last);
    }
    EXPECT_EQ(r.generated, want) << "request " << i + 1;
    EXPECT_EQ(r.cache->SeqLength(), r.prompt_len + r.max_new_tokens - 1) << "request " << i + 1;
  }
  // Every prompt token and every generated token but the last ran exactly once.
  EXPECT_EQ(model.num_tokens_run(), (3 + 13 + 1 + 5 + 2) + (3 + 2 + 5 + 1 + 4));
}

}  // namespace
}  // namespace kvserve::server
