// Renders a parsed Jinja template against global variables.
#include "tokenizer/jinja_interpreter.h"

#include <cmath>
#include <ctime>
#include <iterator>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_meter.h"

namespace kvserve::tokenizer::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

using Frame = std::vector<std::pair<std::string, Value>>;

std::string At(int line) { return absl::StrCat(" at line ", line); }

JinjaError Overflow(const std::string& op) {
  return JinjaError(absl::StrCat("integer overflow in '", op, "'"));
}

// Python's int arithmetic on int64: overflow, division by zero and INT64_MIN // -1 throw
// instead of wrapping or trapping.
int64_t IntArithmetic(const std::string& op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(a, b, &r)) throw Overflow(op);
    return r;
  }
  if (op == "-") {
    if (__builtin_sub_overflow(a, b, &r)) throw Overflow(op);
    return r;
  }
  if (op == "*") {
    if (__builtin_mul_overflow(a, b, &r)) throw Overflow(op);
    return r;
  }
  if (op == "//" || op == "%") {
    if (b == 0) throw JinjaError("division by zero");
    if (b == -1) {  // a / -1 traps on x86 for INT64_MIN
      if (op == "%") return 0;
      if (a == std::numeric_limits<int64_t>::min()) throw Overflow(op);
      return -a;
    }
    int64_t quotient = a / b;
    int64_t remainder = a % b;
    if (remainder != 0 && ((remainder < 0) != (b < 0))) {  // floor, as Python does
      --quotient;
      remainder += b;
    }
    return op == "//" ? quotient : remainder;
  }
  // "**" with b >= 0, by squaring: a factor that overflows means the result does.
  int64_t result = 1;
  int64_t base = a;
  for (int64_t e = b; e > 0; e >>= 1) {
    if ((e & 1) != 0 && __builtin_mul_overflow(result, base, &result)) throw Overflow(op);
    if (e > 1 && __builtin_mul_overflow(base, base, &base)) throw Overflow(op);
  }
  return result;
}

// Items of range(start, stop, step) (step != 0), counted without overflow.
uint64_t RangeCount(int64_t start, int64_t stop, int64_t step) {
  if (step > 0 ? stop <= start : stop >= start) return 0;
  const uint64_t span = step > 0 ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start)
                                 : static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
  const uint64_t stride =
      step > 0 ? static_cast<uint64_t>(step) : static_cast<uint64_t>(-(step + 1)) + 1;
  return (span - 1) / stride + 1;
}

int64_t ClampToInt64(uint64_t n) {
  return n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(n);
}

