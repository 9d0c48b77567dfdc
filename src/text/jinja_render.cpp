// Rendering a parsed chat template with Python's semantics where templates see them: str() of
// values (True, None, ['a', 1]), truthiness, + on strings and lists, Python's // and %, slices,
// the string and dict methods templates call, Jinja's filters and tests, and loop variables.
// Loop bodies get a scope per iteration (a set inside does not leak out; namespace() objects
// carry state across, as in Jinja).
//
// Whatever the template, a render ends soon, in bounded memory and stack: every value an
// expression yields is paid for by its size from a work budget (so a value can grow to
// at most the budget, a loop that copies or scans values stops once it has done that much), and
// no value nests deeper than kMaxNesting. Names and parts of them (messages[i].role) are read
// in place, not copied, so a loop over a long conversation stays linear in its length.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "text/unicode.h"
#include "text/jinja.h"

namespace mg::jinja {

namespace {

const Value kUndefined = Value(Value::value_t::discarded);

bool undefined(const Value& v) { return v.is_discarded(); }

// Work units: a list or dict entry, 16 bytes of a string read, copied or searched, a dict
// lookup per 32 keys (times the key's 16-byte blocks), a variable lookup per 4 scopes, an
// evaluation step, a string split out of a string (kPieceWork), a loop iteration (8). A
// render may spend kBaseWork, plus a unit per 16 bytes it may output, plus 8 per unit of its
// variables' size.
constexpr int64_t kBaseWork = int64_t(1) << 20;
constexpr int64_t kWorkPerOutputByte = 16;   // bytes of allowed text per unit of budget
constexpr int64_t kWorkPerVariableUnit = 8;  // budget per unit of the variables' size
constexpr int64_t kPieceWork = 4;            // a string split out of a string (its own allocation)
constexpr int kMaxNesting = 128;             // lists and dicts inside each other
constexpr int kMaxEvalDepth = 400;           // hold() and eval() calls inside each other

[[noreturn]] void fail(int line, const std::string& what) {
  throw TemplateError(str_cat("line ", line, ": ", what));
}

std::string type_name(const Value& v) {
  if (undefined(v)) return "undefined";
  if (v.is_null()) return "none";
  if (v.is_boolean()) return "bool";
  if (v.is_number_integer()) return "int";
  if (v.is_number()) return "float";
  if (v.is_string()) return "str";
  if (v.is_array()) return "list";
  return "dict";
}

bool truthy(const Value& v) {
  if (undefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();  // a list or dict
}

// A string's characters as Python sees them: code points (each its UTF-8 bytes; a byte that
// starts no valid sequence counts alone). char_bytes: the length of the one at byte i.
size_t char_bytes(const std::string& s, size_t i) {
  char32_t cp = 0;
  const size_t n = unicode::decode_one(s, i, cp);
  return n > 0 ? n : 1;
}
size_t char_count(const std::string& s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); i += char_bytes(s, i)) ++count;
  return count;
}
std::vector<std::string> chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0, n = 0; i < s.size(); i += n) out.push_back(s.substr(i, n = char_bytes(s, i)));
  return out;
}

// Python's repr of a float (shortest round trip, ".0" on integral values, "inf", "nan").
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = Value(d).dump();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  const size_t e = s.find_first_of("eE");
  if (e != std::string::npos) {  // Python: 1e+20, 1e-07
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    if (mant.ends_with(".0")) mant.resize(mant.size() - 2);
    const bool neg = exp.starts_with("-");
    if (exp.starts_with("+") || neg) exp.erase(0, 1);
    if (exp.size() < 2) exp = "0" + exp;
    s = mant + "e" + (neg ? "-" : "+") + exp;
  }
  return s;
}

