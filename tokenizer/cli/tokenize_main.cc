// kvserve-tokenize: encodes text and renders chat templates with a tokenizer directory, one
// JSON line in, one JSON line out; used to debug prefix mismatches and by the reference tests.
//
//   kvserve-tokenize --tokenizer DIR < requests.jsonl
//     {"text": S[, "add_special_tokens": B]}   -> {"ids": [...], "decoded": S'}
//     {"messages": [...], "add_generation_prompt": B[, "template_kwargs": {...}]}
//                                              -> {"rendered": S, "ids": [...]}
//   template_kwargs (e.g. {"enable_thinking": false, "tools": [...]}) become template variables;
//   objects keep their key order throughout. Messages that are all {"role", "content"} strings
//   render through Tokenizer::ApplyChatTemplate (the server's path), others through
//   ApplyChatTemplateJson; both take template_kwargs as JSON text.
//   kvserve-tokenize --tokenizer DIR --benchmark FILE [--iterations N]
//     -> one JSON line with load time and encode throughput over FILE's contents.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// `messages` as ChatMessages when each is an object of exactly a string "role" and a string
// "content".
std::optional<std::vector<kvserve::tokenizer::ChatMessage>> PlainMessages(const Json& messages) {
  std::vector<kvserve::tokenizer::ChatMessage> plain;
  for (const Json& m : messages) {
    if (!m.is_object() || m.size() != 2 || !m.contains("role") || !m.contains("content") ||
        !m["role"].is_string() || !m["content"].is_string()) {
      return std::nullopt;
    }
    plain.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return plain;
}

Json Handle(const kvserve::tokenizer::Tokenizer& tokenizer, const std::string& line) {
  const Json request = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object())
    return Json{{"error", "input is not a JSON object"}};
  if (auto text = request.find("text"); text != request.end() && text->is_string()) {
    auto ids =
        tokenizer.Encode(text->get<std::string>(), request.value("add_special_tokens", true));
    if (!ids.ok()) return Json{{"error", std::string(ids.status().message())}};
    return Json{{"ids", *ids}, {"decoded", tokenizer.Decode(*ids, /*skip_special_tokens=*/false)}};
  }
  if (auto messages = request.find("messages"); messages != request.end() && messages->is_array()) {
    const bool add_generation_prompt = request.value("add_generation_prompt", false);
    std::string template_kwargs;
    if (auto kwargs = request.find("template_kwargs"); kwargs != request.end())
      template_kwargs = kwargs->dump();
    std::optional<std::vector<kvserve::tokenizer::ChatMessage>> plain = PlainMessages(*messages);
    auto rendered =
        plain.has_value()
            ? tokenizer.ApplyChatTemplate(*plain, add_generation_prompt,
                                          kvserve::tokenizer::RenderBudget(), template_kwargs)
            : tokenizer.ApplyChatTemplateJson(*messages, add_generation_prompt,
                                              kvserve::tokenizer::RenderBudget(), template_kwargs);
    if (!rendered.ok()) return Json{{"error", std::string(rendered.status().message())}};
    auto ids = tokenizer.Encode(*rendered, /*add_special_tokens=*/false);
    if (!ids.ok()) return Json{{"error", std::string(ids.status().message())}};
    return Json{{"rendered", *rendered}, {"ids", *ids}};
  }
  return Json{{"error", "expected a \"text\" string or a \"messages\" array"}};
}

int Benchmark(const kvserve::tokenizer::Tokenizer& tokenizer, double load_ms,
              const std::string& path, int iterations) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "cannot open " << path << "\n";
    return 1;
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  const std::string text = contents.str();
  size_t num_tokens = 0;
  double best_ms = 1e300;
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    auto ids = tokenizer.Encode(text, false);
    const double ms = MillisecondsSince(start);
    if (!ids.ok()) {
      std::cerr << ids.status() << "\n";
      return 1;
    }
    num_tokens = ids->size();
    best_ms = std::min(best_ms, ms);
  }
  const Json result = {{"load_ms", load_ms},
                       {"bytes", text.size()},
                       {"tokens", num_tokens},
                       {"encode_ms", best_ms},
                       {"mb_per_s", static_cast<double>(text.size()) / 1e6 / (best_ms / 1e3)}};
  std::cout << result.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, benchmark_file;
  int iterations = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--tokenizer" && i + 1 < argc) {
      dir = argv[++i];
    } else if (arg == "--benchmark" && i + 1 < argc) {
      benchmark_file = argv[++i];
    } else if (arg == "--iterations" && i + 1 < argc) {
      iterations = std::max(1, std::atoi(argv[++i]));
    } else {
      std::cerr << "usage: kvserve-tokenize --tokenizer DIR [--benchmark FILE [--iterations N]]\n";
      return 2;
    }
  }
  if (dir.empty()) {
    std::cerr << "usage: kvserve-tokenize --tokenizer DIR [--benchmark FILE [--iterations N]]\n";
    return 2;
  }
  const auto start = Clock::now();
  auto tokenizer = kvserve::tokenizer::Tokenizer::FromDirectory(dir);
  const double load_ms = MillisecondsSince(start);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status() << "\n";
    return 1;
  }
  if (!benchmark_file.empty()) return Benchmark(**tokenizer, load_ms, benchmark_file, iterations);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << Handle(**tokenizer, line).dump(-1, ' ', false, Json::error_handler_t::replace)
              << "\n";
    std::cout.flush();
  }
  return 0;
}
