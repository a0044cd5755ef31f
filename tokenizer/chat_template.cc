// Chat templates: tokenizer_config.json's Jinja chat_template rendered over chat messages.
#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_meter.h"
#include "tokenizer/jinja_parser.h"

namespace kvserve::model {

ChatTemplate::ChatTemplate(std::unique_ptr<jinja::Template> parsed)
    : template_(std::move(parsed)) {}
ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(std::string_view source) {
  try {
    return std::unique_ptr<ChatTemplate>(new ChatTemplate(jinja::ParseTemplate(source)));
  } catch (const jinja::JinjaError& error) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", error.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("chat template: out of memory while parsing");
  }
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 std::string_view bos_token,
                                                 std::string_view eos_token,
                                                 const RenderBudget& budget) const {
  nlohmann::json context = nlohmann::json::object();
  nlohmann::json list = nlohmann::json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  context["messages"] = std::move(list);
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = std::string(bos_token);
  context["eos_token"] = std::string(eos_token);
  return RenderWithContext(context, budget);
}

absl::StatusOr<std::string> ChatTemplate::RenderWithContext(const nlohmann::json& context,
                                                            const RenderBudget& budget) const {
  if (!context.is_object())
    return absl::InvalidArgumentError("chat template context must be an object");
  if (absl::Status valid = ValidateRenderBudget(budget); !valid.ok()) return valid;
  try {
    jinja::RenderMeter meter(budget);
    return jinja::Render(*template_, jinja::Value::FromJson(context, budget.max_depth), meter);
  } catch (const jinja::JinjaError& error) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", error.what()));
  } catch (const jinja::RenderInterrupted& interrupted) {
    return absl::Status(interrupted.code(), absl::StrCat("chat template: ", interrupted.what()));
  } catch (const std::bad_alloc&) {
    // Every size is checked before allocating; this is what remains when memory is short.
    return absl::ResourceExhaustedError("chat template: out of memory");
  }
}

}  // namespace kvserve::model
