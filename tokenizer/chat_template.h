// Chat templates: tokenizer_config.json's Jinja chat_template rendered over chat messages.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"
#include "tokenizer/render_budget.h"

namespace kvserve::tokenizer {

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
  // Like Render, with extra global variables from `template_kwargs_json`: the members of a JSON
  // object text, in their order (Transformers' apply_chat_template(**kwargs)); empty text: none.
  // Dicts inside keep the order of the text, so `tojson` and `items()` see it. InvalidArgument
  // starting "template_kwargs: " when the text is not valid JSON ("template_kwargs: not valid
  // JSON: ..."), not an object ("template_kwargs: must be a JSON object"), nests deeper than
  // budget.max_depth ("template_kwargs: nested deeper than 100 levels"), or sets a variable the
  // request sets ("template_kwargs.messages: is set by the request, not by template_kwargs"; also
  // add_generation_prompt, bos_token, eos_token). An invalid budget is reported first.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt, std::string_view bos_token,
                                     std::string_view eos_token,
                                     std::string_view template_kwargs_json,
                                     const RenderBudget& budget) const;
  // Like Render with template kwargs, the messages given as JSON (usually an array of objects;
  // extra fields such as reasoning_content or tool_calls reach the template in their order).
  // Also InvalidArgument "chat template: context nested deeper than N levels" when `messages`
  // nests deeper than budget.max_depth - 1.
  absl::StatusOr<std::string> RenderJson(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt, std::string_view bos_token,
                                         std::string_view eos_token,
                                         std::string_view template_kwargs_json,
                                         const RenderBudget& budget) const;
  // Renders with an arbitrary JSON object as the global variables, dicts in the order `context`
  // holds them. Errors as Render; also InvalidArgument when `context` is not an object or nests
  // deeper than budget.max_depth. (An ordered_json finds keys by linear scans: build `context`
  // from trusted or small input; request text goes through the template_kwargs overloads.)
  absl::StatusOr<std::string> RenderWithContext(const nlohmann::ordered_json& context,
                                                const RenderBudget& budget = RenderBudget()) const;

 private:
  explicit ChatTemplate(std::unique_ptr<jinja::Template> parsed);
  std::unique_ptr<jinja::Template> template_;
};

}  // namespace kvserve::tokenizer
