// Counts one Jinja render's work, nesting and sizes against its RenderBudget.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tokenizer/jinja_value.h"
#include "tokenizer/render_budget.h"

namespace kvserve::tokenizer::jinja {

// Thrown when the render's deadline passes or its caller cancels it. Deliberately not a
// JinjaError, so no handler inside the interpreter rewrites it; ChatTemplate turns it into
// DeadlineExceeded or Cancelled.
class RenderInterrupted : public std::runtime_error {
 public:
  RenderInterrupted(absl::StatusCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  absl::StatusCode code() const { return code_; }

 private:
  absl::StatusCode code_;
};

// One render's consumption of its budget. Every limit it enforces throws JinjaError naming the
// limit ("more than 5000000 evaluation steps"); the deadline and cancellation throw
// RenderInterrupted. Not thread-safe: one meter per render, used by the rendering thread.
class RenderMeter {
 public:
  // Steps charged for one loop iteration and one macro call: each costs about as much time as
  // evaluating four simple expressions (a loop builds its `loop` object, a call moves frames).
  static constexpr int64_t kStepsPerLoopIteration = 4;
  static constexpr int64_t kStepsPerCall = 4;
  static constexpr int64_t kBytesPerStep = 64;
  static constexpr int64_t kItemsPerStep = 16;
  // What a list item is assumed to occupy when sizing lists against max_output_bytes.
  static constexpr int64_t kListItemBytes = 64;
  static constexpr int64_t kStepsPerCheck = 1024;

  // `budget` must outlive the meter.
  explicit RenderMeter(const RenderBudget& budget) : budget_(budget) {}
  RenderMeter(const RenderMeter&) = delete;
  RenderMeter& operator=(const RenderMeter&) = delete;

  const RenderBudget& budget() const { return budget_; }
  int64_t steps() const { return steps_; }

  // Counts `steps` evaluation steps; checks the deadline and cancellation on the first call
  // and then every kStepsPerCheck steps.
  void Charge(int64_t steps) {
    steps_ += steps;
    if (steps_ > budget_.max_steps) {
      throw JinjaError(absl::StrCat("more than ", budget_.max_steps, " evaluation steps"));
    }
    if (steps_ >= next_check_steps_) {
      next_check_steps_ = steps_ + kStepsPerCheck;
      CheckInterrupted();
    }
  }
  // Counts the work of copying or scanning `bytes` bytes of string.
  void ChargeBytes(int64_t bytes) {
    pending_bytes_ += bytes;
    Charge(pending_bytes_ / kBytesPerStep);
    pending_bytes_ %= kBytesPerStep;
  }
  // Counts the work of copying or visiting `items` list items or values.
  void ChargeItems(int64_t items) {
    pending_items_ += items;
    Charge(pending_items_ / kItemsPerStep);
    pending_items_ %= kItemsPerStep;
  }

  // Throws unless a string of `bytes` bytes fits; called before allocating it.
  void CheckString(int64_t bytes) const {
    if (bytes > budget_.max_output_bytes) {
      throw JinjaError(absl::StrCat("string larger than ", budget_.max_output_bytes, " bytes"));
    }
  }
  // Throws unless a list of `items` items fits; called before allocating it.
  void CheckList(int64_t items) const {
    if (items > budget_.max_output_bytes / kListItemBytes) {
      throw JinjaError(absl::StrCat("list larger than ", budget_.max_output_bytes, " bytes (",
                                    items, " items)"));
    }
  }
  // Throws unless rendered text of `bytes` bytes fits.
  void CheckOutput(int64_t bytes) const {
    if (bytes > budget_.max_output_bytes) {
      throw JinjaError(absl::StrCat("output larger than ", budget_.max_output_bytes, " bytes"));
    }
  }
  // Throws when a value being printed, compared or converted is nested `depth` levels deep
  // and that is past max_depth.
  void CheckValueDepth(int depth) const {
    if (depth > budget_.max_depth) {
      throw JinjaError(absl::StrCat("value nested deeper than ", budget_.max_depth, " levels"));
    }
  }

  // Held for the duration of one macro call; throws past max_depth nested calls.
  class CallScope {
   public:
    explicit CallScope(RenderMeter& meter) : meter_(meter) {
      if (meter_.call_depth_ >= meter_.budget_.max_depth) {
        throw JinjaError(
            absl::StrCat("recursion deeper than ", meter_.budget_.max_depth, " calls"));
      }
      ++meter_.call_depth_;
    }
    ~CallScope() { --meter_.call_depth_; }
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    RenderMeter& meter_;
  };

  // Held while one expression, statement block or call is evaluated; throws past
  // max_eval_depth nested evaluations, before the native stack can run out.
  class EvalScope {
   public:
    explicit EvalScope(RenderMeter& meter) : meter_(meter) {
      if (meter_.eval_depth_ >= meter_.budget_.max_eval_depth) {
        throw JinjaError(absl::StrCat("evaluation nested deeper than ",
                                      meter_.budget_.max_eval_depth, " levels"));
      }
      ++meter_.eval_depth_;
    }
    ~EvalScope() { --meter_.eval_depth_; }
    EvalScope(const EvalScope&) = delete;
    EvalScope& operator=(const EvalScope&) = delete;

   private:
    RenderMeter& meter_;
  };

 private:
  void CheckInterrupted() const {
    if (budget_.deadline != absl::InfiniteFuture() && absl::Now() >= budget_.deadline) {
      throw RenderInterrupted(
          absl::StatusCode::kDeadlineExceeded,
          absl::StrCat("deadline exceeded after ", steps_, " evaluation steps"));
    }
    if (budget_.cancelled && budget_.cancelled()) {
      throw RenderInterrupted(absl::StatusCode::kCancelled,
                              absl::StrCat("cancelled after ", steps_, " evaluation steps"));
    }
  }

  const RenderBudget& budget_;
  int64_t steps_ = 0;
  int64_t next_check_steps_ = 0;
  int64_t pending_bytes_ = 0;
  int64_t pending_items_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
};

}  // namespace kvserve::tokenizer::jinja
