// Jinja's syntax, as chat templates use it: text, {{ expressions }}, {% statements %} (if /
// elif / else, for (one or two targets, "if" filter, else), set (name or namespace attribute),
// break, continue; HF's generation tag is transparent) and {# comments #}, with "-" whitespace
// control, trim_blocks and lstrip_blocks; expressions with Jinja's operator precedence.
#include <cctype>
#include <optional>

#include "core/error.h"
#include "text/unicode.h"
#include "text/jinja.h"

namespace mg::jinja {

namespace {

[[noreturn]] void fail(int line, const std::string& what) {
  throw TemplateError(str_cat("line ", line, ": ", what));
}

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

int line_at(const std::string& s, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < s.size(); ++i) line += s[i] == '\n';
  return line;
}

// The template cut into text, {{ }} and {% %} segments, whitespace control applied.
struct Segment {
  enum Kind { Text, Out, Stmt } kind;
  std::string body;
  int line;
};

std::vector<Segment> segments(const std::string& src) {
  std::vector<Segment> out;
  size_t pos = 0;
  bool strip_next = false, trim_newline = false;
  auto add_text = [&](std::string text) {
    if (strip_next) {
      size_t i = 0;
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      text.erase(0, i);
    } else if (trim_newline) {  // trim_blocks: the newline right after a block tag
      if (text.starts_with("\r\n")) text.erase(0, 2);
      else if (text.starts_with("\n")) text.erase(0, 1);
    }
    out.push_back({Segment::Text, std::move(text), 0});
  };
  while (pos < src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open == std::string::npos || open + 1 >= src.size()) {
      add_text(src.substr(pos));
      break;
    }
    add_text(src.substr(pos, open - pos));
    const char type = src[open + 1];
    const int line = line_at(src, open);
    size_t inner = open + 2;
    const bool strip_left = inner < src.size() && src[inner] == '-';
    const bool keep_left = inner < src.size() && src[inner] == '+';
    if (strip_left || keep_left) ++inner;
    const std::string close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    size_t end = inner;
    if (type == '#') {
      end = src.find(close, inner);
    } else {  // the closing marker outside string literals
      char quote = 0;
      for (; end + 1 < src.size(); ++end) {
        const char c = src[end];
        if (quote) {
          if (c == '\\') ++end;
          else if (c == quote) quote = 0;
        } else if (c == '\'' || c == '"') {
          quote = c;
        } else if (src.compare(end, 2, close) == 0) {
          break;
        }
      }
      if (end + 1 >= src.size()) end = std::string::npos;
    }
    if (end == std::string::npos) fail(line, str_cat("unclosed '{", type, "' (no '", close, "')"));
    const bool strip_right = end > inner && src[end - 1] == '-';
    std::string body = src.substr(inner, end - inner - (strip_right ? 1 : 0));
    Segment& prev = out.back();  // the text before (maybe empty)
    const bool block = type != '{';
    if (strip_left) {
      while (!prev.body.empty() && std::isspace(static_cast<unsigned char>(prev.body.back())))
        prev.body.pop_back();
    } else if (block && !keep_left) {  // lstrip_blocks: spaces from the line's start to the tag
      size_t k = open;
      while (k > 0 && (src[k - 1] == ' ' || src[k - 1] == '\t')) --k;
      if (k == 0 || src[k - 1] == '\n')
        for (size_t n = open - k;
             n > 0 && !prev.body.empty() && (prev.body.back() == ' ' || prev.body.back() == '\t');
             --n)
          prev.body.pop_back();
    }
    strip_next = strip_right;
    trim_newline = block;
    pos = end + 2;
    if (type == '%' && strip(body) == "raw") {  // verbatim up to {% endraw %}
      size_t at = pos, after = std::string::npos;
      bool end_strip_left = false, end_strip_right = false;
      for (; (at = src.find("{%", at)) != std::string::npos; at += 2) {
        size_t k = at + 2;
        end_strip_left = k < src.size() && src[k] == '-';
        if (k < src.size() && (src[k] == '-' || src[k] == '+')) ++k;
        while (k < src.size() && std::isspace(static_cast<unsigned char>(src[k]))) ++k;
        if (src.compare(k, 6, "endraw") != 0) continue;
        k += 6;
        while (k < src.size() && std::isspace(static_cast<unsigned char>(src[k]))) ++k;
        end_strip_right = k < src.size() && src[k] == '-';
        if (end_strip_right) ++k;
        if (src.compare(k, 2, "%}") == 0) {
          after = k + 2;
          break;
        }
      }
      if (after == std::string::npos) fail(line, "missing {% endraw %}");
      add_text(src.substr(pos, at - pos));
      std::string& raw = out.back().body;
      if (end_strip_left)
        while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back()))) raw.pop_back();
      strip_next = end_strip_right;
      trim_newline = true;
      pos = after;
      continue;
    }
    if (type != '#') out.push_back({type == '{' ? Segment::Out : Segment::Stmt, body, line});
  }
  return out;
}

