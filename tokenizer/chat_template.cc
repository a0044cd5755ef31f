// Chat templates: tokenizer_config.json's Jinja chat_template rendered over chat messages.
#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_json.h"
#include "tokenizer/jinja_meter.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_value.h"

namespace kvserve::tokenizer {
namespace {

using Globals = std::vector<std::pair<std::string, jinja::Value>>;

// The variables every chat render defines from the request itself.
constexpr std::string_view kRequestVariables[] = {"messages", "add_generation_prompt", "bos_token",
                                                  "eos_token"};

// The members of `template_kwargs_json` (empty: none) as global variables, in their order.
absl::StatusOr<Globals> ParseTemplateKwargs(std::string_view template_kwargs_json, int max_depth) {
  if (template_kwargs_json.empty()) return Globals();
  absl::StatusOr<jinja::Value> kwargs = jinja::ParseJsonValue(template_kwargs_json, max_depth);
  if (!kwargs.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("template_kwargs: ", kwargs.status().message()));
  }
  if (!kwargs->is_object())
    return absl::InvalidArgumentError("template_kwargs: must be a JSON object");
  Globals globals = std::move(kwargs->as_object().items);
  for (const auto& [name, value] : globals) {
    if (std::find(std::begin(kRequestVariables), std::end(kRequestVariables), name) !=
        std::end(kRequestVariables)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "template_kwargs.", name, ": is set by the request, not by template_kwargs"));
    }
  }
  return globals;
}

// Renders `tmpl` over the globals `make_globals` returns (a StatusOr<Globals>; it may throw
// JinjaError), turning what the interpreter throws into a status.
template <typename MakeGlobals>
absl::StatusOr<std::string> RenderGuarded(const jinja::Template& tmpl, const RenderBudget& budget,
                                          MakeGlobals make_globals) {
  if (absl::Status valid = ValidateRenderBudget(budget); !valid.ok()) return valid;
  try {
    absl::StatusOr<Globals> globals = make_globals();
    if (!globals.ok()) return globals.status();
    const jinja::Value context = jinja::MakeObject(*std::move(globals));
    jinja::RenderMeter meter(budget);
    return jinja::Render(tmpl, context, meter);
  } catch (const jinja::JinjaError& error) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", error.what()));
  } catch (const jinja::RenderInterrupted& interrupted) {
    return absl::Status(interrupted.code(), absl::StrCat("chat template: ", interrupted.what()));
  } catch (const std::bad_alloc&) {
    // Every size is checked before allocating; this is what remains when memory is short.
    return absl::ResourceExhaustedError("chat template: out of memory");
  }
}

// The globals of a chat render: messages, the request's flag and tokens, then the kwargs.
Globals ChatGlobals(jinja::Value messages, bool add_generation_prompt, std::string_view bos_token,
                    std::string_view eos_token, Globals kwargs) {
  Globals globals;
  globals.reserve(4 + kwargs.size());
  globals.emplace_back("messages", std::move(messages));
  globals.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
  globals.emplace_back("bos_token", jinja::Value(std::string(bos_token)));
  globals.emplace_back("eos_token", jinja::Value(std::string(eos_token)));
  std::move(kwargs.begin(), kwargs.end(), std::back_inserter(globals));
  return globals;
}

}  // namespace

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
  return Render(messages, add_generation_prompt, bos_token, eos_token, "", budget);
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 std::string_view bos_token,
                                                 std::string_view eos_token,
                                                 std::string_view template_kwargs_json,
                                                 const RenderBudget& budget) const {
  return RenderGuarded(*template_, budget, [&]() -> absl::StatusOr<Globals> {
    absl::StatusOr<Globals> kwargs = ParseTemplateKwargs(template_kwargs_json, budget.max_depth);
    if (!kwargs.ok()) return kwargs.status();
    // The list is level 2 of the context, each message level 3.
    const int depth = messages.empty() ? 2 : 3;
    if (depth > budget.max_depth) {
      throw jinja::JinjaError(
          absl::StrCat("context nested deeper than ", budget.max_depth, " levels"));
    }
    jinja::Array list;
    list.reserve(messages.size());
    for (const ChatMessage& m : messages) {
      list.push_back(jinja::MakeObject(
          {{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}}));
    }
    return ChatGlobals(jinja::Value(std::move(list)), add_generation_prompt, bos_token, eos_token,
                       *std::move(kwargs));
  });
}

absl::StatusOr<std::string> ChatTemplate::RenderJson(const nlohmann::ordered_json& messages,
                                                     bool add_generation_prompt,
                                                     std::string_view bos_token,
                                                     std::string_view eos_token,
                                                     std::string_view template_kwargs_json,
                                                     const RenderBudget& budget) const {
  return RenderGuarded(*template_, budget, [&]() -> absl::StatusOr<Globals> {
    absl::StatusOr<Globals> kwargs = ParseTemplateKwargs(template_kwargs_json, budget.max_depth);
    if (!kwargs.ok()) return kwargs.status();
    return ChatGlobals(jinja::Value::FromJson(messages, budget.max_depth, /*level=*/2),
                       add_generation_prompt, bos_token, eos_token, *std::move(kwargs));
  });
}

absl::StatusOr<std::string> ChatTemplate::RenderWithContext(const nlohmann::ordered_json& context,
                                                            const RenderBudget& budget) const {
  if (!context.is_object())
    return absl::InvalidArgumentError("chat template context must be an object");
  return RenderGuarded(*template_, budget, [&]() -> absl::StatusOr<Globals> {
    return std::move(jinja::Value::FromJson(context, budget.max_depth).as_object().items);
  });
}

}  // namespace kvserve::tokenizer
