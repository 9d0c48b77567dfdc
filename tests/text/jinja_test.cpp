// The chat-template renderer (text/jinja.h) against Jinja2 itself (jinja_reference.py, in
// the environment Hugging Face transformers uses): real models' templates (Llama 3 from its
// tokenizer_config.json, ChatML with a default system prompt, Mistral and Gemma with their
// role checks, Zephyr's indented multi-line form, a tool-calling one with namespace() and
// tojson) over several conversations, and expressions one by one; every output equal byte for
// byte, every template error an error here too (raise_exception's message the same).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "text/jinja.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

using jinja::Value;

const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const char* kChatMl =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const char* kMistral =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
    "roles are supported!') }}{% endif %}{% endfor %}";

const char* kGemma =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
    "not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
    "'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
    "alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == "
    "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
    "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}"
    "{% endif %}";

// Zephyr's: one tag per line, indented (trim_blocks and lstrip_blocks at work).
const char* kZephyr = R"({% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %})";

// Tool calling in the style of Llama 3.1 / Qwen 2.5: namespace(), slices, tojson, tests,
// whitespace control, comments, dict methods, break.
const char* kTools = R"({#- a tool-calling template -#}
{%- set ns = namespace(system='', found=false) -%}
{%- if messages[0]['role'] == 'system' -%}
    {%- set ns.system = messages[0]['content'] | trim -%}
    {%- set rest = messages[1:] -%}
{%- else -%}
    {%- set rest = messages -%}
{%- endif -%}
{{- bos_token }}<|system|>{{ ns.system if ns.system else 'You are helpful.' }}
{%- if tools is defined and tools is not none %}

Tools:
{%- for t in tools %}
{{ t | tojson(indent=2) }}
{%- endfor %}
{%- endif %}
{% for m in rest -%}
    {%- if m.role == 'assistant' and m.tool_calls is defined -%}
        {%- for call in m.tool_calls -%}
<call>{{ call.function.name }}({% for k, v in call.function.arguments.items() %}{{ k }}={{ v | tojson }}{{ ', ' if not loop.last }}{% endfor %})</call>
        {%- endfor -%}
    {%- elif m.role == 'tool' -%}
<result>{{ m.content }}</result>
    {%- else -%}
<|{{ m.role }}|>{{ m.content | trim }}{{ eos_token }}
    {%- endif %}
    {%- if m.role == 'user' and 'stop' in m.content %}{% set ns.found = true %}{% break %}{% endif %}
{% endfor -%}
{%- if ns.found %}[stopped]{% endif -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%})";

Value conversation(int which) {
  switch (which) {
    case 0: return Value::parse(R"([{"role": "user", "content": "  Hello there!  "}])");
    case 1:
      return Value::parse(R"([{"role": "system", "content": "Be brief.\n"},
        {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And \"3+3\"? Ünïcode ✓"}])");
    case 2:
      return Value::parse(
          R"([{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}])");
    default:
      return Value::parse(R"([{"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
          "arguments": {"city": "Paris", "days": 3, "metric": true, "x": [1.5, null]}}}]},
        {"role": "tool", "content": "sunny"}, {"role": "user", "content": "please stop now"},
        {"role": "assistant", "content": "never rendered"}])");
  }
}

struct Case {
  std::string name, tmpl;
  Value vars;
};

// Renders every case with Jinja2.
std::vector<Value> reference(const std::vector<Case>& cases) {
  testing::TempDir d;
  Value in = {{"cases", Value::array()}};
  for (const Case& c : cases) in["cases"].push_back({{"template", c.tmpl}, {"vars", c.vars}});
  std::ofstream(d.str("cases.json")) << in.dump();
  const auto r =
      testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                           "/tests/text/jinja_reference.py " + d.str("cases.json") + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const Value out = Value::parse(r.output, nullptr, false);
  EXPECT_TRUE(out.is_array() && out.size() == cases.size()) << r.output;
  return out.is_array() ? std::vector<Value>(out.begin(), out.end()) : std::vector<Value>{};
}

