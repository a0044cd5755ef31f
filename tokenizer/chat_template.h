// Chat templates: tokenizer_config.json's Jinja chat_template rendered over chat messages.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "tokenizer/render_budget.h"

namespace kvserve::model {

struct ChatMessage {
  std::string role;
  std::string content;
};

namespace jinja {
struct Template;
}  // namespace jinja

// A parsed chat template. Immutable; Render may be called from several threads at once.
class ChatTemplate {
 public:
  // Parses Jinja `source`. InvalidArgument "chat template: ..." naming the construct (and line)
  // for syntax errors, constructs outside the supported Jinja subset, blocks or expressions
  // nested deeper than jinja::kMaxParseNesting (128) and integer literals outside int64.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Parse(std::string_view source);
  ~ChatTemplate();

  // Renders with `messages`, `add_generation_prompt`, `bos_token` and `eos_token` defined, within
  // `budget`. Errors, all starting "chat template: ":
  //  - InvalidArgument naming the construct for unsupported operations at run time (an unknown
  //    filter, a method on the wrong type), the message of raise_exception(), integer overflow
  //    ("integer overflow in '*'"), division by zero, or the budget limit exceeded
  //    ("recursion deeper than 100 calls", "more than 5000000 evaluation steps", "output larger
  //    than 16777216 bytes", "string larger than ...", "list larger than ...", "value nested
  //    deeper than ...", "evaluation nested deeper than ...") or an invalid `budget`;
  //  - DeadlineExceeded once budget.deadline passes, Cancelled once budget.cancelled() is true.
  // Nothing allocated by a failed render outlives the call.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt, std::string_view bos_token,
                                     std::string_view eos_token,
                                     const RenderBudget& budget = RenderBudget()) const;
  // Renders with an arbitrary JSON object as the global variables (messages with extra fields
  // such as reasoning_content or tool_calls, tools, enable_thinking, ...). Errors as Render;
  // also InvalidArgument when `context` nests deeper than budget.max_depth.
  absl::StatusOr<std::string> RenderWithContext(const nlohmann::json& context,
                                                const RenderBudget& budget = RenderBudget()) const;

 private:
  explicit ChatTemplate(std::unique_ptr<jinja::Template> parsed);
  std::unique_ptr<jinja::Template> template_;
};

}  // namespace kvserve::model
