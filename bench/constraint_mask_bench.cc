// The constraint engine's costs on a real vocabulary (a plain timed program): for each schema
// of a corpus, the compile time, then the token mask's time at each step of a constrained
// random walk (a random allowed token each step); prints mean, p50, p99 and max over all steps.
//
// usage: kvserve_constraint_mask_bench --tokenizer-dir DIR --schemas tests/constraint/schemas.json
//            [--steps 40] [--seed 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/command_line.h"
#include "constraint/json_schema.h"
#include "constraint/matcher.h"
#include "constraint/token_mask.h"
#include "constraint/vocabulary.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace {

namespace c = kvserve::constraint;
using Clock = std::chrono::steady_clock;

double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

void Report(const char* what, std::vector<double> v) {
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  const auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * v.size()))]; };
  std::printf("%-14s n=%-6zu mean %10.1f us  p50 %10.1f  p99 %10.1f  max %10.1f\n", what, v.size(),
              sum / v.size(), at(0.5), at(0.99), v.back());
}

}  // namespace

int main(int argc, char** argv) {
  auto flags =
      kvserve::base::CommandLine::Parse(argc, argv,
                                        {{"tokenizer-dir", "a folder with tokenizer.json", ""},
                                         {"schemas", "tests/constraint/schemas.json", ""},
                                         {"steps", "mask steps per schema", "40"},
                                         {"seed", "of the walks", "1"}});
  if (!flags.ok() || !flags->Has("tokenizer-dir") || !flags->Has("schemas")) {
    std::fprintf(stderr, "usage: --tokenizer-dir DIR --schemas FILE [--steps N] [--seed S]\n");
    return 2;
  }
  auto tok = kvserve::tokenizer::Tokenizer::FromDirectory(flags->GetString("tokenizer-dir"));
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  auto t0 = Clock::now();
  auto bytes = c::TokenBytesOf(**tok);
  if (!bytes.ok()) return 1;
  const c::TokenTrie trie(*bytes);
  auto t1 = Clock::now();
  std::printf("vocabulary %lld tokens, trie %zu nodes, built in %.1f ms\n",
              static_cast<long long>(trie.vocab_size()), trie.nodes().size(), Micros(t0, t1) / 1e3);
  std::ifstream in(flags->GetString("schemas"));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json corpus = nlohmann::json::parse(text.str());
  const int64_t steps = *flags->GetInt("steps", 40);
  std::mt19937_64 rng(static_cast<uint64_t>(*flags->GetInt("seed", 1)));
  const std::vector<int32_t> eos = (*tok)->eos_token_ids();
  std::vector<double> compile_us, mask_us;
  int refused = 0;
  for (const auto& entry : corpus["schemas"]) {
    const std::string schema = entry["schema"].dump();
    auto a = Clock::now();
    auto grammar = c::JsonSchemaGrammar(schema);
    auto compiled =
        grammar.ok() ? c::CompiledGrammar::Create(*std::move(grammar))
                     : absl::StatusOr<std::shared_ptr<const c::CompiledGrammar>>(grammar.status());
    auto b = Clock::now();
    if (!compiled.ok()) {
      ++refused;
      continue;
    }
    compile_us.push_back(Micros(a, b));
    c::Matcher matcher(*compiled);
    c::MaskCache cache;
    c::MatchState state = matcher.initial();
    for (int64_t step = 0; step < steps && !state.finished(); ++step) {
      auto m0 = Clock::now();
      const c::TokenBitmask& mask = cache.Get(matcher, state, trie, eos);
      auto m1 = Clock::now();
      mask_us.push_back(Micros(m0, m1));
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < trie.vocab_size(); ++id) {
        if (c::MaskAllows(mask, id) && !(*bytes)[id].empty()) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      state = matcher.AdvanceAll(state, (*bytes)[allowed[rng() % allowed.size()]]);
    }
  }
  std::printf("schemas %zu, refused %d\n", corpus["schemas"].size(), refused);
  Report("compile", compile_us);
  Report("mask", mask_us);
  return 0;
}
