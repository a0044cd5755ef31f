// Parses Jinja template source (the subset chat templates use) into a syntax tree.
#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer::jinja {
namespace {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string text;
  int line;
};

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// trim_blocks / lstrip_blocks and the final newline, as @huggingface/jinja and Transformers do.
std::string Preprocess(std::string_view source) {
  std::string s(source);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  std::string lstripped;
  lstripped.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
    const bool strip =
        j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-');
    size_t line_end = s.find('\n', i);
    line_end = line_end == std::string::npos ? s.size() : line_end + 1;
    lstripped.append(s, strip ? j : i, line_end - (strip ? j : i));
    i = line_end;
  }
  std::string out;
  out.reserve(lstripped.size());
  for (size_t i = 0; i < lstripped.size(); ++i) {
    out.push_back(lstripped[i]);
    if (i + 2 < lstripped.size() + 1 && lstripped[i] == '}' && i > 0 &&
        (lstripped[i - 1] == '%' || lstripped[i - 1] == '#' || lstripped[i - 1] == '-') &&
        i + 1 < lstripped.size() && lstripped[i + 1] == '\n') {
      ++i;  // drop the newline after a block tag
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> Run() {
    bool strip_next_text = false;
    while (pos_ < src_.size()) {
      size_t open = src_.find('{', pos_);
      while (open != std::string::npos && open + 1 < src_.size() && src_[open + 1] != '{' &&
             src_[open + 1] != '%' && src_[open + 1] != '#') {
        open = src_.find('{', open + 1);
      }
      if (open == std::string::npos || open + 1 >= src_.size()) open = src_.size();
      std::string text = src_.substr(pos_, open - pos_);
      if (strip_next_text) {
        size_t k = 0;
        while (k < text.size() && IsSpace(text[k])) ++k;
        text.erase(0, k);
      }
      const bool strip_before = open + 2 < src_.size() && src_[open + 2] == '-';
      if (strip_before) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      CountLines(pos_, open);
      if (!text.empty()) tokens_.push_back({Token::Type::kText, std::move(text), line_});
      if (open >= src_.size()) break;
      const char kind = src_[open + 1];
      pos_ = open + 2 + (strip_before ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) throw Error("unclosed comment");
        strip_next_text = close > 0 && src_[close - 1] == '-';
        CountLines(pos_, close);
        pos_ = close + 2;
        continue;
      }
      tokens_.push_back(
          {kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", line_});
      strip_next_text = LexTag(kind == '{' ? '}' : '%');
    }
    tokens_.push_back({Token::Type::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  JinjaError Error(const std::string& what) const {
    return JinjaError(absl::StrCat(what, " at line ", line_));
  }
  void CountLines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < src_.size(); ++i) line_ += src_[i] == '\n';
  }

  // Lexes expression tokens up to the closing "}}" / "%}"; returns whether it was "-}}"/"-%}".
  bool LexTag(char closer) {
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) throw Error("unclosed tag");
      const char c = src_[pos_];
      auto at = [&](std::string_view s) { return src_.compare(pos_, s.size(), s) == 0; };
      if ((c == '-' && pos_ + 2 < src_.size() + 0 && src_[pos_ + 1] == closer &&
           src_[pos_ + 2] == '}') ||
          (c == closer && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}')) {
        const bool strip = c == '-';
        pos_ += strip ? 3 : 2;
        tokens_.push_back(
            {closer == '}' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", line_});
        return strip;
      }
      if (c == '\'' || c == '"') {
        tokens_.push_back({Token::Type::kString, LexString(c), line_});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t end = pos_;
        bool is_float = false;
        while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) ||
                                     (src_[end] == '.' && !is_float && end + 1 < src_.size() &&
                                      std::isdigit(static_cast<unsigned char>(src_[end + 1]))))) {
          is_float |= src_[end] == '.';
          ++end;
        }
        tokens_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt,
                           src_.substr(pos_, end - pos_), line_});
        pos_ = end;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos_;
        while (end < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
          ++end;
        }
        tokens_.push_back({Token::Type::kName, src_.substr(pos_, end - pos_), line_});
        pos_ = end;
        continue;
      }
      for (std::string_view op : {"//", "**", "==", "!=", "<=", ">="}) {
        if (at(op)) {
          tokens_.push_back({Token::Type::kOp, std::string(op), line_});
          pos_ += 2;
          goto next;
        }
      }
      if (std::string_view("()[]{}.,:|~+-*/%<>=").find(c) != std::string_view::npos) {
        tokens_.push_back({Token::Type::kOp, std::string(1, c), line_});
        ++pos_;
        continue;
      }
      throw Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
    next:;
    }
  }

  std::string LexString(char quote) {
    std::string out;
    ++pos_;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_++];
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ >= src_.size()) {
        out.push_back(c);
        continue;
      }
      const char e = src_[pos_++];
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        default:
          out.push_back('\\');
          out.push_back(e);
      }
    }
    if (pos_ >= src_.size()) throw Error("unterminated string literal");
    ++pos_;
    return out;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  std::unique_ptr<Template> Run() {
    auto tmpl = std::make_unique<Template>();
    std::string end;
    tmpl->body = ParseBody({}, &end);
    return tmpl;
  }

 private:
  // Held while parsing one nested block or expression level; throws past kMaxParseNesting.
  class Nesting {
   public:
    Nesting(const Parser& parser, int* depth, std::string_view what) : depth_(depth) {
      if (*depth_ >= kMaxParseNesting) {
        throw parser.Error(
            absl::StrCat(AsAbsl(what), " nested deeper than ", kMaxParseNesting, " levels"));
      }
      ++*depth_;
    }
    ~Nesting() { --*depth_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    int* depth_;
  };

  // Sets e->height from its children's; throws when that passes kMaxParseNesting.
  ExprPtr Finish(ExprPtr e) const {
    int tallest = 0;
    for (const ExprPtr& c : e->children) {
      if (c) tallest = std::max(tallest, c->height);
    }
    for (const ExprPtr& k : e->keys) tallest = std::max(tallest, k->height);
    for (const auto& [name, x] : e->kwargs) tallest = std::max(tallest, x->height);
    e->height = tallest + 1;
    if (e->height > kMaxParseNesting) {
      throw Error(absl::StrCat("expression nested deeper than ", kMaxParseNesting, " levels"));
    }
    return e;
  }

  Value ParseInt(const std::string& text) const {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
      throw Error(absl::StrCat("integer literal ", text, " is out of range"));
    }
    return Value(v);
  }

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  Token Next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  JinjaError Error(const std::string& what) const {
    return JinjaError(absl::StrCat(what, " at line ", Peek().line));
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == Token::Type::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Token::Type::kName && Peek(ahead).text == name;
  }
  void ExpectOp(std::string_view op) {
    if (!IsOp(op))
      throw Error(absl::StrCat("expected '", AsAbsl(op), "' but found '", Peek().text, "'"));
    ++pos_;
  }
  std::string ExpectName() {
    if (Peek().type != Token::Type::kName)
      throw Error(absl::StrCat("expected a name but found '", Peek().text, "'"));
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().type != Token::Type::kBlockEnd) {
      throw Error(absl::StrCat("expected '%}' but found '", Peek().text, "'"));
    }
    ++pos_;
  }

  // Parses nodes until a block whose keyword is in `ends` (consumed up to the keyword; the
  // keyword is stored in *end). At top level `ends` is empty and parsing stops at EOF.
  Body ParseBody(const std::vector<std::string_view>& ends, std::string* end) {
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.type == Token::Type::kEof) {
        if (!ends.empty()) throw Error(absl::StrCat("missing '{% ", AsAbsl(ends.back()), " %}'"));
        return body;
      }
      if (t.type == Token::Type::kText) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->text = t.text;
        node->line = t.line;
        body.push_back(std::move(node));
        ++pos_;
        continue;
      }
      if (t.type == Token::Type::kVarBegin) {
        ++pos_;
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = t.line;
        node->expr = ParseExpression(true);
        if (Peek().type != Token::Type::kVarEnd)
          throw Error(absl::StrCat("expected '}}' but found '", Peek().text, "'"));
        ++pos_;
        body.push_back(std::move(node));
        continue;
      }
      if (t.type != Token::Type::kBlockBegin) throw Error("unexpected token");
      const Token& keyword = Peek(1);
      if (keyword.type != Token::Type::kName) throw Error("expected a statement keyword");
      for (std::string_view e : ends) {
        if (keyword.text == e) {
          pos_ += 2;
          *end = keyword.text;
          return body;
        }
      }
      pos_ += 2;
      if (NodePtr node = ParseStatement(keyword.text, keyword.line))
        body.push_back(std::move(node));
    }
  }

  NodePtr ParseStatement(const std::string& keyword, int line) {
    Nesting nesting(*this, &block_depth_, "blocks");
    auto node = std::make_unique<Node>();
    node->line = line;
    std::string end;
    if (keyword == "if") {
      node->kind = Node::Kind::kIf;
      ExprPtr condition = ParseExpression(true);
      ExpectBlockEnd();
      while (true) {
        Body body = ParseBody({"elif", "else", "endif"}, &end);
        node->branches.emplace_back(std::move(condition), std::move(body));
        if (end == "elif") {
          condition = ParseExpression(true);
          ExpectBlockEnd();
          continue;
        }
        ExpectBlockEnd();
        if (end == "else") {
          node->else_body = ParseBody({"endif"}, &end);
          ExpectBlockEnd();
        }
        return node;
      }
    }
    if (keyword == "for") {
      node->kind = Node::Kind::kFor;
      node->targets.push_back(ExpectName());
      while (IsOp(",")) {
        ++pos_;
        node->targets.push_back(ExpectName());
      }
      if (!IsName("in")) throw Error("expected 'in' in for loop");
      ++pos_;
      node->expr = ParseExpression(false);
      if (IsName("if")) {
        ++pos_;
        node->filter = ParseExpression(false);
      }
      if (IsName("recursive")) throw Error("unsupported construct 'recursive' loop");
      ExpectBlockEnd();
      node->body = ParseBody({"else", "endfor"}, &end);
      ExpectBlockEnd();
      if (end == "else") {
        node->else_body = ParseBody({"endfor"}, &end);
        ExpectBlockEnd();
      }
      return node;
    }
    if (keyword == "set") {
      node->targets.push_back(ExpectName());
      if (IsOp(".")) {
        ++pos_;
        node->attr = ExpectName();
      }
      while (IsOp(",")) {
        ++pos_;
        node->targets.push_back(ExpectName());
      }
      if (Peek().type == Token::Type::kBlockEnd) {
        if (!node->attr.empty() || node->targets.size() != 1) throw Error("bad block set");
        ++pos_;
        node->kind = Node::Kind::kSetBlock;
        node->body = ParseBody({"endset"}, &end);
        ExpectBlockEnd();
        return node;
      }
      node->kind = Node::Kind::kSet;
      ExpectOp("=");
      node->expr = ParseExpression(true);
      if (IsOp(",")) {  // set a, b = x, y
        auto tuple = std::make_unique<Expr>();
        tuple->kind = Expr::Kind::kTuple;
        tuple->children.push_back(std::move(node->expr));
        while (IsOp(",")) {
          ++pos_;
          tuple->children.push_back(ParseExpression(true));
        }
        node->expr = Finish(std::move(tuple));
      }
      ExpectBlockEnd();
      return node;
    }
    if (keyword == "macro") {
      node->kind = Node::Kind::kMacro;
      node->macro_name = ExpectName();
      ExpectOp("(");
      while (!IsOp(")")) {
        std::string param = ExpectName();
        ExprPtr default_value;
        if (IsOp("=")) {
          ++pos_;
          default_value = ParseExpression(true);
        }
        node->params.emplace_back(std::move(param), std::move(default_value));
        if (!IsOp(")")) ExpectOp(",");
      }
      ++pos_;
      ExpectBlockEnd();
      node->body = ParseBody({"endmacro"}, &end);
      ExpectBlockEnd();
      return node;
    }
    if (keyword == "break" || keyword == "continue") {
      node->kind = keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      ExpectBlockEnd();
      return node;
    }
    if (keyword == "generation" || keyword == "endgeneration") {  // Transformers' marker: no output
      ExpectBlockEnd();
      return nullptr;
    }
    throw JinjaError(absl::StrCat("unsupported statement '", keyword, "' at line ", line));
  }

  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr MakeBinary(std::string op, ExprPtr a, ExprPtr b, int line) {
    ExprPtr e = Make(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return Finish(std::move(e));
  }

  ExprPtr ParseExpression(bool allow_conditional) {
    Nesting nesting(*this, &expression_depth_, "expression");
    ExprPtr value = ParseOr();
    if (allow_conditional && IsName("if")) {
      const int line = Peek().line;
      ++pos_;
      ExprPtr condition = ParseOr();
      ExprPtr otherwise;
      if (IsName("else")) {
        ++pos_;
        otherwise = ParseExpression(true);
      }
      ExprPtr e = Make(Expr::Kind::kTernary, line);
      e->children.push_back(std::move(value));
      e->children.push_back(std::move(condition));
      e->children.push_back(std::move(otherwise));
      return Finish(std::move(e));
    }
    return value;
  }
  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      const int line = Next().line;
      left = MakeBinary("or", std::move(left), ParseAnd(), line);
    }
    return left;
  }
  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      const int line = Next().line;
      left = MakeBinary("and", std::move(left), ParseNot(), line);
    }
    return left;
  }
  ExprPtr ParseNot() {
    if (IsName("not")) {
      Nesting nesting(*this, &expression_depth_, "expression");
      const int line = Next().line;
      ExprPtr e = Make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->children.push_back(ParseNot());
      return Finish(std::move(e));
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr left = ParseMath1();
    while (true) {
      const int line = Peek().line;
      std::string op;
      if (Peek().type == Token::Type::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++pos_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        return left;
      }
      left = MakeBinary(op, std::move(left), ParseMath1(), line);
    }
  }
  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token t = Next();
      left = MakeBinary(t.text, std::move(left), ParseConcat(), t.line);
    }
    return left;
  }
  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOp("~")) {
      const Token t = Next();
      left = MakeBinary("~", std::move(left), ParseMath2(), t.line);
    }
    return left;
  }
  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token t = Next();
      left = MakeBinary(t.text, std::move(left), ParsePow(), t.line);
    }
    return left;
  }
  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      const Token t = Next();
      left = MakeBinary("**", std::move(left), ParseUnary(true), t.line);
    }
    return left;
  }
  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      Nesting nesting(*this, &expression_depth_, "expression");
      const Token t = Next();
      node = Make(Expr::Kind::kUnary, t.line);
      node->name = t.text;
      node->children.push_back(ParseUnary(false));
      node = Finish(std::move(node));
    } else {
      node = ParsePostfix(ParsePrimary());
    }
    if (with_filter) node = ParseFilters(std::move(node));
    return node;
  }

  void ParseCallArgs(Expr* call) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (Peek().type == Token::Type::kName && IsOp("=", 1)) {
        std::string name = Next().text;
        ++pos_;
        call->kwargs.emplace_back(std::move(name), ParseExpression(true));
      } else {
        call->children.push_back(ParseExpression(true));
      }
      if (!IsOp(")")) ExpectOp(",");
    }
    ++pos_;
  }

  ExprPtr ParseFilters(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        ExprPtr f = Make(Expr::Kind::kFilter, line);
        f->name = ExpectName();
        f->children.push_back(std::move(node));
        if (IsOp("(")) ParseCallArgs(f.get());
        node = Finish(std::move(f));
      } else if (IsName("is")) {
        const int line = Next().line;
        ExprPtr t = Make(Expr::Kind::kTest, line);
        if (IsName("not")) {
          ++pos_;
          t->negated = true;
        }
        t->name = ExpectName();
        t->children.push_back(std::move(node));
        if (IsOp("(")) ParseCallArgs(t.get());
        node = Finish(std::move(t));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Peek().line;
      if (IsOp(".")) {
        ++pos_;
        ExprPtr e = Make(Expr::Kind::kGetAttr, line);
        if (Peek().type == Token::Type::kInt) {
          e->kind = Expr::Kind::kGetItem;
          ExprPtr index = Make(Expr::Kind::kLiteral, line);
          index->value = ParseInt(Next().text);
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(index));
        } else {
          e->name = ExpectName();
          e->children.push_back(std::move(node));
        }
        node = Finish(std::move(e));
      } else if (IsOp("[")) {
        ++pos_;
        ExprPtr parts[3];
        int colons = 0;
        while (!IsOp("]")) {
          if (IsOp(":")) {
            if (++colons > 2) throw Error("bad slice");
            ++pos_;
            continue;
          }
          if (parts[colons]) throw Error("expected ']'");
          parts[colons] = ParseExpression(true);
        }
        ++pos_;
        ExprPtr e = Make(colons == 0 ? Expr::Kind::kGetItem : Expr::Kind::kSlice, line);
        e->children.push_back(std::move(node));
        if (colons == 0) {
          if (!parts[0]) throw Error("empty subscript");
          e->children.push_back(std::move(parts[0]));
        } else {
          for (auto& p : parts) e->children.push_back(std::move(p));
        }
        node = Finish(std::move(e));
      } else if (IsOp("(")) {
        ExprPtr call = Make(Expr::Kind::kCall, line);
        call->children.push_back(std::move(node));
        ParseCallArgs(call.get());
        node = Finish(std::move(call));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParsePrimary() {
    const Token t = Peek();
    ExprPtr e = Make(Expr::Kind::kLiteral, t.line);
    switch (t.type) {
      case Token::Type::kString: {
        std::string s;
        while (Peek().type == Token::Type::kString) s += Next().text;
        e->value = Value(std::move(s));
        return e;
      }
      case Token::Type::kInt:
        e->value = ParseInt(t.text);
        ++pos_;
        return e;
      case Token::Type::kFloat:
        ++pos_;
        e->value = Value(std::strtod(t.text.c_str(), nullptr));
        return e;
      case Token::Type::kName:
        ++pos_;
        if (t.text == "true" || t.text == "True") {
          e->value = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      case Token::Type::kOp:
        if (t.text == "(") {
          ++pos_;
          if (IsOp(")")) {
            ++pos_;
            e->kind = Expr::Kind::kTuple;
            return e;
          }
          ExprPtr inner = ParseExpression(true);
          if (IsOp(",")) {
            e->kind = Expr::Kind::kTuple;
            e->children.push_back(std::move(inner));
            while (IsOp(",")) {
              ++pos_;
              if (IsOp(")")) break;
              e->children.push_back(ParseExpression(true));
            }
            ExpectOp(")");
            return Finish(std::move(e));
          }
          ExpectOp(")");
          return inner;
        }
        if (t.text == "[") {
          ++pos_;
          e->kind = Expr::Kind::kList;
          while (!IsOp("]")) {
            e->children.push_back(ParseExpression(true));
            if (!IsOp("]")) ExpectOp(",");
          }
          ++pos_;
          return Finish(std::move(e));
        }
        if (t.text == "{") {
          ++pos_;
          e->kind = Expr::Kind::kDict;
          while (!IsOp("}")) {
            e->keys.push_back(ParseExpression(true));
            ExpectOp(":");
            e->children.push_back(ParseExpression(true));
            if (!IsOp("}")) ExpectOp(",");
          }
          ++pos_;
          return Finish(std::move(e));
        }
        break;
      default:
        break;
    }
    throw Error(absl::StrCat("unexpected '", t.text.empty() ? "end of tag" : t.text, "'"));
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int block_depth_ = 0;
  int expression_depth_ = 0;
};

}  // namespace

std::unique_ptr<Template> ParseTemplate(std::string_view source) {
  return Parser(Lexer(Preprocess(source)).Run()).Run();
}

}  // namespace kvserve::tokenizer::jinja
