// The Jinja subset that Hugging Face chat templates use (tokenizer_config.json "chat_template"),
// parsed into a tree (jinja_parse.cpp) and rendered (jinja_render.cpp) with the environment
// transformers renders them in: trim_blocks and lstrip_blocks on, loop controls, an immutable
// sandbox (no method changes a value), raise_exception() and HF's tojson. Values are ordered
// JSON (dicts keep their insertion order, as Python's); a discarded value is Jinja's undefined.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg::jinja {

using Value = nlohmann::ordered_json;

// A template that does not parse, or fails to render (raise_exception's message, a type
// error): the message names the template's line.
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    Literal,
    Name,
    Attr,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Unary,
    Binary,
    Cond,
    List,
    Dict
  };
  Kind kind = Literal;
  Value value;       // Literal
  std::string name;  // Name; Attr's attribute; Filter's / Test's name; Unary's / Binary's op
  // Operands: Attr/Item/Filter/Test: the object first, then Item's key or the arguments; Slice:
  // object, start, stop, step (null where left out); Call: the callee, then its arguments;
  // Unary: one; Binary: two; Cond: condition, then, else (null: undefined); List: items; Dict:
  // key, value pairs flattened.
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call / Filter keyword arguments
  bool negated = false;                                 // Test: "is not"
  int line = 1;
};

struct Node {
  enum Kind { Text, Output, If, For, Set, Break, Continue };
  Kind kind = Text;
  std::string text;  // Text
  ExprPtr expr;      // Output, For's iterable, Set's value
  std::vector<std::pair<ExprPtr, std::vector<Node>>> branches;  // If: (condition, body) in order
  std::vector<Node> body, else_body;                            // For; If's and For's else
  std::vector<std::string> targets;  // For: the loop variables (1 or 2); Set: name [, attribute]
  ExprPtr filter;                    // For: "for x in xs if filter"
  int line = 1;
};

// Throws TemplateError ("line N: ...").
std::vector<Node> parse(const std::string& source);
// Renders the parsed template with the given variables (a JSON object); at most max_output bytes.
std::string render(const std::vector<Node>& program, const Value& vars, size_t max_output);

}  // namespace mg::jinja