void expect_same_as_jinja2(const std::vector<Case>& cases) {
  const std::vector<Value> want = reference(cases);
  ASSERT_EQ(want.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::string got, error;
    try {
      got = jinja::render(jinja::parse(c.tmpl), c.vars, 1 << 20);
    } catch (const jinja::TemplateError& e) {
      error = e.what();
    }
    if (want[i].contains("text")) {
      EXPECT_EQ(error, "") << c.name;
      EXPECT_EQ(got, want[i]["text"].get<std::string>()) << c.name << "\n" << c.tmpl;
    } else {
      EXPECT_NE(error, "") << c.name << ": Jinja2 failed (" << want[i]["error"] << ") but we gave\n"
                           << got;
      const std::string& jerr = want[i]["error"].get_ref<const std::string&>();
      if (jerr.starts_with("TemplateError: ")) {  // raise_exception: the same message
        EXPECT_EQ(error, jerr.substr(15)) << c.name;
      }
    }
  }
}

TEST(ChatTemplate, RealTemplatesRenderAsJinja2) {
  std::vector<Case> cases;
  const std::vector<std::pair<const char*, const char*>> templates = {
      {"llama3", kLlama3}, {"chatml", kChatMl}, {"mistral", kMistral},
      {"gemma", kGemma},   {"zephyr", kZephyr}, {"tools", kTools}};
  for (const auto& [name, tmpl] : templates)
    for (int conv = 0; conv < 4; ++conv)
      for (const bool gen : {false, true}) {
        Value vars = {{"messages", conversation(conv)},
                      {"add_generation_prompt", gen},
                      {"bos_token", "<s>"},
                      {"eos_token", "</s>"}};
        if (conv == 3 && gen)
          vars["tools"] = Value::parse(R"([{"type": "function", "function": {"name":
              "get_weather", "parameters": {"city": {"type": "string"}, "days": 2}}}])");
        cases.push_back({str_cat(name, " conversation ", conv, gen ? " +prompt" : ""), tmpl, vars});
      }
  expect_same_as_jinja2(cases);
}