// The escape at s[j] (a backslash) into out, as Python's unicode-escape decoding reads it (Jinja
// decodes string literals so): \n \t \\ \' \xNN \uXXXX \UXXXXXXXX octal ...; an unknown one
// stays as written. Returns the index of the escape's last character.
size_t escape(const std::string& s, size_t j, std::string& out, int line) {
  const char e = s[j + 1];
  static const std::string simple = "ntr\\'\"abfv", value = "\n\t\r\\'\"\a\b\f\v";
  if (const size_t k = simple.find(e); k != std::string::npos) {
    out += value[k];
    return j + 1;
  }
  if (e == '\n') return j + 1;  // a continued line
  const int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
  if (hex > 0) {
    uint32_t c = 0;
    for (int i = 0; i < hex; ++i) {
      const size_t at = j + 2 + size_t(i);
      if (at >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[at])))
        fail(line, str_cat("truncated \\", e, " escape in a string literal"));
      c = c * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(s[at]))
                                ? s[at] - '0'
                                : std::tolower(s[at]) - 'a' + 10);
    }
    if (c > 0x10FFFF) fail(line, "a \\U escape beyond U+10FFFF");
    unicode::append_utf8(out, char32_t(c));
    return j + 1 + size_t(hex);
  }
  if (e >= '0' && e <= '7') {  // up to three octal digits
    uint32_t c = 0;
    size_t at = j + 1;
    for (int i = 0; i < 3 && at < s.size() && s[at] >= '0' && s[at] <= '7'; ++i, ++at)
      c = c * 8 + uint32_t(s[at] - '0');
    unicode::append_utf8(out, char32_t(c));
    return at - 1;
  }
  out += '\\';
  out += e;
  return j + 1;
}

// Expression tokens.
struct Token {
  enum Kind { Name, String, Int, Float, Op, End } kind;
  std::string text;
};

std::vector<Token> tokenize(const std::string& s, int line) {
  static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".",
                              ",",  ":",  "|",  "~",  "+",  "-",  "*", "/", "%", "<", ">", "="};
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (std::isspace(c)) {
      ++i;
    } else if (std::isalpha(c) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(c)) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && !is_float && j + 1 < s.size() &&
                               std::isdigit(static_cast<unsigned char>(s[j + 1])))))
        is_float |= s[j++] == '.';
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
          j = k;
          is_float = true;
        }
      }
      std::string digits;
      for (size_t k = i; k < j; ++k)
        if (s[k] != '_') digits += s[k];
      out.push_back({is_float ? Token::Float : Token::Int, digits});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != char(c); ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          text += s[j];
          continue;
        }
        j = escape(s, j, text, line);
      }
      if (j >= s.size()) fail(line, "unterminated string literal");
      out.push_back({Token::String, text});
      i = j + 1;
    } else {
      bool found = false;
      for (const char* op : ops)
        if (s.compare(i, std::char_traits<char>::length(op), op) == 0) {
          out.push_back({Token::Op, op});
          i += std::char_traits<char>::length(op);
          found = true;
          break;
        }
      if (!found) fail(line, str_cat("unexpected character '", s[i], "'"));
    }
  }
  out.push_back({Token::End, ""});
  return out;
}

// Recursive descent over one segment's tokens, Jinja's precedence from loosest to tightest:
// conditional, or, and, not, comparisons and in, + -, ~, * / // %, **, unary -, then the
// primary with its postfixes (.attr, [item], (call)), filters (|) and tests (is).
class ExprParser {
 public:
  ExprParser(const std::string& text, int line) : toks_(tokenize(text, line)), line_(line) {}

