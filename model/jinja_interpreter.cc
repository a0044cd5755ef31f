// Renders a parsed Jinja template against global variables.
#include "model/jinja_interpreter.h"

#include <cmath>
#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/jinja_builtins.h"

namespace kvserve::model::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

using Frame = std::vector<std::pair<std::string, Value>>;

std::string At(int line) { return absl::StrCat(" at line ", line); }

class Interpreter {
 public:
  explicit Interpreter(const Value& globals) {
    Frame builtins;
    builtins.emplace_back("namespace", MakeCallable([](std::vector<Value>& args, KwArgs& kwargs) {
                            std::vector<std::pair<std::string, Value>> items;
                            if (!args.empty()) {
                              if (!args[0].is_object())
                                throw JinjaError("namespace() takes a dict or keyword arguments");
                              items = args[0].as_object().items;
                            }
                            for (auto& [k, v] : kwargs) items.emplace_back(k, v);
                            return MakeObject(std::move(items), /*is_namespace=*/true);
                          }));
    builtins.emplace_back("range", MakeCallable([](std::vector<Value>& args, KwArgs&) {
                            int64_t start = 0, stop = 0, step = 1;
                            for (const Value& a : args) {
                              if (!a.is_int()) throw JinjaError("range() takes integers");
                            }
                            if (args.size() == 1) {
                              stop = args[0].as_int();
                            } else if (args.size() >= 2) {
                              start = args[0].as_int();
                              stop = args[1].as_int();
                              if (args.size() == 3) step = args[2].as_int();
                            }
                            if (step == 0) throw JinjaError("range() step must not be zero");
                            Array out;
                            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
                              out.emplace_back(i);
                            return Value(std::move(out));
                          }));
    builtins.emplace_back(
        "raise_exception", MakeCallable([](std::vector<Value>& args, KwArgs&) -> Value {
          throw JinjaError(absl::StrCat("template raised an exception: ",
                                        args.empty() ? std::string() : args[0].ToString()));
        }));
    builtins.emplace_back("strftime_now", MakeCallable([](std::vector<Value>& args, KwArgs&) {
                            if (args.empty() || !args[0].is_string())
                              throw JinjaError("strftime_now() takes a format");
                            const std::time_t now = std::time(nullptr);
                            std::tm tm_now;
                            localtime_r(&now, &tm_now);
                            char buf[256];
                            const size_t n = std::strftime(buf, sizeof(buf),
                                                           args[0].as_string().c_str(), &tm_now);
                            return Value(std::string(buf, n));
                          }));
    if (globals.is_object()) {
      for (const auto& [k, v] : globals.as_object().items) builtins.emplace_back(k, v);
    }
    frames_.push_back(std::move(builtins));
    frames_.emplace_back();  // the template's own top-level variables
  }

  std::string Run(const Template& tmpl) {
    std::string out;
    Exec(tmpl.body, &out);
    return out;
  }