TEST(ChatTemplate, ExpressionsAndStatementsRenderAsJinja2) {
  const Value vars = Value::parse(R"({"xs": [3, 1, 2], "d": {"b": 1, "a": [true, null, 2.5]},
      "s": "  Hello, World  ", "n": -7, "f": 0.1, "big": 1e20, "e": "", "u": "ü"})");
  std::vector<Case> cases;
  for (
      const char* t : {
          "{{ 7 // 2 }} {{ -7 // 2 }} {{ n % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }}",
          "{{ f }} {{ big }} {{ 1.0 }} {{ 2.5e-7 }} {{ f * 3 }} {{ 10 / 4 }} {{ -0.0 }}",
          "{{ xs }} {{ d }} {{ none }} {{ true }} {{ [1, 'a', \"it's\"] }} {{ {'k': 'v'} }}",
          "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[::-1] }} {{ xs[:-1] }} {{ s[2:7] }} {{ xs[5] }}|",
          "{{ 'a' ~ 1 ~ none ~ f }} {{ 'ab' * 3 }} {{ 'x' + 'y' }} {{ xs + [4] }}",
          "{{ 1 < 2 and 'b' > 'a' }} {{ not xs }} {{ e or 'empty' }} {{ 3 in xs }} {{ 'ell' in s }} {{ 'c' not in d }}",
          "{{ s | trim }}|{{ s | length }}|{{ xs | length }}|{{ s | lower }}|{{ s | upper }}|{{ 'hello world' | title }}",
          "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'xyx'.strip('x') }}",
          "{{ s.startswith('  He') }} {{ s.endswith('x') }} {{ 'aXbX'.replace('X', '--') }} {{ 'abc'.upper() }}",
          "{{ d.get('b') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ d.keys() | list }} {{ d.items() | length }} {{ d.values() | list }}",
          "{{ xs | join(', ') }} {{ xs | first }} {{ xs | last }} {{ xs | reverse | list }} {{ range(3) | list }} {{ range(1, 10, 3) | list }}",
          "{{ undefined_name | default('dflt') }} {{ e | default('x', true) }} {{ '42' | int + 1 }} {{ n | abs }} {{ 3.9 | int }}",
          "{{ d | tojson }} {{ 'é\"\\n' | tojson }} {{ xs | tojson(indent=2) }} {{ f | tojson }} {{ {} | tojson }}",
          "{{ x is defined }} {{ xs is defined }} {{ none is none }} {{ s is string }} {{ 3 is odd }} {{ 4 is even }} {{ d is mapping }} {{ n is number }} {{ 6 is divisibleby 3 }} {{ xs is not string }}",
          "{{ 'yes' if xs else 'no' }} {{ 'yes' if e else 'no' }} {{ 'a' if false }}|",
          "{% for x in xs %}{{ loop.index }}/{{ loop.length }}:{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
          "{% for x in xs if x > 1 %}{{ loop.index0 }}={{ x }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
          "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}",
          "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
          "{% for x in xs %}{{ loop.previtem is defined }}{{ loop.nextitem | default('-') }}{{ loop.revindex }} {% endfor %}",
          "{% set c = 0 %}{% for x in xs %}{% set c = c + x %}{{ c }} {% endfor %}{{ c }}",
          "{% set ns = namespace(c=0) %}{% for x in xs %}{% set ns.c = ns.c + x %}{% endfor %}{{ ns.c }}",
          "{% if n > 0 %}pos{% elif n == 0 %}zero{% else %}neg{% endif %}",
          "a  {%- if true %}  b  {% endif -%}  c\n  {% if true %}\nd\n  {% endif %}\n{# c #}\ne {{- ' f ' -}} g",
          "{% raw %}x{% endraw %}",
          "{{ 1 / 0 }}",
          "{{ xs.missing.deeper }}",
          "{% if %}",
          "{% for x in xs %}",
          "{{ raise_exception('custom failure: ' ~ n) }}",
          "{{ 'a' < 1 }}",
          "{% set ns = 1 %}{% set ns.x = 2 %}",
          "{{ -3 | abs }} {{ -xs | length if false else 1 }} {{ nothing | length }} {{ 'x' in nothing }} {{ none is sameas none }}",
          "{{ 'a\\u00e9\\x41\\n\\d\\101\\U0001F600' }} {{ \"it\\'s\" }}",
          "{{ 'ab'.split('') }}",
          "{{ (-9223372036854775807 - 1) is divisibleby -1 }} {{ -6 is divisibleby -3 }} {{ 7 is divisibleby -2 }}",
          "{{ 1 ** 9223372036854775807 }} {{ (-1) ** 9223372036854775807 }} {{ 0 ** 9223372036854775807 }} {{ (-1) ** 4 }} {{ 0 ** 0 }} {{ 2 ** 62 }} {{ true ** 5 }}",
          "{{ d | tojson(indent=0) }} {{ xs | tojson(indent=-3) }} {{ d | tojson(indent=1) }}",
          "{{ ('' * 1000000000000) | length }} {{ xs[1::9223372036854775807] }} {{ range(0, 9223372036854775807, 4611686018427387904) | list }}",
          "{{ true / 2 }} {{ 1.5 + true }} {{ false * 3 }}",
          "line one\r\nline two\n",
          "{{ u | length }} {{ u }} {{ 'x' ~ u ~ 'y' }} {{ ('aü€😀b')[1:4] }} {{ 'aü€' | reverse }} {{ 'aü€' | list }} {{ ('€x')[0] }}",
      })
    cases.push_back({t, t, vars});
  expect_same_as_jinja2(cases);
}

