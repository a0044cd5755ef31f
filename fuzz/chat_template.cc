// Fuzzes chat templates: parse and render.
//
// Input: "<template source>[\0<template_kwargs JSON>]". A template that parses is rendered
// twice under a small budget: with plain messages and a generation prompt through Render, and
// with messages carrying tool calls and reasoning through RenderJson. Checked: every error is
// one the interface documents (InvalidArgument starting "chat template: " or
// "template_kwargs"), and the output stays within the budget and is valid UTF-8 when the
// template and kwargs are.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "base/check.h"
#include "tokenizer/chat_template.h"

namespace {

using kvserve::tokenizer::ChatMessage;
using kvserve::tokenizer::ChatTemplate;
using kvserve::tokenizer::RenderBudget;

// Smaller than the default so that a run stays fast; the limits are what is under test.
RenderBudget FuzzBudget() {
  RenderBudget budget;
  budget.max_depth = 40;
  budget.max_eval_depth = 200;
  budget.max_steps = 50'000;
  budget.max_output_bytes = 256 << 10;
  return budget;
}

const std::vector<ChatMessage>& PlainMessages() {
  static const auto* const kMessages = new std::vector<ChatMessage>{
      {"system", "You are terse."},
      {"user", "Hi <b>there</b> {{ not a tag }} \xC3\xA9\n"},
      {"assistant", "Hello."},
      {"user", "And 2+2?"},
  };
  return *kMessages;
}

const nlohmann::ordered_json& RichMessages() {
  static const auto* const kMessages = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "call the tool",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                     "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "content": "{\"temp\": 21.5}", "name": "get_weather"},
    {"role": "assistant", "content": [{"type": "text", "text": "21.5 C"}]}
  ])"));
  return *kMessages;
}

// Well-formed UTF-8, written here rather than taken from the code under test.
bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || s.size() - i < n) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// `valid_input`: the template and the kwargs are valid UTF-8, so the output must be too (Jinja
// works on characters; a render that cuts one apart gives text no tokenizer accepts).
void CheckOutcome(const absl::StatusOr<std::string>& out, const RenderBudget& budget,
                  bool valid_input) {
  if (out.ok()) {
    KVSERVE_CHECK(static_cast<int64_t>(out->size()) <= budget.max_output_bytes) << out->size();
    if (valid_input) KVSERVE_CHECK(IsUtf8(*out)) << "invalid UTF-8 from valid input: " << *out;
    return;
  }
  KVSERVE_CHECK(absl::IsInvalidArgument(out.status()) || absl::IsResourceExhausted(out.status()))
      << out.status();
  const absl::string_view message = out.status().message();
  KVSERVE_CHECK(absl::StartsWith(message, "chat template: ") ||
                absl::StartsWith(message, "template_kwargs"))
      << out.status();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string_view kwargs = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  absl::StatusOr<std::unique_ptr<ChatTemplate>> parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    KVSERVE_CHECK(absl::IsInvalidArgument(parsed.status())) << parsed.status();
    KVSERVE_CHECK(absl::StartsWith(parsed.status().message(), "chat template: "))
        << parsed.status();
    return 0;
  }
  const RenderBudget budget = FuzzBudget();
  const bool valid = IsUtf8(source) && IsUtf8(kwargs);
  CheckOutcome((*parsed)->Render(PlainMessages(), true, "<s>", "</s>", kwargs, budget), budget,
               valid);
  CheckOutcome((*parsed)->RenderJson(RichMessages(), false, "<s>", "</s>", kwargs, budget), budget,
               valid);
  return 0;
}
