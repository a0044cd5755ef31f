// CompileConstraint: each kind of constraint to a validated, flattened grammar.
#include "constraint/constraint.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve::constraint {

absl::StatusOr<Grammar> ChoiceGrammar(const std::vector<std::string>& choices,
                                      int64_t max_choices) {
  if (choices.empty()) return absl::InvalidArgumentError("must list at least one string");
  if (static_cast<int64_t>(choices.size()) > max_choices) {
    return absl::InvalidArgumentError(
        absl::StrCat(choices.size(), " strings, more than the limit of ", max_choices));
  }
  GrammarBuilder builder;
  const int32_t root = builder.AddRule("choice");
  for (const std::string& choice : choices) builder.AddAlternative(root, builder.Literal(choice));
  return std::move(builder).Build(root);
}

const char* ConstraintKindName(ConstraintSpec::Kind kind) {
  switch (kind) {
    case ConstraintSpec::Kind::kJsonSchema:
      return "json_schema";
    case ConstraintSpec::Kind::kJsonObject:
      return "json_object";
    case ConstraintSpec::Kind::kRegex:
      return "regex";
    case ConstraintSpec::Kind::kGrammar:
      return "grammar";
    case ConstraintSpec::Kind::kChoice:
      return "choice";
    case ConstraintSpec::Kind::kUnset:
      return "";
  }
  return "unknown";
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileConstraint(
    const ConstraintSpec& spec, const ConstraintLimits& limits) {
  absl::StatusOr<Grammar> grammar;
  if (spec.whitespace_bytes < 0 || spec.whitespace_bytes > limits.max_whitespace_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("whitespace_bytes must be in [0, ",
                                                   limits.max_whitespace_bytes, "], got ",
                                                   spec.whitespace_bytes));
  }
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonSchema: {
      JsonSchemaOptions json = limits.json;
      json.regex = limits.regex;
      json.whitespace_bytes = spec.whitespace_bytes;
      grammar = JsonSchemaGrammar(spec.text, json);
      break;
    }
    case ConstraintSpec::Kind::kJsonObject: {
      JsonSchemaOptions json = limits.json;
      json.regex = limits.regex;
      json.whitespace_bytes = spec.whitespace_bytes;
      grammar = JsonObjectGrammar(json);
      break;
    }
    case ConstraintSpec::Kind::kRegex:
      grammar = ParseRegex(spec.text, limits.regex);
      break;
    case ConstraintSpec::Kind::kGrammar:
      grammar = ParseGbnf(spec.text, limits.gbnf);
      break;
    case ConstraintSpec::Kind::kChoice:
      grammar = ChoiceGrammar(spec.choices, limits.max_choices);
      break;
    case ConstraintSpec::Kind::kUnset:
      return absl::InvalidArgumentError(
          "names no kind: set one of json_schema, json_object, regex, grammar, choice");
  }
  if (!grammar.ok()) return grammar.status();
  return CompiledGrammar::Create(*std::move(grammar), limits.grammar);
}

}  // namespace kvserve::constraint