std::string quote_repr(const std::string& s) {  // Python's repr of a str
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (const char c : s) {
    if (c == q || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out + q;
}

std::string repr(const Value& v);
std::string str(const Value& v) {
  if (undefined(v)) return "";
  if (v.is_string()) return v.get<std::string>();
  return repr(v);
}
std::string repr(const Value& v) {
  if (undefined(v)) return "Undefined";
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return float_repr(v.get<double>());
  if (v.is_string()) return quote_repr(v.get<std::string>());
  std::string out = v.is_array() ? "[" : "{";
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it, first = false) {
    if (!first) out += ", ";
    if (v.is_object()) out += quote_repr(it.key()) + ": ";
    out += repr(*it);
  }
  return out + (v.is_array() ? "]" : "}");
}

// Python's json.dumps with its default separators (", ", ": "), keys in insertion order and
// non-ASCII kept: Hugging Face's tojson filter. indent >= 0: one item per line. Appends to out;
// past `limit` bytes, a TemplateError.
void dumps(const Value& v, int64_t indent, int64_t depth, std::string& out, size_t limit,
           int line) {
  // Strings (keys too) that are not valid UTF-8 get U+FFFD where a byte is bad.
  auto scalar = [](const Value& x) {
    return x.dump(-1, ' ', false, Value::error_handler_t::replace);
  };
  if (v.is_number_float()) {
    const double d = v.get<double>();
    out += std::isnan(d)   ? "NaN"
           : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                           : float_repr(d);
  } else if (undefined(v)) {
    out += "null";
  } else if (!v.is_array() && !v.is_object()) {
    out += scalar(v);
  } else if (v.empty()) {
    out += v.is_array() ? "[]" : "{}";
  } else {
    const std::string pad =
        indent >= 0 ? "\n" + std::string(size_t(indent * (depth + 1)), ' ') : "";
    out += v.is_array() ? "[" : "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false) {
      out += first ? pad : (indent >= 0 ? "," + pad : ", ");
      if (v.is_object()) out += scalar(Value(it.key())) + ": ";
      dumps(*it, indent, depth + 1, out, limit, line);
    }
    if (indent >= 0) out += "\n" + std::string(size_t(indent * depth), ' ');
    out += v.is_array() ? "]" : "}";
  }
  if (out.size() > limit) fail(line, str_cat("tojson's text is longer than ", limit, " bytes"));
}

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  bool set[256] = {};
  for (const char c : chars) set[static_cast<unsigned char>(c)] = true;
  auto in = [&](char c) {
    const unsigned char u = static_cast<unsigned char>(c);
    return chars.empty() ? std::isspace(u) != 0 : set[u];
  };
  while (left && b < e && in(s[b])) ++b;
  while (right && e > b && in(s[e - 1])) --e;
  return s.substr(b, e - b);
}

class Renderer {
 public:
  Renderer(const Value& vars, size_t max_output)
      : max_output_(max_output),
        work_budget_(kBaseWork + int64_t(max_output) / kWorkPerOutputByte) {
    if (!vars.is_object()) throw TemplateError("the template's variables must be a JSON object");
    // A template may read each variable a few times over: the budget grows with their size.
    const int64_t size = weight(vars, 0, 1);  // also refuses variables nested too deeply
    work_budget_ += kWorkPerVariableUnit * size;
    charge(size, 1);
    scopes_.emplace_back();
    for (auto it = vars.begin(); it != vars.end(); ++it) scopes_.back()[it.key()] = *it;
  }
  std::string run(const std::vector<Node>& nodes) {
    block(nodes);
    return std::move(out_);
  }

 private:
  enum class Flow { Normal, Break, Continue };

  void emit(const std::string& s, int line) {
    if (out_.size() + s.size() > max_output_)
      fail(line, str_cat("the rendered text exceeds ", max_output_, " bytes"));
    out_ += s;
  }
  void charge(int64_t units, int line) {
    if ((work_ += units) > work_budget_)
      fail(line, "the template does too much work (values or loops too large)");
  }
  void pay_for(const Value& v, int line) { charge(weight(v, 0, line), line); }
  // A value's size in work units; fails past kMaxNesting (printing, comparing and tojson recurse).
  static int64_t weight(const Value& v, int depth, int line) {
    if (depth > kMaxNesting) fail(line, str_cat("a value nested more than ", kMaxNesting, " deep"));
    if (v.is_string()) return 1 + int64_t(v.get_ref<const std::string&>().size() / 16);
    int64_t w = 1;
    if (v.is_object())
      for (auto it = v.begin(); it != v.end(); ++it)
        w += 1 + int64_t(it.key().size() / 16) + weight(*it, depth + 1, line);
    else if (v.is_array())
      for (const Value& x : v) w += weight(x, depth + 1, line);
    return w;
  }
  // needle in hay from byte `from` on (npos: absent), in time linear in both: glibc's memmem
  // (Two-Way past a short search), unlike std::string::find's quadratic worst case.
  // Paid for by the bytes it passed.
  size_t search(const std::string& hay, const std::string& needle, size_t from, int line) {
    from = std::min(from, hay.size());
    const void* p = memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
    const size_t at = p ? size_t(static_cast<const char*>(p) - hay.data()) : std::string::npos;
    charge(1 + int64_t(((p ? at : hay.size()) - from + needle.size()) / 16), line);
    return at;
  }

  // A variable, innermost scope first; paid for by the scopes walked and the name's length.
  Value* find(const std::string& name, int line) {
    int64_t walked = 0;
    Value* found = nullptr;
    for (auto s = scopes_.rbegin(); s != scopes_.rend() && !found; ++s, ++walked)
      if (auto it = s->find(name); it != s->end()) found = &it->second;
    charge(walked / 4 + int64_t(name.size() / 16), line);
    return found;
  }
  // A dict lookup: ordered_json searches its keys in order, comparing the key with each.
  void charge_lookup(const Value& dict, size_t key_bytes, int line) {
    charge(int64_t(1 + dict.size() / 32) * int64_t(1 + key_bytes / 16), line);
  }

