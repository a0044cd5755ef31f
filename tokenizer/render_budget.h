// Limits on rendering one chat template: nesting, work, size, deadline and cancellation.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvserve::tokenizer {

// A chat template comes from the model folder, so it is not trusted: a render stops with an
// error, never a crash or a hang, when it exceeds one of these. The defaults leave real
// templates (Llama 2/3, Qwen, Mistral, Phi-3) with hundreds of messages far inside every limit:
// they call macros 1-3 deep, nest JSON tool schemas ~10 levels, and spend ~40 steps per message.
struct RenderBudget {
  // Macro calls nested in one another, and lists/dicts nested in one another (built by the
  // template, passed in the context, printed or compared). 0 < max_depth <= 1000.
  int max_depth = 100;
  // Expressions, statements and macro calls evaluated inside one another, counted across macro
  // calls. Bounds the interpreter's native stack: at most ~2 KiB per level in a release build,
  // so ~1 MiB at the default. Real templates nest under 15 levels. 0 < max_eval_depth <= 2000.
  int max_eval_depth = 500;
  // Evaluation steps: one per statement and expression, four per loop iteration and macro call,
  // plus one per 64 bytes of string and one per 16 list items or values that a step copies,
  // scans or builds (variables and dict keys passed by a lookup included). Bounds the render's
  // CPU time to well under a second; a 400-message conversation takes 13,000-26,000 steps with
  // the Llama 2/3 and Qwen3 templates.
  int64_t max_steps = 5'000'000;
  // Bytes of the rendered text, and of any string the render builds on the way (a list counts
  // 64 bytes per item). Checked before allocating.
  int64_t max_output_bytes = int64_t{16} << 20;
  // The render stops with DeadlineExceeded once this passes (checked every 1024 steps).
  absl::Time deadline = absl::InfiniteFuture();
  // When set, called every 1024 steps from the rendering thread; true stops the render with
  // Cancelled. Must be cheap and thread-safe with whoever cancels.
  std::function<bool()> cancelled;
};

// OK, or InvalidArgument naming the field of `budget` that is out of range.
inline absl::Status ValidateRenderBudget(const RenderBudget& budget) {
  if (budget.max_depth <= 0 || budget.max_depth > 1000)
    return absl::InvalidArgumentError("render budget: max_depth must be in (0, 1000]");
  if (budget.max_eval_depth <= 0 || budget.max_eval_depth > 2000)
    return absl::InvalidArgumentError("render budget: max_eval_depth must be in (0, 2000]");
  if (budget.max_steps <= 0)
    return absl::InvalidArgumentError("render budget: max_steps must be positive");
  if (budget.max_output_bytes <= 0)
    return absl::InvalidArgumentError("render budget: max_output_bytes must be positive");
  return absl::OkStatus();
}

}  // namespace kvserve::tokenizer