  ExprPtr expression() { return conditional(); }
  ExprPtr or_expr() { return binary_chain(&ExprParser::and_expr, {"or"}); }
  bool at_end() const { return toks_[i_].kind == Token::End; }
  bool accept_name(const char* name) { return accept(Token::Name, name); }
  bool accept_op(const char* op) { return accept(Token::Op, op); }
  std::string name() {
    if (toks_[i_].kind != Token::Name)
      fail(line_, str_cat("expected a name, got '", toks_[i_].text, "'"));
    return toks_[i_++].text;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(line_, str_cat("expected '", op, "', got '", toks_[i_].text, "'"));
  }
  void expect_end() {
    if (!at_end()) fail(line_, str_cat("unexpected '", toks_[i_].text, "'"));
  }

 private:
  bool accept(Token::Kind k, const char* text) {
    if (toks_[i_].kind != k || toks_[i_].text != text) return false;
    ++i_;
    return true;
  }
  bool peek_op(const char* op) const { return toks_[i_].kind == Token::Op && toks_[i_].text == op; }
  bool test_argument_follows() const {
    const Token& t = toks_[i_];
    if (t.kind == Token::String || t.kind == Token::Int || t.kind == Token::Float) return true;
    if (t.kind == Token::Op) return t.text == "[" || t.text == "{";
    return t.kind == Token::Name && t.text != "else" && t.text != "or" && t.text != "and" &&
           t.text != "if" && t.text != "is" && t.text != "in" && t.text != "not";
  }
  ExprPtr make(Expr::Kind k, std::string name = {}) {
    // Rendering recurses through the tree: bound its size (a chain a + a + ... is as deep).
    if (++nodes_ > 2000) fail(line_, "expression too long (more than 2000 terms)");
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->name = std::move(name);
    e->line = line_;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    ExprPtr e = make(Expr::Binary, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  struct Depth {  // nesting bound: a hostile template cannot overflow the stack
    explicit Depth(ExprParser& p) : p(p) {
      if (++p.depth_ > 200) fail(p.line_, "expression nested too deeply");
    }
    ~Depth() { --p.depth_; }
    ExprParser& p;
  };

  ExprPtr conditional() {
    Depth d(*this);
    ExprPtr e = or_expr();
    while (accept_name("if")) {
      ExprPtr c = make(Expr::Cond);
      c->args.push_back(or_expr());
      c->args.push_back(std::move(e));
      c->args.push_back(accept_name("else") ? conditional() : nullptr);
      e = std::move(c);
    }
    return e;
  }
  ExprPtr binary_chain(ExprPtr (ExprParser::*next)(), std::initializer_list<const char*> ops) {
    ExprPtr e = (this->*next)();
    for (bool more = true; more;) {
      more = false;
      for (const char* op : ops)
        if ((std::isalpha(static_cast<unsigned char>(op[0])) ? accept_name(op) : accept_op(op))) {
          e = binary(op, std::move(e), (this->*next)());
          more = true;
          break;
        }
    }
    return e;
  }
  ExprPtr and_expr() { return binary_chain(&ExprParser::not_expr, {"and"}); }
  ExprPtr not_expr() {
    Depth d(*this);
    if (accept_name("not")) {
      ExprPtr e = make(Expr::Unary, "not");
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    while (true) {
      const Token& t = toks_[i_];
      if (t.kind == Token::Op && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                  t.text == ">" || t.text == "<=" || t.text == ">=")) {
        ++i_;
        e = binary(t.text, std::move(e), math1());
      } else if (accept_name("in")) {
        e = binary("in", std::move(e), math1());
      } else if (t.kind == Token::Name && t.text == "not" && toks_[i_ + 1].kind == Token::Name &&
                 toks_[i_ + 1].text == "in") {
        i_ += 2;
        e = binary("not in", std::move(e), math1());
      } else {
        return e;
      }
    }
  }
  ExprPtr math1() { return binary_chain(&ExprParser::concat, {"+", "-"}); }
  ExprPtr concat() { return binary_chain(&ExprParser::math2, {"~"}); }
  ExprPtr math2() { return binary_chain(&ExprParser::power, {"//", "*", "/", "%"}); }
  ExprPtr power() { return binary_chain(&ExprParser::signed_operand, {"**"}); }
  ExprPtr signed_operand() { return unary(true); }
  // Jinja's: a sign applies to the operand before its filters (-x|abs is (-x)|abs).
  ExprPtr unary(bool with_filters) {
    Depth d(*this);
    ExprPtr e;
    if (peek_op("-") || peek_op("+")) {
      e = make(Expr::Unary, toks_[i_++].text);
      e->args.push_back(unary(false));
    } else {
      e = postfix(primary());
    }
    return with_filters ? filters(std::move(e)) : std::move(e);
  }
  ExprPtr primary() {
    Depth d(*this);
    const Token t = toks_[i_];
    if (t.kind == Token::End) fail(line_, "expected an expression");
    ++i_;
    if (t.kind == Token::String) {
      ExprPtr e = make(Expr::Literal);
      std::string s = t.text;
      while (toks_[i_].kind == Token::String) s += toks_[i_++].text;  // "a" "b" is "ab"
      e->value = s;
      return e;
    }
    if (t.kind == Token::Int || t.kind == Token::Float) {
      ExprPtr e = make(Expr::Literal);
      try {
        if (t.kind == Token::Int) e->value = std::stoll(t.text);
        else e->value = std::stod(t.text);
      } catch (const std::exception&) {
        fail(line_, str_cat("number ", t.text, " out of range"));
      }
      return e;
    }
    if (t.kind == Token::Name) {
      ExprPtr e = make(Expr::Literal);
      if (t.text == "true" || t.text == "True") e->value = true;
      else if (t.text == "false" || t.text == "False") e->value = false;
      else if (t.text == "none" || t.text == "None") e->value = nullptr;
      else e = make(Expr::Name, t.text);
      return e;
    }
    if (t.text == "(") {
      ExprPtr e = expression();
      expect_op(")");
      return e;
    }
    if (t.text == "[" || t.text == "{") {
      const bool list = t.text == "[";
      ExprPtr e = make(list ? Expr::List : Expr::Dict);
      while (!accept_op(list ? "]" : "}")) {
        if (!e->args.empty()) expect_op(",");
        if (accept_op(list ? "]" : "}")) break;  // a trailing comma
        e->args.push_back(expression());
        if (!list) {
          expect_op(":");
          e->args.push_back(expression());
        }
      }
      return e;
    }
    fail(line_, str_cat("unexpected '", t.text, "'"));
  }
  // (args) of a call, filter or test, after its callee or object: positional, then name=value.
  void arguments(Expr& e) {
    for (bool first = true; !accept_op(")"); first = false) {
      if (!first) {
        expect_op(",");
        if (accept_op(")")) break;  // a trailing comma
      }
      if (toks_[i_].kind == Token::Name && toks_[i_ + 1].kind == Token::Op &&
          toks_[i_ + 1].text == "=") {
        std::string key = toks_[i_].text;
        i_ += 2;
        e.kwargs.emplace_back(std::move(key), expression());
      } else {
        if (!e.kwargs.empty()) fail(line_, "a positional argument after a keyword argument");
        e.args.push_back(expression());
      }
    }
  }
  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        ExprPtr a = make(Expr::Attr, toks_[i_].kind == Token::Int ? toks_[i_++].text : name());
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (accept_op("[")) {
        ExprPtr s = make(Expr::Item);
        s->args.push_back(std::move(e));
        ExprPtr first = peek_op(":") ? nullptr : expression();
        if (accept_op(":")) {
          s->kind = Expr::Slice;
          s->args.push_back(std::move(first));
          s->args.push_back(peek_op(":") || peek_op("]") ? nullptr : expression());
          s->args.push_back(accept_op(":") && !peek_op("]") ? expression() : nullptr);
        } else {
          s->args.push_back(std::move(first));
        }
        expect_op("]");
        e = std::move(s);
      } else if (accept_op("(")) {
        ExprPtr c = make(Expr::Call);
        c->args.push_back(std::move(e));
        arguments(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        ExprPtr f = make(Expr::Filter, name());
        f->args.push_back(std::move(e));
        if (accept_op("(")) arguments(*f);
        e = postfix(std::move(f));
      } else if (accept_name("is")) {
        ExprPtr t = make(Expr::Test);
        t->negated = accept_name("not");
        t->name = name();
        t->args.push_back(std::move(e));
        if (accept_op("(")) {
          arguments(*t);
        } else if (test_argument_follows()) {  // "is divisibleby 3", "is sameas none"
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int line_;
  int depth_ = 0, nodes_ = 0;
};

// Statements into nested nodes: parse_block reads until one of `ends` (returned) or the end.
class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  std::string block(std::vector<Node>& out, std::initializer_list<const char*> ends) {
    if (++depth_ > 100) fail(line(), "blocks nested too deeply");
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_++];
      if (s.kind == Segment::Text) {
        if (!s.body.empty()) out.push_back(text_node(s.body));
        continue;
      }
      ExprParser p(s.body, s.line);
      if (s.kind == Segment::Out) {
        Node n;
        n.kind = Node::Output;
        n.line = s.line;
        n.expr = p.expression();
        p.expect_end();
        out.push_back(std::move(n));
        continue;
      }
      const std::string tag = p.name();
      for (const char* e : ends)
        if (tag == e) {
          last_ = std::move(p);
          --depth_;
          return tag;
        }
      if (tag == "if") out.push_back(if_node(p, s.line));
      else if (tag == "for") out.push_back(for_node(p, s.line));
      else if (tag == "set") out.push_back(set_node(p, s.line));
      else if (tag == "break" || tag == "continue") {
        p.expect_end();
        Node n;
        n.kind = tag == "break" ? Node::Break : Node::Continue;
        n.line = s.line;
        out.push_back(std::move(n));
      } else if (tag == "generation" || tag == "endgeneration") {
        p.expect_end();  // HF's assistant-mask tag: its content renders as is
      } else {
        fail(s.line, str_cat("unsupported or misplaced tag '", tag, "'"));
      }
    }
    if (ends.size() > 0) fail(line(), str_cat("missing {% ", *ends.begin(), " %}"));
    --depth_;
    return "";
  }

 private:
  int line() const { return i_ > 0 ? segs_[i_ - 1].line : 1; }
  static Node text_node(const std::string& text) {
    Node n;
    n.text = text;
    return n;
  }
  Node if_node(ExprParser& p, int line) {
    Node n;
    n.kind = Node::If;
    n.line = line;
    ExprPtr cond = p.expression();
    p.expect_end();
    while (true) {
      std::vector<Node> body;
      const std::string end = block(body, {"elif", "else", "endif"});
      n.branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = last_->expression();
        last_->expect_end();
        continue;
      }
      last_->expect_end();
      if (end == "else") {
        if (block(n.else_body, {"endif"}) != "endif") fail(line, "missing {% endif %}");
        last_->expect_end();
      }
      return n;
    }
  }
  Node for_node(ExprParser& p, int line) {
    Node n;
    n.kind = Node::For;
    n.line = line;
    n.targets.push_back(p.name());
    while (p.accept_op(",")) n.targets.push_back(p.name());
    if (n.targets.size() > 2) fail(line, "at most two loop variables");
    if (!p.accept_name("in")) fail(line, "expected 'in' in a for tag");
    n.expr = p.or_expr();
    if (p.accept_name("if")) n.filter = p.or_expr();
    if (p.accept_name("recursive")) fail(line, "recursive loops are not supported");
    p.expect_end();
    const std::string end = block(n.body, {"else", "endfor"});
    last_->expect_end();
    if (end == "else") {
      block(n.else_body, {"endfor"});
      last_->expect_end();
    }
    return n;
  }
  Node set_node(ExprParser& p, int line) {
    Node n;
    n.kind = Node::Set;
    n.line = line;
    n.targets.push_back(p.name());
    if (p.accept_op(".")) n.targets.push_back(p.name());
    if (!p.accept_op("="))
      fail(line,
           "only '{% set name = value %}' and '{% set ns.attr = value %}'"
           " are supported");
    n.expr = p.expression();
    p.expect_end();
    return n;
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  int depth_ = 0;
  std::optional<ExprParser> last_;  // the end tag's parser (its expression, for elif)
};

}  // namespace

std::vector<Node> parse(const std::string& source) {
  // Jinja's defaults: newlines normalised to \n, one trailing newline dropped.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '\r') src += source[i];
    else if (i + 1 >= source.size() || source[i + 1] != '\n') src += '\n';
  }
  if (src.ends_with('\n')) src.pop_back();
  Parser p(segments(src));
  std::vector<Node> nodes;
  p.block(nodes, {});
  return nodes;
}

}  // namespace mg::jinja