 private:
  Value Lookup(const std::string& name) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      for (auto it = frame->rbegin(); it != frame->rend(); ++it) {
        if (it->first == name) return it->second;
      }
    }
    return Value::MakeUndefined(name);
  }
  void Assign(const std::string& name, Value value) {
    Frame& frame = frames_.back();
    for (auto& [k, v] : frame) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    frame.emplace_back(name, std::move(value));
  }

  Flow Exec(const Body& body, std::string* out) {
    for (const NodePtr& node : body) {
      const Flow flow = ExecNode(*node, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow ExecNode(const Node& node, std::string* out) {
    switch (node.kind) {
      case Node::Kind::kText:
        out->append(node.text);
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        const Value v = Eval(*node.expr);
        if (v.is_callable()) throw JinjaError("cannot print a function" + At(node.line));
        out->append(v.ToString());
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [condition, body] : node.branches) {
          if (Eval(*condition).Truthy()) return Exec(body, out);
        }
        return Exec(node.else_body, out);
      case Node::Kind::kFor:
        return ExecFor(node, out);
      case Node::Kind::kSet: {
        Value value = Eval(*node.expr);
        if (!node.attr.empty()) {
          Value target = Lookup(node.targets[0]);
          if (!target.is_object() || !target.as_object().is_namespace) {
            throw JinjaError(absl::StrCat("cannot assign attribute '", node.attr, "' of '",
                                          node.targets[0], "' (not a namespace)", At(node.line)));
          }
          target.as_object().Set(node.attr, std::move(value));
        } else {
          AssignTargets(node.targets, std::move(value), node.line);
        }
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        Exec(node.body, &captured);
        Assign(node.targets[0], Value(std::move(captured)));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro: {
        const Node* macro = &node;
        Assign(node.macro_name,
               MakeCallable([this, macro](std::vector<Value>& args, KwArgs& kwargs) {
                 return CallMacro(*macro, args, kwargs);
               }));
        return Flow::kNormal;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void AssignTargets(const std::vector<std::string>& targets, Value value, int line) {
    if (targets.size() == 1) {
      Assign(targets[0], std::move(value));
      return;
    }
    if (!value.is_array() || value.as_array().size() != targets.size()) {
      throw JinjaError(absl::StrCat("cannot unpack ", value.TypeName(), " into ", targets.size(),
                                    " names", At(line)));
    }
    for (size_t i = 0; i < targets.size(); ++i) Assign(targets[i], value.as_array()[i]);
  }

  Value CallMacro(const Node& macro, std::vector<Value>& args, KwArgs& kwargs) {
    std::vector<Frame> saved = frames_;
    frames_.resize(2);
    frames_.emplace_back();
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [name, default_value] = macro.params[i];
      Value v;
      if (i < args.size()) {
        v = args[i];
      } else {
        bool found = false;
        for (auto& [k, kv] : kwargs) {
          if (k == name) {
            v = kv;
            found = true;
          }
        }
        if (!found && default_value) v = Eval(*default_value);
        if (!found && !default_value) v = Value::MakeUndefined(name);
      }
      Assign(name, std::move(v));
    }
    std::string out;
    Exec(macro.body, &out);
    frames_ = std::move(saved);
    return Value(std::move(out));
  }

  Flow ExecFor(const Node& node, std::string* out) {
    Value iterable = Eval(*node.expr);
    Array items;
    if (iterable.is_array()) {
      items = iterable.as_array();
    } else if (iterable.is_object()) {
      for (const auto& [k, v] : iterable.as_object().items) items.emplace_back(k);
    } else if (iterable.is_string()) {
      const std::string& s = iterable.as_string();
      for (size_t pos = 0; pos < s.size();) {
        size_t next = pos + 1;
        while (next < s.size() && (static_cast<unsigned char>(s[next]) & 0xC0) == 0x80) ++next;
        items.emplace_back(s.substr(pos, next - pos));
        pos = next;
      }
    } else if (!iterable.is_undefined() && !iterable.is_none()) {
      throw JinjaError(absl::StrCat("cannot iterate over ", iterable.TypeName(), At(node.line)));
    } else if (iterable.is_undefined()) {
      throw JinjaError(
          absl::StrCat("'", iterable.undefined_name(), "' is undefined", At(node.line)));
    }
    if (node.filter) {
      Array kept;
      for (Value& item : items) {
        frames_.emplace_back();
        AssignTargets(node.targets, item, node.line);
        const bool keep = Eval(*node.filter).Truthy();
        frames_.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return Exec(node.else_body, out);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      frames_.emplace_back();
      std::vector<std::pair<std::string, Value>> loop = {
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(n - i)},
          {"revindex0", Value(n - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == n - 1)},
          {"length", Value(n)},
          {"previtem",
           i > 0 ? items[static_cast<size_t>(i - 1)] : Value::MakeUndefined("previtem")},
          {"nextitem",
           i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::MakeUndefined("nextitem")},
      };
      Assign("loop", MakeObject(std::move(loop)));
      AssignTargets(node.targets, items[static_cast<size_t>(i)], node.line);
      const Flow flow = Exec(node.body, out);
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        Array items;
        for (const ExprPtr& c : e.children) items.push_back(Eval(*c));
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        std::vector<std::pair<std::string, Value>> items;
        for (size_t i = 0; i < e.keys.size(); ++i) {
          const Value key = Eval(*e.keys[i]);
          if (!key.is_string())
            throw JinjaError("unsupported construct: non-string dict key" + At(e.line));
          items.emplace_back(key.as_string(), Eval(*e.children[i]));
        }
        return MakeObject(std::move(items));
      }
      case Expr::Kind::kUnary: {
        const Value v = Eval(*e.children[0]);
        if (e.name == "not") return Value(!v.Truthy());
        if (!v.is_number())
          throw JinjaError(
              absl::StrCat("bad operand type for unary ", e.name, ": ", v.TypeName(), At(e.line)));
        if (e.name == "+") return v;
        return v.is_int() ? Value(-v.as_int()) : Value(-v.as_number());
      }
      case Expr::Kind::kBinary:
        return EvalBinary(e);
      case Expr::Kind::kTernary:
        if (Eval(*e.children[1]).Truthy()) return Eval(*e.children[0]);
        return e.children[2] ? Eval(*e.children[2]) : Value::MakeUndefined("else");
      case Expr::Kind::kGetAttr: {
        const Value object = Eval(*e.children[0]);
        return GetAttr(object, e.name, e.line);
      }
      case Expr::Kind::kGetItem: {
        const Value object = Eval(*e.children[0]);
        const Value key = Eval(*e.children[1]);
        return GetItem(object, key, e.line);
      }
      case Expr::Kind::kSlice: {
        const Value object = Eval(*e.children[0]);
        Value parts[3];
        const Value* ptrs[3] = {nullptr, nullptr, nullptr};
        for (int i = 0; i < 3; ++i) {
          if (e.children[static_cast<size_t>(i + 1)]) {
            parts[i] = Eval(*e.children[static_cast<size_t>(i + 1)]);
            ptrs[i] = &parts[i];
          }
        }
        return SliceValue(object, ptrs[0], ptrs[1], ptrs[2]);
      }
      case Expr::Kind::kCall:
        return EvalCall(e);
      case Expr::Kind::kFilter: {
        const Value v = Eval(*e.children[0]);
        std::vector<Value> args;
        for (size_t i = 1; i < e.children.size(); ++i) args.push_back(Eval(*e.children[i]));
        KwArgs kwargs;
        for (const auto& [k, x] : e.kwargs) kwargs.emplace_back(k, Eval(*x));
        try {
          return ApplyFilter(e.name, v, args, kwargs);
        } catch (const JinjaError& error) {
          throw JinjaError(error.what() + At(e.line));
        }
      }
      case Expr::Kind::kTest: {
        const Value v = Eval(*e.children[0]);
        std::vector<Value> args;
        for (size_t i = 1; i < e.children.size(); ++i) args.push_back(Eval(*e.children[i]));
        try {
          return Value(ApplyTest(e.name, v, args) != e.negated);
        } catch (const JinjaError& error) {
          throw JinjaError(error.what() + At(e.line));
        }
      }
    }
    throw JinjaError("unsupported expression" + At(e.line));
  }

  Value GetAttr(const Value& object, const std::string& name, int line) {
    if (object.is_undefined()) {
      throw JinjaError(absl::StrCat("'", object.undefined_name(), "' is undefined (reading '.",
                                    name, "')", At(line)));
    }
    if (object.is_object()) {
      if (const Value* v = object.as_object().Find(name)) return *v;
    }
    return Value::MakeUndefined(name);
  }

  Value GetItem(const Value& object, const Value& key, int line) {
    if (object.is_undefined()) {
      throw JinjaError(
          absl::StrCat("'", object.undefined_name(), "' is undefined (subscript)", At(line)));
    }
    if (object.is_object() && key.is_string()) return GetAttr(object, key.as_string(), line);
    if ((object.is_array() || object.is_string()) && key.is_int()) {
      Value stop(key.as_int() == -1 ? Value::None() : Value(key.as_int() + 1));
      if (object.is_array()) {
        const auto size = static_cast<int64_t>(object.as_array().size());
        int64_t i = key.as_int() < 0 ? key.as_int() + size : key.as_int();
        if (i < 0 || i >= size) return Value::MakeUndefined("index");
        return object.as_array()[static_cast<size_t>(i)];
      }
      const Value one = SliceValue(object, &key, stop.is_none() ? nullptr : &stop, nullptr);
      if (one.as_string().empty()) return Value::MakeUndefined("index");
      return one;
    }
    if (object.is_none()) throw JinjaError("None has no items" + At(line));
    return Value::MakeUndefined(key.ToString());
  }

  Value EvalCall(const Expr& e) {
    std::vector<Value> args;
    for (size_t i = 1; i < e.children.size(); ++i) args.push_back(Eval(*e.children[i]));
    KwArgs kwargs;
    for (const auto& [k, x] : e.kwargs) kwargs.emplace_back(k, Eval(*x));
    const Expr& callee = *e.children[0];
    if (callee.kind == Expr::Kind::kGetAttr) {
      const Value object = Eval(*callee.children[0]);
      if (object.is_undefined()) GetAttr(object, callee.name, e.line);  // throws
      if (object.is_object()) {
        const Value* member = object.as_object().Find(callee.name);
        if (member != nullptr && member->is_callable()) return member->as_callable()(args, kwargs);
      }
      try {
        return CallMethod(object, callee.name, args, kwargs);
      } catch (const JinjaError& error) {
        throw JinjaError(error.what() + At(e.line));
      }
    }
    const Value function = Eval(callee);
    if (!function.is_callable()) {
      const std::string what = callee.kind == Expr::Kind::kName ? callee.name : function.TypeName();
      throw JinjaError(absl::StrCat("unsupported function '", what, "'", At(e.line)));
    }
    return function.as_callable()(args, kwargs);
  }

  Value EvalBinary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = Eval(*e.children[0]);
      return a.Truthy() ? Eval(*e.children[1]) : a;
    }
    if (op == "or") {
      Value a = Eval(*e.children[0]);
      return a.Truthy() ? a : Eval(*e.children[1]);
    }
    const Value a = Eval(*e.children[0]);
    const Value b = Eval(*e.children[1]);
    if (op == "~") return Value(a.ToString() + b.ToString());
    if (op == "==") return Value(a.Equals(b));
    if (op == "!=") return Value(!a.Equals(b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string() && a.is_string()) {
        found = b.as_string().find(a.as_string()) != std::string::npos;
      } else if (b.is_array()) {
        for (const Value& item : b.as_array()) found = found || item.Equals(a);
      } else if (b.is_object() && a.is_string()) {
        found = b.as_object().Find(a.as_string()) != nullptr;
      } else if (b.is_undefined()) {
        throw JinjaError(
            absl::StrCat("'", b.undefined_name(), "' is undefined (in 'in')", At(e.line)));
      } else {
        throw JinjaError(absl::StrCat("'in' is unsupported between ", a.TypeName(), " and ",
                                      b.TypeName(), At(e.line)));
      }
      return Value(op == "in" ? found : !found);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.is_number() && b.is_number()) {
        cmp = a.as_number() < b.as_number() ? -1 : a.as_number() > b.as_number() ? 1 : 0;
      } else if (a.is_string() && b.is_string()) {
        cmp = a.as_string().compare(b.as_string());
      } else {
        throw JinjaError(absl::StrCat("'", op, "' is unsupported between ", a.TypeName(), " and ",
                                      b.TypeName(), At(e.line)));
      }
      if (op == "<") return Value(cmp < 0);
      if (op == ">") return Value(cmp > 0);
      if (op == "<=") return Value(cmp <= 0);
      return Value(cmp >= 0);
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_array() && b.is_array()) {
        Array joined = a.as_array();
        joined.insert(joined.end(), b.as_array().begin(), b.as_array().end());
        return Value(std::move(joined));
      }
    }
    if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
      const std::string& s = a.is_string() ? a.as_string() : b.as_string();
      std::string out;
      for (int64_t i = 0, n = a.is_int() ? a.as_int() : b.as_int(); i < n; ++i) out += s;
      return Value(std::move(out));
    }
    if (!a.is_number() || !b.is_number() || a.is_bool() || b.is_bool()) {
      throw JinjaError(absl::StrCat("unsupported operand types for ", op, ": ", a.TypeName(),
                                    " and ", b.TypeName(), At(e.line)));
    }
    const bool ints = a.is_int() && b.is_int();
    if (op == "+")
      return ints ? Value(a.as_int() + b.as_int()) : Value(a.as_number() + b.as_number());
    if (op == "-")
      return ints ? Value(a.as_int() - b.as_int()) : Value(a.as_number() - b.as_number());
    if (op == "*")
      return ints ? Value(a.as_int() * b.as_int()) : Value(a.as_number() * b.as_number());
    if (op == "/") {
      if (b.as_number() == 0) throw JinjaError("division by zero" + At(e.line));
      return Value(a.as_number() / b.as_number());
    }
    if (op == "//" || op == "%") {
      if (b.as_number() == 0) throw JinjaError("division by zero" + At(e.line));
      if (ints) {
        int64_t q = a.as_int() / b.as_int();
        if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
        return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
      }
      const double q = std::floor(a.as_number() / b.as_number());
      return op == "//" ? Value(q) : Value(a.as_number() - q * b.as_number());
    }
    if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
        return Value(r);
      }
      return Value(std::pow(a.as_number(), b.as_number()));
    }
    throw JinjaError(absl::StrCat("unsupported operator '", op, "'", At(e.line)));
  }

  std::vector<Frame> frames_;
};

}  // namespace

std::string Render(const Template& tmpl, const Value& globals) {
  return Interpreter(globals).Run(tmpl);
}

}  // namespace kvserve::model::jinja