// A long agentic conversation: templates that look back at messages[i - 1] or test
// messages[0] on every turn read them in place, so the render stays linear in the conversation
// and within the work budget (a copy of `messages` per turn would be 4000 x 4000 entries).
TEST(ChatTemplate, LongConversationsRenderAsJinja2) {
  const char* kLookBack =
      "{%- for message in messages %}{%- if message.role == 'tool' %}{%- if loop.index0 == 0 or "
      "messages[loop.index0 - 1].role != 'tool' %}<tools>{% endif %}{{ message.content }}{%- if "
      "loop.last or messages[loop.index0 + 1].role != 'tool' %}</tools>{% endif %}{%- else %}"
      "<{{ message.role }}>{{ message.content | trim }}{% if messages | length > 1 and tools %}"
      "*{% endif %}{% if not tools or (tools if loop.first else none) %}!{% endif %}{%- endif %}"
      "{%- endfor %}";
  Value messages = Value::array();
  for (int i = 0; i < 4000; ++i)
    messages.push_back({{"role", i % 3 == 0   ? "user"
                                 : i % 3 == 1 ? "tool"
                                              : "assistant"},
                        {"content", str_cat(" turn ", i, " ", std::string(size_t(i % 50), 'x'))}});
  // Twenty tools of about 1 KB each: `... and tools` on every turn reads only their truth.
  Value tools = Value::array();
  for (int i = 0; i < 20; ++i)
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", str_cat("tool_", i)},
                       {"description", std::string(1000, 'd')},
                       {"parameters", {{"x", {{"type", "string"}}}}}}}});
  const Value vars = {{"messages", messages},
                      {"add_generation_prompt", true},
                      {"tools", tools},
                      {"bos_token", "<s>"},
                      {"eos_token", "</s>"}};
  expect_same_as_jinja2(
      {{"look back", kLookBack, vars}, {"chatml", kChatMl, vars}, {"tools", kTools, vars}});
}

// Whatever the template, rendering ends in bounded time, memory and stack: a value doubling
// in a loop, nested loops of a million iterations, quadratic searches, values nested
// deeper than printing can recurse, all stop with a TemplateError naming the line. (Jinja2
// itself would run out of memory or time on most of these; there is nothing to compare.)
TEST(ChatTemplate, EveryRenderIsBounded) {
  const Value vars = {{"messages", Value::array()}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = ns.x + [ns.x] %}"
       "{% endfor %}",
       "line 1: the template does too much work"},
      {"{% for i in range(1000000) %}\n{% for j in range(1000000) %}{% endfor %}{% endfor %}",
       "line 2: the template does too much work"},
      {"{% set r = range(1000000) %}{% for i in r %}{% if i in r %}{% endif %}{% endfor %}",
       "line 1: the template does too much work"},
      {"{% for i in range(100) %}{% set s = 'x' * 1000000 %}{% endfor %}",
       "line 1: the template does too much work"},
      {"{% for i in range(10) %}{% set n = ('ab' * 400000).replace('b', 'c').split('a') | length %}"
       "{% endfor %}",
       "line 1: the template does too much work"},
      {"{% set s = 'x' * 1000000 %}{{ s | list | length }}",
       "line 1: the template does too much work"},
      {"{% set s = ',' * 1000000 %}{{ s.split(',') | length }}",
       "line 1: the template does too much work"},
      {"{% set ns = namespace(x=1) %}{% for i in range(200) %}{% set ns.x = [ns.x] %}{% endfor %}",
       "line 1: a value nested more than 128 deep"},
  };
  for (const auto& [tmpl, want] : cases) {
    try {
      const std::string out = jinja::render(jinja::parse(tmpl), vars, 1 << 20);
      ADD_FAILURE() << tmpl << " rendered " << out.size() << " bytes";
    } catch (const jinja::TemplateError& e) {
      EXPECT_TRUE(std::string(e.what()).starts_with(want)) << tmpl << ": " << e.what();
    }
  }
  // Variables nested too deeply are refused before anything is printed.
  Value deep = 1;
  for (int i = 0; i < 200; ++i) deep = Value::array({deep});
  EXPECT_THROW(jinja::render(jinja::parse("{{ x | tojson }}"), {{"x", deep}}, 1 << 20),
               jinja::TemplateError);
  // Within the budget: a million-entry join, a long output, a 100,000-iteration loop.
  EXPECT_EQ(jinja::render(jinja::parse("{{ range(100000) | join(',') | length }}"), vars, 1 << 20),
            "588889");
  EXPECT_EQ(
      jinja::render(jinja::parse(
                        "{% for i in range(100000) %}{% endfor %}{{ ('y' * 1000000) | length }}"),
                    vars, 1 << 20),
      "1000000");
  // Searches take linear time (glibc's memmem), so the worst case of a naive search is cheap.
  EXPECT_EQ(jinja::render(jinja::parse(
                              "{{ ('a' * 1000000) in ('a' * 999999 ~ 'b') }} "
                              "{{ ('a' * 500000 ~ 'b').split('a' * 1000 ~ 'b') | length }}"),
                          vars, 1 << 20),
            "False 2");
  // Chains of . [] and | deeper than the renderer recurses, an indent that would make
  // gigabytes, both refused.
  std::string chain = "{{ s";
  for (int i = 0; i < 1000; ++i) chain += " | trim";
  EXPECT_THROW(jinja::render(jinja::parse(chain + " }}"), {{"s", "x"}}, 1 << 20),
               jinja::TemplateError);
  try {
    jinja::render(jinja::parse("{{ [1] | tojson(indent=9223372036854775807) }}"), vars, 1 << 20);
    ADD_FAILURE() << "a huge indent was taken";
  } catch (const jinja::TemplateError& e) {
    EXPECT_STREQ(e.what(), "line 1: tojson's indent is too large");
  }
  // A body that sets `loop` does not change the next iteration's loop variables.
  EXPECT_EQ(jinja::render(jinja::parse("{% for x in [1, 2, 3] %}[{{ loop.a }}|{{ loop.index }}]"
                                       "{% set loop = {'a': 1} %}{% endfor %}"),
                          vars, 1 << 20),
            "[|1][|2][|3]");
  // Reading one character of a long string does not split it into characters.
  EXPECT_EQ(
      jinja::render(
          jinja::parse(
              "{% set s = 'ab' * 500000 %}{{ s[-1] }}{{ s[0] }}{{ s | last }}{{ s | length }}"),
          vars, 1 << 20),
      "bab1000000");
  // tojson of a key that is not UTF-8 (a fuzzer's find: it threw nlohmann's type_error): the
  // bad byte becomes U+FFFD, as for string values.
  EXPECT_EQ(jinja::render(jinja::parse("{{ {'a\xfa': 1} | tojson }} {{ x | tojson }}"),
                          {{"x", {{"b\xfa", "c\xfa"}}}}, 1 << 20),
            "{\"a\xef\xbf\xbd\": 1} {\"b\xef\xbf\xbd\": \"c\xef\xbf\xbd\"}");
}

