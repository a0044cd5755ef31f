// The syntax tree of a parsed Jinja template (the subset chat templates use).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace kvserve::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // children
    kTuple,    // children
    kDict,     // keys[i] : children[i]
    kUnary,    // name in {"-", "+", "not"}, children[0]
    kBinary,   // name is the operator, children[0..1]
    kTernary,  // children: value, condition, else-value (may be null)
    kGetAttr,  // children[0].name
    kGetItem,  // children[0][children[1]]
    kSlice,    // children[0][children[1]:children[2]:children[3]] (null parts allowed)
    kCall,     // children[0](children[1..], kwargs)
    kFilter,   // children[0] | name(children[1..], kwargs)
    kTest,     // children[0] is [not] name(children[1..])
  };
  Kind kind;
  int line = 0;
  int height = 1;  // 1 + the tallest child's; the parser keeps it <= kMaxParseNesting
  Value value;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> children;
  std::vector<ExprPtr> keys;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind;
  int line = 0;
  std::string text;                                // kText
  ExprPtr expr;                                    // kOutput; kFor iterable; kSet value
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition, body) for if/elif
  Body body;                         // kFor, kSetBlock, kMacro; kIf else body is else_body
  Body else_body;                    // kIf, kFor
  std::vector<std::string> targets;  // kFor loop variables; kSet/kSetBlock names
  std::string attr;                  // kSet "ns.attr": targets[0] is "ns", attr is "attr"
  ExprPtr filter;                    // kFor "if" condition
  std::string macro_name;            // kMacro
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro parameters and defaults
};

struct Template {
  Body body;
};

}  // namespace kvserve::tokenizer::jinja