  Flow block(const std::vector<Node>& nodes) {
    for (const Node& n : nodes) {
      switch (n.kind) {
        case Node::Text: emit(n.text, n.line); break;
        case Node::Output: emit(str(*hold(*n.expr)), n.line); break;
        case Node::Break: return Flow::Break;
        case Node::Continue: return Flow::Continue;
        case Node::Set: set(n); break;
        case Node::If: {
          const std::vector<Node>* body = &n.else_body;
          for (const auto& [cond, b] : n.branches)
            if (truthy(*hold(*cond, false))) {
              body = &b;
              break;
            }
          if (const Flow f = block(*body); f != Flow::Normal) return f;
          break;
        }
        case Node::For: loop(n); break;
      }
    }
    return Flow::Normal;
  }

  void set(const Node& n) {
    Value v = eval(*n.expr);
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = std::move(v);
      return;
    }
    Value* ns = find(n.targets[0], n.line);
    if (!ns || !ns->is_object() || !ns->contains("__namespace__"))
      fail(n.line, str_cat("cannot assign attribute on '", n.targets[0], "': not a namespace()"));
    charge_lookup(*ns, n.targets[1].size(), n.line);
    (*ns)[n.targets[1]] = std::move(v);
  }

  void loop(const Node& n) {
    const Held held = hold(*n.expr);
    const Value& seq = *held;
    std::vector<Value> items;
    if (seq.is_array()) {
      items.assign(seq.begin(), seq.end());
    } else if (seq.is_object()) {
      for (auto it = seq.begin(); it != seq.end(); ++it) items.push_back(it.key());
    } else if (seq.is_string()) {
      for (const std::string& c : chars_of(seq, n.line)) items.push_back(c);
    } else if (!undefined(seq)) {
      fail(n.line, str_cat("cannot loop over a ", type_name(seq)));
    }
    auto bind = [&](std::map<std::string, Value>& scope, const Value& item) {
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = item;
        return;
      }
      if (!item.is_array() || item.size() != 2)
        fail(n.line, str_cat("cannot unpack ", repr(item), " into two loop variables"));
      scope[n.targets[0]] = item[0];
      scope[n.targets[1]] = item[1];
    };
    if (n.filter) {  // "for x in xs if cond": the loop runs over the kept items
      std::vector<Value> kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        bind(scopes_.back(), item);
        const bool keep = truthy(*hold(*n.filter, false));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      block(n.else_body);
      return;
    }
    const int64_t len = int64_t(items.size());
    // One scope for the loop, emptied of the body's names before each iteration; `loop` is
    // updated in place (this is most of an iteration's cost).
    scopes_.emplace_back();
    Value loop_vars = Value::object();
    for (int64_t i = 0; i < len; ++i) {
      charge(8, n.line);
      std::map<std::string, Value>& scope = scopes_.back();
      scope.clear();
      bind(scope, items[size_t(i)]);
      if (!loop_vars.is_object() || (i > 0 && loop_vars.size() != 9))
        loop_vars = Value::object();  // the body set `loop`
      loop_vars["index"] = i + 1, loop_vars["index0"] = i, loop_vars["revindex"] = len - i;
      loop_vars["revindex0"] = len - i - 1, loop_vars["first"] = i == 0,
      loop_vars["last"] = i == len - 1;
      loop_vars["length"] = len;
      loop_vars["previtem"] = i > 0 ? items[size_t(i - 1)] : kUndefined;
      loop_vars["nextitem"] = i + 1 < len ? items[size_t(i + 1)] : kUndefined;
      Value& lv = scope["loop"];
      lv.swap(loop_vars);
      const Flow f = block(n.body);
      lv.swap(loop_vars);
      if (f == Flow::Break) break;
    }
    scopes_.pop_back();
  }

  // A string result within the output bound (values built in loops cannot grow without end).
  std::string bounded(std::string s, int line) const {
    check_length(s, line);
    return s;
  }
  void check_length(const std::string& s, int line) const {
    if (s.size() > max_output_) fail(line, str_cat("a string longer than ", max_output_, " bytes"));
  }
  static double number(const Value& v) {
    return v.is_boolean() ? double(v.get<bool>()) : v.get<double>();
  }

  int64_t as_int(const Value& v, int line, const char* what) {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_boolean()) return v.get<bool>();
    fail(line, str_cat(what, " must be an integer, not ", type_name(v)));
  }

  // An expression's value, read in place where the expression names one (a variable or a part
  // of one), else computed; `whole`: the reader may look at all of it (print, compare, copy),
  // so it pays for its size; else only at its top (truthiness, type tests, a list's length).
  // `and`, `or`, `not` and `x if c else y` pass the reading on to the operand that decides.
  struct Held {
    const Value* ref = nullptr;
    Value own;
    const Value& operator*() const { return ref ? *ref : own; }
    const Value* operator->() const { return &**this; }
  };
  Held hold(const Expr& e, bool whole = true) {
    const Depth depth(*this, e.line);
    switch (e.kind) {
      case Expr::Name: {
        const Value* v = find(e.name, e.line);
        return in_place(v ? v : &kUndefined, whole, e.line);
      }
      case Expr::Attr:
      case Expr::Item: {
        const bool attr = e.kind == Expr::Attr;
        const Held obj = hold(*e.args[0], false);
        const Value key = attr ? Value(e.name) : eval(*e.args[1]);
        if (obj->is_object())
          charge_lookup(*obj, key.is_string() ? key.get_ref<const std::string&>().size() : 0,
                        e.line);
        if (obj->is_string()) pay_for(*obj, e.line);  // a walk
        if (obj.ref && !obj->is_string())
          return in_place(element(*obj.ref, key, e.line, attr), whole, e.line);
        Value v = item(*obj, key, e.line, attr);
        pay_for(v, e.line);
        return Held{nullptr, std::move(v)};
      }
      case Expr::Binary:
        if (e.name == "and" || e.name == "or") {
          Held a = hold(*e.args[0], false);
          if (truthy(*a) != (e.name == "or")) return hold(*e.args[1], whole);
          if (whole && a.ref) pay_for(*a.ref, e.line);
          return a;
        }
        break;
      case Expr::Cond:
        if (truthy(*hold(*e.args[0], false))) return hold(*e.args[1], whole);
        return e.args[2] ? hold(*e.args[2], whole) : Held{&kUndefined, {}};
      case Expr::Unary:
        if (e.name == "not") return Held{nullptr, !truthy(*hold(*e.args[0], false))};
        break;
      default: break;
    }
    return Held{nullptr, eval(e)};
  }
  Held in_place(const Value* v, bool whole, int line) {
    if (whole) pay_for(*v, line);
    else charge(1, line);
    return Held{v, {}};
  }
  static bool decided_by_hold(const Expr& e) {  // the kinds hold() evaluates itself
    return e.kind == Expr::Name || e.kind == Expr::Attr || e.kind == Expr::Item ||
           e.kind == Expr::Cond ||
           (e.kind == Expr::Binary && (e.name == "and" || e.name == "or")) ||
           (e.kind == Expr::Unary && e.name == "not");
  }
  // Expressions nest at most kMaxEvalDepth deep as they are evaluated (chains of . [] | and
  // operators are not bounded by the parser's nesting limit).
  struct Depth {
    Renderer& r;
    Depth(Renderer& renderer, int line) : r(renderer) {
      if (++r.depth_ > kMaxEvalDepth)
        fail(line, str_cat("an expression nested more than ", kMaxEvalDepth, " deep"));
      r.charge(1, line);  // every step pays (a chain of `not`s makes nothing else)
    }
    ~Depth() { --r.depth_; }
  };

  // Every value an expression makes is paid for by its size.
  Value eval(const Expr& e) {
    if (decided_by_hold(e)) {  // paid for there
      Held h = hold(e);
      return h.ref ? *h.ref : std::move(h.own);
    }
    const Depth depth(*this, e.line);
    Value v = compute(e);
    pay_for(v, e.line);
    return v;
  }
  Value compute(const Expr& e) {
    switch (e.kind) {
      case Expr::Literal: return e.value;
      case Expr::List: {
        Value v = Value::array();
        for (const ExprPtr& a : e.args) v.push_back(eval(*a));
        return v;
      }
      case Expr::Dict: {
        Value v = Value::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          if (!k.is_string()) fail(e.line, "dict keys must be strings");
          v[k.get<std::string>()] = eval(*e.args[i + 1]);
        }
        return v;
      }
      case Expr::Slice: return slice(e);
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: return test(e) != e.negated;
      case Expr::Unary: {
        const Value v = eval(*e.args[0]);
        if (v.is_number_integer()) {
          const int64_t x = v.get<int64_t>();
          if (e.name == "-" && x == INT64_MIN) fail(e.line, "integer overflow");
          return e.name == "-" ? -x : x;
        }
        if (v.is_number()) return e.name == "-" ? -v.get<double>() : v.get<double>();
        fail(e.line, str_cat("bad operand type for unary ", e.name, ": ", type_name(v)));
      }
      case Expr::Binary: return binary(e);
      case Expr::Name:
      case Expr::Attr:
      case Expr::Item:
      case Expr::Cond: break;  // eval() hands these to hold()
    }
    return kUndefined;
  }

  // obj[key], obj.key: where obj is not a string, the item itself (&kUndefined where absent).
  static const Value* element(const Value& obj, const Value& key, int line, bool attr) {
    if (undefined(obj))
      fail(line, str_cat("cannot read ", attr ? "attribute " : "item ", repr(key),
                         " of an undefined value"));
    if (obj.is_object() && key.is_string()) {
      auto it = obj.find(key.get<std::string>());
      return it != obj.end() ? &*it : &kUndefined;
    }
    if (obj.is_array())
      if (const std::optional<int64_t> i = position(key, attr, int64_t(obj.size())))
        return &obj[size_t(*i)];
    return &kUndefined;
  }
  // The index key names in a sequence of n (x.0 is x[0]; negative counts from the end).
  static std::optional<int64_t> position(const Value& key, bool attr, int64_t n) {
    int64_t i = 0;
    if (key.is_number_integer()) {
      i = key.get<int64_t>();
    } else if (attr && key.is_string()) {
      const std::string& k = key.get_ref<const std::string&>();
      if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos || k.size() > 9)
        return std::nullopt;
      i = std::stoll(k);
    } else {
      return std::nullopt;
    }
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return i;
  }
  Value item(const Value& obj, const Value& key, int line, bool attr) {
    if (!obj.is_string()) return *element(obj, key, line, attr);
    const std::string& s = obj.get_ref<const std::string&>();
    const std::optional<int64_t> i = position(key, attr, int64_t(char_count(s)));
    if (!i) return kUndefined;
    size_t at = 0;
    for (int64_t k = 0; k < *i; ++k) at += char_bytes(s, at);
    return s.substr(at, char_bytes(s, at));
  }
  // chars(), paid for first: each character becomes a string of its own (kPieceWork).
  std::vector<std::string> chars_of(const Value& v, int line) {
    const std::string& s = v.get_ref<const std::string&>();
    charge(kPieceWork * int64_t(char_count(s)), line);
    return chars(s);
  }

  Value slice(const Expr& e) {
    const Held held = hold(*e.args[0]);
    const Value& obj = *held;
    if (!obj.is_array() && !obj.is_string())
      fail(e.line, str_cat("cannot slice a ", type_name(obj)));
    // An ASCII string is sliced by bytes; any other is split into its characters first.
    const std::string* text_in = obj.is_string() ? &obj.get_ref<const std::string&>() : nullptr;
    const bool ascii = text_in && std::all_of(text_in->begin(), text_in->end(), [](char c) {
                         return static_cast<unsigned char>(c) < 0x80;
                       });
    const std::vector<std::string> cs =
        text_in && !ascii ? chars_of(obj, e.line) : std::vector<std::string>{};
    const int64_t n = !text_in ? int64_t(obj.size())
                      : ascii  ? int64_t(text_in->size())
                               : int64_t(cs.size());
    auto bound = [&](const ExprPtr& x, int64_t def) -> std::optional<int64_t> {
      if (!x) return std::nullopt;
      const Value v = eval(*x);
      if (v.is_null()) return std::nullopt;
      return as_int(v, e.line, "a slice index");
      (void)def;
    };
    const int64_t step = bound(e.args[3], 1).value_or(1);
    if (step == 0) fail(e.line, "slice step cannot be zero");
    auto clamp = [&](std::optional<int64_t> v, int64_t def) {  // Python's slice.indices
      if (!v) return def;
      int64_t x = *v;
      if (x < 0) x = std::max<int64_t>(x + n, step < 0 ? -1 : 0);
      else x = std::min(x, step < 0 ? n - 1 : n);
      return x;
    };
    const int64_t start = clamp(bound(e.args[1], 0), step < 0 ? n - 1 : 0);
    const int64_t stop = clamp(bound(e.args[2], 0), step < 0 ? -1 : n);
    Value out = obj.is_array() ? Value::array() : Value("");
    std::string text;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (obj.is_array()) out.push_back(obj[size_t(i)]);
      else if (ascii) text += (*text_in)[size_t(i)];
      else text += cs[size_t(i)];
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return obj.is_array() ? out : Value(text);
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    const Held ha = hold(*e.args[0]), hb = hold(*e.args[1]);
    const Value &a = *ha, &b = *hb;
    if (op == "~") return bounded(str(a) + str(b), e.line);
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in" || op == "not in") return contains(b, a, e.line) == (op == "in");
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c = 0;
      if (a.is_string() && b.is_string()) c = a.get<std::string>().compare(b.get<std::string>());
      else if (a.is_number() && b.is_number()) c = a < b ? -1 : b < a ? 1 : 0;
      else
        fail(e.line,
             str_cat("'", op, "' not supported between ", type_name(a), " and ", type_name(b)));
      return op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (op == "+" && a.is_string() && b.is_string())
      return bounded(a.get<std::string>() + b.get<std::string>(), e.line);
    if (op == "+" && a.is_array() && b.is_array()) {
      if (a.size() + b.size() > 1000000) fail(e.line, "a list longer than 10^6 items");
      Value out = a;
      for (const Value& x : b) out.push_back(x);
      return out;
    }
    if (op == "*" &&
        ((a.is_string() && b.is_number_integer()) || (b.is_string() && a.is_number_integer()))) {
      const std::string s = a.is_string() ? a.get<std::string>() : b.get<std::string>();
      const int64_t k = a.is_string() ? b.get<int64_t>() : a.get<int64_t>();
      if (s.empty() || k <= 0) return "";
      if (uint64_t(k) > max_output_ / s.size()) fail(e.line, "string repetition too long");
      std::string out;
      for (int64_t i = 0; i < k; ++i) out += s;
      return out;
    }
    const bool ints =
        (a.is_number_integer() || a.is_boolean()) && (b.is_number_integer() || b.is_boolean());
    if (!(a.is_number() || a.is_boolean()) || !(b.is_number() || b.is_boolean()))
      fail(e.line, str_cat("unsupported operand types for ", op, ": ", type_name(a), " and ",
                           type_name(b)));
    if (ints && op != "/") {
      const int64_t x = as_int(a, e.line, "operand"), y = as_int(b, e.line, "operand");
      int64_t r = 0;
      bool overflow = false;
      if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
      else if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
      else if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
      else if (op == "//" || op == "%") {
        if (y == 0) fail(e.line, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail(e.line, "integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // Python floors
        r = op == "//" ? q : m;
      } else if (op == "**") {
        if (y < 0) return std::pow(double(x), double(y));
        if (x == 0 || x == 1) r = y == 0 ? 1 : x;
        else if (x == -1) r = y % 2 == 0 ? 1 : -1;
        else {  // |x| >= 2 overflows within 63 steps
          r = 1;
          for (int64_t i = 0; i < y && !overflow; ++i) overflow = __builtin_mul_overflow(r, x, &r);
        }
      }
      if (overflow) fail(e.line, "integer overflow");
      return r;
    }
    const double x = number(a), y = number(b);
    if ((op == "/" || op == "//" || op == "%") && y == 0) fail(e.line, "division by zero");
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (op == "/") return x / y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - std::floor(x / y) * y;
    return std::pow(x, y);
  }

  static bool equal(const Value& a, const Value& b) {
    if (undefined(a) || undefined(b)) return undefined(a) && undefined(b);
    return a == b;
  }
  bool contains(const Value& hay, const Value& needle, int line) {
    if (hay.is_string()) {
      if (!needle.is_string()) fail(line, "'in <string>' requires a string on the left");
      return search(hay.get_ref<const std::string&>(), needle.get_ref<const std::string&>(), 0,
                    line) != std::string::npos;
    }
    if (hay.is_array())
      return std::any_of(hay.begin(), hay.end(), [&](const Value& x) { return equal(x, needle); });
    if (hay.is_object()) return needle.is_string() && hay.contains(needle.get<std::string>());
    if (undefined(hay)) return false;
    fail(line, str_cat("argument of type ", type_name(hay), " is not iterable"));
  }

  std::vector<Value> args(const Expr& e, size_t from) {
    std::vector<Value> v;
    for (size_t i = from; i < e.args.size(); ++i) v.push_back(eval(*e.args[i]));
    return v;
  }
  Value kwarg(const Expr& e, const char* name, const std::vector<Value>& pos, size_t at,
              Value def) {
    for (const auto& [k, x] : e.kwargs)
      if (k == name) return eval(*x);
    return at < pos.size() ? pos[at] : def;
  }
  static std::string text_of(const Value& v, int line, const char* what) {
    if (!v.is_string()) fail(line, str_cat(what, " must be a string, not ", type_name(v)));
    return v.get<std::string>();
  }

  Value call(const Expr& e) {
    const Expr& f = *e.args[0];
    const std::vector<Value> a = args(e, 1);
    if (f.kind == Expr::Name) {
      if (f.name == "raise_exception")
        throw TemplateError(a.empty() ? "raise_exception()" : str(a[0]));
      if (f.name == "namespace") {
        Value ns = Value::object();
        ns["__namespace__"] = true;
        for (const auto& [k, x] : e.kwargs) ns[k] = eval(*x);
        return ns;
      }
      if (f.name == "range") {
        int64_t start = 0, stop = 0, step = 1;
        if (a.size() == 1) stop = as_int(a[0], e.line, "range()");
        else if (a.size() >= 2)
          start = as_int(a[0], e.line, "range()"), stop = as_int(a[1], e.line, "range()");
        if (a.size() == 3) step = as_int(a[2], e.line, "range()");
        if (step == 0 || a.empty() || a.size() > 3)
          fail(e.line, "range() takes 1 to 3 arguments, step not 0");
        Value out = Value::array();
        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
          if (out.size() > 1000000) fail(e.line, "range() longer than 10^6");
          out.push_back(i);
          if (__builtin_add_overflow(i, step, &i)) break;
        }
        return out;
      }
      fail(e.line, str_cat("'", f.name, "' is not a function this renderer knows"));
    }
    if (f.kind != Expr::Attr) fail(e.line, "only functions and methods can be called");
    const Held held = hold(*f.args[0]);
    const Value& obj = *held;
    const std::string& m = f.name;
    if (obj.is_string()) {
      const std::string s = obj.get<std::string>();
      const std::string arg0 = a.empty() || a[0].is_null() ? "" : text_of(a[0], e.line, m.c_str());
      if (m == "strip" || m == "lstrip" || m == "rstrip")
        return strip(s, arg0, m != "rstrip", m != "lstrip");
      if (m == "upper" || m == "lower") {
        std::string out = s;
        for (char& c : out)
          c = char(m == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
        return out;
      }
      if (m == "startswith") return s.starts_with(arg0);
      if (m == "endswith") return s.ends_with(arg0);
      if (m == "replace" && a.size() == 2)
        return replace_all(s, arg0, text_of(a[1], e.line, "replace()"), e.line);
      if (m == "split") {
        return split(s, arg0, a.empty() || a[0].is_null(), e.line);
      }
      if (m == "title" || m == "capitalize") return capitalize(s, m == "title");
      if (m == "format") fail(e.line, "str.format is not supported");
    }
    if (obj.is_object()) {
      if (m == "items" || m == "keys" || m == "values") {
        Value out = Value::array();
        for (auto it = obj.begin(); it != obj.end(); ++it)
          out.push_back(m == "items"  ? Value::array({it.key(), *it})
                        : m == "keys" ? Value(it.key())
                                      : *it);
        return out;
      }
      if (m == "get" && !a.empty()) {
        const Value v = item(obj, a[0], e.line, false);
        return undefined(v) ? (a.size() > 1 ? a[1] : Value(nullptr)) : v;
      }
    }
    fail(e.line, str_cat(type_name(obj), " has no method '", m, "' (or not with these arguments)"));
  }

  std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                          int line) {
    if (from.empty()) fail(line, "replace() of an empty string is not supported");
    std::string out;
    size_t done = 0;
    for (size_t at = search(s, from, 0, line); at != std::string::npos;
         at = search(s, from, done, line)) {
      out.append(s, done, at - done).append(to);
      done = at + from.size();
      if (out.size() > max_output_) fail(line, "replace() result too long");
    }
    return bounded(out.append(s, done), line);
  }
  Value split(const std::string& s, const std::string& sep, bool whitespace, int line) {
    Value out = Value::array();
    if (!whitespace && sep.empty()) fail(line, "split(): empty separator");
    if (whitespace) {
      std::istringstream in(s);
      for (std::string w; in >> w; charge(kPieceWork, line)) out.push_back(w);
      return out;
    }
    size_t from = 0;
    for (size_t at = search(s, sep, 0, line); at != std::string::npos;
         at = search(s, sep, from, line)) {
      out.push_back(s.substr(from, at - from));
      from = at + sep.size();
      charge(kPieceWork, line);
    }
    out.push_back(s.substr(from));
    return out;
  }
  static std::string capitalize(const std::string& s, bool every_word) {
    std::string out = s;
    bool start = true;
    for (char& c : out) {
      const unsigned char u = static_cast<unsigned char>(c);
      c = char(start ? std::toupper(u) : std::tolower(u));
      start = every_word ? !std::isalpha(u) : false;
    }
    return out;
  }

  Value filter(const Expr& e) {
    const std::string& f = e.name;
    const Held held = hold(*e.args[0], f != "length" && f != "count");
    const Value& v = *held;
    const std::vector<Value> a = args(e, 1);
    if (f == "trim")
      return strip(text_of(v, e.line, "trim's input"), a.empty() ? "" : str(a[0]), true, true);
    if (f == "length" || f == "count") {
      if (undefined(v)) return 0;  // Jinja's undefined is an empty iterable
      if (v.is_string()) {
        pay_for(v, e.line);
        return int64_t(char_count(v.get_ref<const std::string&>()));
      }
      if (v.is_array() || v.is_object()) return int64_t(v.size());
      fail(e.line, str_cat("object of type ", type_name(v), " has no length"));
    }
    if (f == "lower" || f == "upper") {
      std::string s = str(v);
      for (char& c : s)
        c = char(f == "upper" ? std::toupper(static_cast<unsigned char>(c))
                              : std::tolower(static_cast<unsigned char>(c)));
      return s;
    }
    if (f == "capitalize" || f == "title") return capitalize(str(v), f == "title");
    if (f == "string") return str(v);
    if (f == "tojson") {
      const Value indent = kwarg(e, "indent", a, 0, nullptr);
      // Python: indent=None is one line, indent <= 0 a newline per item without spaces.
      int64_t spaces = -1;
      if (indent.is_number_integer()) spaces = std::max<int64_t>(0, indent.get<int64_t>());
      if (spaces > int64_t(max_output_ / (kMaxNesting + 2)))
        fail(e.line, "tojson's indent is too large");
      std::string out;
      dumps(v, spaces, 0, out, max_output_, e.line);
      return out;
    }
    if (f == "default" || f == "d") {
      const bool boolean = truthy(kwarg(e, "boolean", a, 1, false));
      if (undefined(v) || (boolean && !truthy(v))) return a.empty() ? Value("") : a[0];
      return v;
    }
    if (f == "first" || f == "last") {
      if (v.is_array()) return v.empty() ? kUndefined : (f == "first" ? v.front() : v.back());
      if (v.is_string()) {
        const std::string& s = v.get_ref<const std::string&>();
        if (s.empty()) return kUndefined;
        size_t at = 0;
        if (f == "last")
          for (size_t next = 0; next < s.size(); next += char_bytes(s, next)) at = next;
        return s.substr(at, char_bytes(s, at));
      }
      fail(e.line, str_cat(f, " of a ", type_name(v)));
    }
    if (f == "join") {
      if (!v.is_array()) fail(e.line, str_cat("join of a ", type_name(v)));
      const std::string sep = a.empty() ? "" : str(a[0]);
      std::string out;
      for (size_t i = 0; i < v.size(); ++i) {
        out += (i ? sep : "") + str(v[i]);
        check_length(out, e.line);
      }
      return out;
    }
    if (f == "list") {
      if (v.is_array()) return v;
      Value out = Value::array();
      if (v.is_string())
        for (const std::string& c : chars_of(v, e.line)) out.push_back(c);
      else if (v.is_object())
        for (auto it = v.begin(); it != v.end(); ++it) out.push_back(it.key());
      else fail(e.line, str_cat("list of a ", type_name(v)));
      return out;
    }
    if (f == "reverse") {
      if (v.is_string()) {
        const std::vector<std::string> cs = chars_of(v, e.line);
        std::string out;
        for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
        return out;
      }
      if (!v.is_array()) fail(e.line, str_cat("reverse of a ", type_name(v)));
      Value out = Value::array();
      for (auto it = v.rbegin(); it != v.rend(); ++it) out.push_back(*it);
      return out;
    }
    if (f == "items") {
      if (!v.is_object()) fail(e.line, str_cat("items of a ", type_name(v)));
      Value out = Value::array();
      for (auto it = v.begin(); it != v.end(); ++it) out.push_back(Value::array({it.key(), *it}));
      return out;
    }
    if (f == "int") {
      if (v.is_number_integer()) return v;
      if (v.is_number()) {
        const double d = v.get<double>();
        return std::isfinite(d) && std::fabs(d) < 9e18 ? Value(int64_t(d)) : Value(0);
      }
      if (v.is_string()) {
        try {
          size_t used = 0;
          const std::string s = strip(v.get<std::string>(), "", true, true);
          const int64_t x = std::stoll(s, &used);
          return used == s.size() ? Value(x) : Value(0);
        } catch (const std::exception&) {
          return 0;
        }
      }
      return 0;
    }
    if (f == "abs" && v.is_number()) {
      if (v.is_number_integer()) {
        if (v.get<int64_t>() == INT64_MIN) fail(e.line, "integer overflow");
        return std::llabs(v.get<int64_t>());
      }
      return std::fabs(v.get<double>());
    }
    fail(e.line, str_cat("unknown filter '", f, "'"));
  }

  bool test(const Expr& e) {
    const std::string& t = e.name;
    // The tests that compare read all of the value; the others only its type.
    const bool whole = t == "eq" || t == "equalto" || t == "sameas" || t == "ne" || t == "in";
    const Held held = hold(*e.args[0], whole);
    const Value& v = *held;
    const std::vector<Value> a = args(e, 1);
    if (t == "defined") return !undefined(v);
    if (t == "undefined") return undefined(v);
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer();
    if (t == "float") return v.is_number_float();
    if (t == "boolean") return v.is_boolean();
    if (t == "true" || t == "false") return v.is_boolean() && v.get<bool>() == (t == "true");
    if (t == "mapping") return v.is_object();
    if (t == "sequence" || t == "iterable") return v.is_array() || v.is_string() || v.is_object();
    if (t == "odd" || t == "even") return (as_int(v, e.line, t.c_str()) % 2 != 0) == (t == "odd");
    if ((t == "eq" || t == "equalto" || t == "sameas") && a.size() == 1) return equal(v, a[0]);
    if (t == "ne" && a.size() == 1) return !equal(v, a[0]);
    if (t == "divisibleby" && a.size() == 1) {
      const int64_t d = as_int(a[0], e.line, "divisibleby");
      if (d == 0) fail(e.line, "divisibleby 0");
      const int64_t x = as_int(v, e.line, "divisibleby");
      return d == -1 || x % d == 0;  // INT64_MIN % -1 traps
    }
    if (t == "in" && a.size() == 1) return contains(a[0], v, e.line);
    fail(e.line, str_cat("unknown test '", t, "'"));
  }

  // loop() holds a reference into its scope across nested loops' emplace_back: moving a map
  // keeps its nodes, and vector moves (not copies) maps whose move cannot throw.
  static_assert(std::is_nothrow_move_constructible_v<std::map<std::string, Value>>);
  std::vector<std::map<std::string, Value>> scopes_;
  std::string out_;
  size_t max_output_;
  int64_t work_budget_, work_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string render(const std::vector<Node>& program, const Value& vars, size_t max_output) {
  return Renderer(vars, max_output).run(program);
}

}  // namespace mg::jinja
