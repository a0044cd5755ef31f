// kvserve-constraint: compiles a constraint (JSON Schema, json_object, regex, GBNF grammar or
// choice) as the server would, says why it is refused, and prints random strings it allows
// (a JSON array), so that users can see what their constraint lets a model write and tests can
// check those strings with an independent validator.
#include <cstdio>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "base/regular_file.h"
#include "constraint/constraint.h"
#include "constraint/json_schema.h"
#include "constraint/sampler.h"
#include "nlohmann/json.hpp"

namespace {

namespace c = kvserve::constraint;

int Fail(const std::string& message) {
  std::cerr << "kvserve-constraint: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = kvserve::base::CommandLine::Parse(
      argc, argv,
      {{"json-schema", "a file holding a JSON Schema", ""},
       {"json-object", "any JSON object", "", true},
       {"regex", "a regular expression (ECMAScript subset), matched whole", ""},
       {"grammar", "a file holding a GBNF grammar", ""},
       {"choice", "comma-separated strings, one of which is written", ""},
       {"whitespace-bytes", "JSON: most whitespace bytes between tokens (0: compact)", "0"},
       {"samples", "random strings to print", "10"},
       {"seed", "of the random strings", "1"},
       {"max-bytes", "a random string longer than this is given up", "4096"}});
  if (!flags.ok()) return Fail(std::string(flags.status().message()));
  if (flags->help_requested()) {
    std::cout << flags->Usage("kvserve-constraint",
                              "compiles one constraint and prints random strings it allows");
    return 0;
  }
  c::JsonSchemaOptions json_options;
  auto ws = flags->GetInt("whitespace-bytes", 0);
  auto samples = flags->GetInt("samples", 10);
  auto seed = flags->GetInt("seed", 1);
  auto max_bytes = flags->GetInt("max-bytes", 4096);
  for (const auto* v : {&ws, &samples, &seed, &max_bytes}) {
    if (!v->ok()) return Fail(std::string(v->status().message()));
  }
  json_options.whitespace_bytes = *ws;

  absl::StatusOr<c::Grammar> grammar = absl::InvalidArgumentError(
      "name one constraint: --json-schema, --json-object, --regex, --grammar or --choice");
  int named = 0;
  const auto read = [&](const std::string& flag) -> absl::StatusOr<std::string> {
    return kvserve::base::ReadRegularFile(flags->GetString(flag), int64_t{1} << 20);
  };
  if (flags->Has("json-schema")) {
    ++named;
    absl::StatusOr<std::string> text = read("json-schema");
    grammar = text.ok() ? c::JsonSchemaGrammar(*text, json_options)
                        : absl::StatusOr<c::Grammar>(text.status());
  }
  if (flags->GetBool("json-object")) {
    ++named;
    grammar = c::JsonObjectGrammar(json_options);
  }
  if (flags->Has("regex")) {
    ++named;
    grammar = c::ParseRegex(flags->GetString("regex"));
  }
  if (flags->Has("grammar")) {
    ++named;
    absl::StatusOr<std::string> text = read("grammar");
    grammar = text.ok() ? c::ParseGbnf(*text) : absl::StatusOr<c::Grammar>(text.status());
  }
  if (flags->Has("choice")) {
    ++named;
    grammar = c::ChoiceGrammar(absl::StrSplit(flags->GetString("choice"), ','));
  }
  if (named > 1) return Fail("name only one constraint");
  if (!grammar.ok()) return Fail(std::string(grammar.status().message()));
  auto compiled = c::CompiledGrammar::Create(*std::move(grammar));
  if (!compiled.ok()) return Fail(std::string(compiled.status().message()));

  c::Matcher matcher(*compiled);
  std::mt19937_64 rng(static_cast<uint64_t>(*seed));
  c::SampleOptions options;
  options.max_bytes = *max_bytes;
  nlohmann::json out = nlohmann::json::array();
  int64_t given_up = 0;
  while (static_cast<int64_t>(out.size()) < *samples && given_up < 100 * (*samples + 1)) {
    std::optional<std::string> s = c::SampleString(matcher, rng, options);
    if (s) {
      out.push_back(*s);
    } else {
      ++given_up;
    }
  }
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (static_cast<int64_t>(out.size()) < *samples) {
    return Fail("could not finish the random strings within --max-bytes");
  }
  return 0;
}