// What serve reads: tokenizer_config.json's template and its special tokens; a template that
// does not parse is refused naming the file and line.
TEST(ChatTemplate, FromTokenizerConfig) {
  testing::TempDir d;
  std::ofstream(d.str("tokenizer_config.json")) << Value{
      {"chat_template", kChatMl},
      {"bos_token", {{"content", "<s>"}}},
      {"eos_token", "</s>"}}.dump();
  std::string warning;
  const std::optional<ChatTemplate> t = ChatTemplate::find(d.str("tokenizer.json"), "", &warning);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(warning, "");
  EXPECT_EQ(t->apply(Value::parse(R"([{"role": "user", "content": "hi"}])"), true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi"
            "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(ChatTemplate::find(d.str("none/tokenizer.json"), "", &warning).has_value());
  // A --chat-template that does not parse stops the server, naming the file and line.
  std::ofstream(d.str("bad.jinja")) << "line one\n{% for x in %}";
  try {
    ChatTemplate::find(d.str("tokenizer.json"), d.str("bad.jinja"), &warning);
    ADD_FAILURE() << "a bad template was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jinja"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  // The tokenizer's own that does not parse (a macro): chat is off, with the reason.
  std::ofstream(d.str("tokenizer_config.json"))
      << Value{{"chat_template", "{% macro m() %}x{% endmacro %}{{ m() }}"}}.dump();
  EXPECT_FALSE(ChatTemplate::find(d.str("tokenizer.json"), "", &warning).has_value());
  EXPECT_NE(warning.find("unsupported or misplaced tag 'macro'"), std::string::npos) << warning;
}

}  // namespace
}  // namespace mg