class Interpreter {
 public:
  Interpreter(const Value& globals, RenderMeter& meter) : meter_(meter) {
    Frame builtins;
    builtins.emplace_back(
        "namespace", MakeCallable([this](std::vector<Value>& args, KwArgs& kwargs) {
          auto ns = std::make_shared<Object>();
          ns->is_namespace = true;
          if (!args.empty()) {
            if (!args[0].is_object())
              throw JinjaError("namespace() takes a dict or keyword arguments");
            meter_.ChargeItems(static_cast<int64_t>(args[0].as_object().items.size()));
            ns->items = args[0].as_object().items;
          }
          for (auto& [k, v] : kwargs) ns->items.emplace_back(k, v);
          TrackNamespace(ns);
          return Value(std::move(ns));
        }));
    builtins.emplace_back("range", MakeCallable([this](std::vector<Value>& args, KwArgs&) {
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
                            const int64_t count = ClampToInt64(RangeCount(start, stop, step));
                            meter_.CheckList(count);
                            meter_.ChargeItems(count);
                            Array out;
                            out.reserve(static_cast<size_t>(count));
                            for (int64_t i = start, k = 0; k < count; ++k) {
                              out.emplace_back(i);
                              if (k + 1 < count) i += step;  // stays inside [start, stop)
                            }
                            return Value(std::move(out));
                          }));
    builtins.emplace_back(
        "raise_exception", MakeCallable([this](std::vector<Value>& args, KwArgs&) -> Value {
          throw JinjaError(absl::StrCat("template raised an exception: ",
                                        args.empty() ? std::string() : args[0].ToString(meter_)));
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

  // A namespace attribute may refer back to its namespace; emptying every namespace the render
  // made breaks such cycles, so nothing the render allocated outlives it.
  ~Interpreter() {
    for (const std::weak_ptr<Object>& weak : namespaces_) {
      if (std::shared_ptr<Object> ns = weak.lock()) {
        std::vector<std::pair<std::string, Value>> items = std::move(ns->items);
        ns->items.clear();
      }
    }
  }

  std::string Run(const Template& tmpl) {
    std::string out;
    Exec(tmpl.body, &out);
    return out;
  }

 private:
  void TrackNamespace(const std::shared_ptr<Object>& ns) {
    if (namespaces_.size() >= 2 * live_namespaces_ + 64) {  // drop the dead ones now and then
      std::erase_if(namespaces_, [](const std::weak_ptr<Object>& w) { return w.expired(); });
      live_namespaces_ = namespaces_.size();
    }
    namespaces_.push_back(ns);
  }

  // Appends `text` to the output being built (the render's, a macro's or a set block's).
  void Emit(std::string_view text, std::string* out) {
    meter_.CheckOutput(static_cast<int64_t>(out->size() + text.size()));
    meter_.ChargeBytes(static_cast<int64_t>(text.size()));
    out->append(text);
  }

  // Scans the frames innermost first; charges the entries it passes (the globals frame holds
  // every template kwarg of the request).
  Value Lookup(const std::string& name) const {
    int64_t scanned = 0;
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      for (auto it = frame->rbegin(); it != frame->rend(); ++it) {
        ++scanned;
        if (it->first == name) {
          meter_.ChargeItems(scanned);
          return it->second;
        }
      }
    }
    meter_.ChargeItems(scanned);
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
    RenderMeter::EvalScope scope(meter_);
    meter_.Charge(1);
    switch (node.kind) {
      case Node::Kind::kText:
        Emit(node.text, out);
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        const Value v = Eval(*node.expr);
        if (v.is_callable()) throw JinjaError("cannot print a function" + At(node.line));
        if (v.is_string()) {
          Emit(v.as_string(), out);
        } else {
          Emit(v.ToString(meter_), out);
        }
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
    RenderMeter::CallScope call(meter_);
    meter_.Charge(RenderMeter::kStepsPerCall);
    // The macro sees the globals and the template's top-level names, not its caller's locals;
    // those are moved aside (not copied) and moved back after the call.
    std::vector<Frame> caller_frames(std::make_move_iterator(frames_.begin() + 2),
                                     std::make_move_iterator(frames_.end()));
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
    frames_.resize(2);
    frames_.insert(frames_.end(), std::make_move_iterator(caller_frames.begin()),
                   std::make_move_iterator(caller_frames.end()));
    return Value(std::move(out));
  }

  // Charges the copy of `v` a loop makes (strings are copied, lists and dicts shared).
  void ChargeCopy(const Value& v) {
    if (v.is_string()) meter_.ChargeBytes(static_cast<int64_t>(v.as_string().size()));
  }

  Flow ExecFor(const Node& node, std::string* out) {
    Value iterable = Eval(*node.expr);
    Array items;
    if (iterable.is_array()) {
      meter_.ChargeItems(static_cast<int64_t>(iterable.as_array().size()));
      items = iterable.as_array();
    } else if (iterable.is_object()) {
      meter_.ChargeItems(static_cast<int64_t>(iterable.as_object().items.size()));
      for (const auto& [k, v] : iterable.as_object().items) items.emplace_back(k);
    } else if (iterable.is_string()) {
      const std::string& s = iterable.as_string();
      auto is_continuation = [&s](size_t i) {
        return (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
      };
      int64_t count = 0;
      for (size_t i = 0; i < s.size(); ++i) count += i == 0 || !is_continuation(i);
      meter_.CheckList(count);
      meter_.ChargeItems(count);
      for (size_t pos = 0; pos < s.size();) {
        size_t next = pos + 1;
        while (next < s.size() && is_continuation(next)) ++next;
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
        meter_.Charge(1);
        ChargeCopy(item);
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
      meter_.Charge(RenderMeter::kStepsPerLoopIteration);
      const Value& item = items[static_cast<size_t>(i)];
      ChargeCopy(item);
      frames_.emplace_back();
      std::vector<std::pair<std::string, Value>> loop = {
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(n - i)},
          {"revindex0", Value(n - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == n - 1)},
          {"length", Value(n)},
          {"previtem", Value::MakeUndefined("previtem")},
          {"nextitem", Value::MakeUndefined("nextitem")},
      };
      if (i > 0) {
        loop[7].second = items[static_cast<size_t>(i - 1)];
        ChargeCopy(loop[7].second);
      }
      if (i + 1 < n) {
        loop[8].second = items[static_cast<size_t>(i + 1)];
        ChargeCopy(loop[8].second);
      }
      Assign("loop", MakeObject(std::move(loop)));
      AssignTargets(node.targets, item, node.line);
      const Flow flow = Exec(node.body, out);
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // Evaluates `e`, counting the step, the nesting and the size of the result.
  Value Eval(const Expr& e) {
    RenderMeter::EvalScope scope(meter_);
    meter_.Charge(1);
    Value v = EvalExpr(e);
    if (v.is_string()) {
      meter_.CheckString(static_cast<int64_t>(v.as_string().size()));
      meter_.ChargeBytes(static_cast<int64_t>(v.as_string().size()));
    } else if (v.is_array()) {
      meter_.CheckList(static_cast<int64_t>(v.as_array().size()));
    }
    return v;
  }

  Value EvalExpr(const Expr& e) {
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
        if (v.is_int()) {
          if (v.as_int() == std::numeric_limits<int64_t>::min())
            throw JinjaError(Overflow("-").what() + At(e.line));
          return Value(-v.as_int());
        }
        return Value(-v.as_number());
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
        return SliceValue(object, ptrs[0], ptrs[1], ptrs[2], meter_);
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
          return ApplyFilter(e.name, v, args, kwargs, meter_);
        } catch (const JinjaError& error) {
          throw JinjaError(error.what() + At(e.line));
        }
      }
      case Expr::Kind::kTest: {
        const Value v = Eval(*e.children[0]);
        std::vector<Value> args;
        for (size_t i = 1; i < e.children.size(); ++i) args.push_back(Eval(*e.children[i]));
        try {
          return Value(ApplyTest(e.name, v, args, meter_) != e.negated);
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
      meter_.ChargeItems(static_cast<int64_t>(object.as_object().items.size()));
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
      const int64_t size = object.is_array() ? static_cast<int64_t>(object.as_array().size())
                                             : CountCodePoints(object.as_string());
      const int64_t i = key.as_int() < 0 ? key.as_int() + size : key.as_int();
      if (i < 0 || i >= size) return Value::MakeUndefined("index");
      if (object.is_array()) return object.as_array()[static_cast<size_t>(i)];
      const Value start(i);
      const Value stop(i + 1);
      return SliceValue(object, &start, &stop, nullptr, meter_);
    }
    if (object.is_none()) throw JinjaError("None has no items" + At(line));
    return Value::MakeUndefined(key.ToString(meter_));
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
        meter_.ChargeItems(static_cast<int64_t>(object.as_object().items.size()));
        const Value* member = object.as_object().Find(callee.name);
        if (member != nullptr && member->is_callable()) return member->as_callable()(args, kwargs);
      }
      try {
        return CallMethod(object, callee.name, args, kwargs, meter_);
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
    if (op == "~") {
      std::string joined = a.ToString(meter_);
      const std::string right = b.ToString(meter_);
      meter_.CheckString(static_cast<int64_t>(joined.size() + right.size()));
      joined.append(right);
      return Value(std::move(joined));
    }
    if (op == "==") return Value(a.Equals(b, meter_));
    if (op == "!=") return Value(!a.Equals(b, meter_));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string() && a.is_string()) {
        meter_.ChargeBytes(static_cast<int64_t>(b.as_string().size()));
        found = b.as_string().find(a.as_string()) != std::string::npos;
      } else if (b.is_array()) {
        for (const Value& item : b.as_array()) found = found || item.Equals(a, meter_);
      } else if (b.is_object() && a.is_string()) {
        meter_.ChargeItems(static_cast<int64_t>(b.as_object().items.size()));
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
      if (a.is_string() && b.is_string()) {
        meter_.CheckString(static_cast<int64_t>(a.as_string().size() + b.as_string().size()));
        return Value(a.as_string() + b.as_string());
      }
      if (a.is_array() && b.is_array()) {
        const auto size = static_cast<int64_t>(a.as_array().size() + b.as_array().size());
        meter_.CheckList(size);
        meter_.ChargeItems(size);
        Array joined = a.as_array();
        joined.insert(joined.end(), b.as_array().begin(), b.as_array().end());
        return Value(std::move(joined));
      }
    }
    if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
      const std::string& s = a.is_string() ? a.as_string() : b.as_string();
      const int64_t times = a.is_int() ? a.as_int() : b.as_int();
      if (times <= 0 || s.empty()) return Value(std::string());
      int64_t size = 0;
      if (__builtin_mul_overflow(static_cast<int64_t>(s.size()), times, &size)) {
        size = std::numeric_limits<int64_t>::max();
      }
      meter_.CheckString(size);
      meter_.ChargeBytes(size);
      std::string out;
      out.reserve(static_cast<size_t>(size));
      for (int64_t i = 0; i < times; ++i) out += s;
      return Value(std::move(out));
    }
    if (!a.is_number() || !b.is_number() || a.is_bool() || b.is_bool()) {
      throw JinjaError(absl::StrCat("unsupported operand types for ", op, ": ", a.TypeName(),
                                    " and ", b.TypeName(), At(e.line)));
    }
    const bool ints = a.is_int() && b.is_int();
    if (ints && (op == "+" || op == "-" || op == "*" || op == "//" || op == "%" ||
                 (op == "**" && b.as_int() >= 0))) {
      try {
        return Value(IntArithmetic(op, a.as_int(), b.as_int()));
      } catch (const JinjaError& error) {
        throw JinjaError(error.what() + At(e.line));
      }
    }
    const double x = a.as_number();
    const double y = b.as_number();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "/") {
      if (y == 0) throw JinjaError("division by zero" + At(e.line));
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) throw JinjaError("division by zero" + At(e.line));
      const double q = std::floor(x / y);
      return op == "//" ? Value(q) : Value(x - q * y);
    }
    if (op == "**") {
      if (x == 0 && y < 0) throw JinjaError("division by zero" + At(e.line));
      return Value(std::pow(x, y));
    }
    throw JinjaError(absl::StrCat("unsupported operator '", op, "'", At(e.line)));
  }

  RenderMeter& meter_;
  std::vector<Frame> frames_;
  // Every namespace() the render made, emptied when it ends (see ~Interpreter).
  std::vector<std::weak_ptr<Object>> namespaces_;
  size_t live_namespaces_ = 0;
};

}  // namespace

std::string Render(const Template& tmpl, const Value& globals, RenderMeter& meter) {
  return Interpreter(globals, meter).Run(tmpl);
}

}  // namespace kvserve::tokenizer::jinja
