// libFuzzer target: a chat template (text/jinja.h), as `megatron serve` reads it from a
// tokenizer_config.json or --chat-template, parsed and rendered with a conversation. Whatever
// the template, the result is text of bounded size or a TemplateError: no crash, no hang, no
// unbounded memory or recursion.
#include "fuzz_util.h"
#include "text/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mg;
  static const jinja::Value vars = jinja::Value::parse(R"({
      "messages": [{"role": "system", "content": " Be brief. "},
                   {"role": "user", "content": "Hi ✓"},
                   {"role": "assistant", "content": "Hello", "tool_calls": [{"function":
                       {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]},
                   {"role": "user", "content": "again"}],
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  try {
    const std::string out =
        jinja::render(jinja::parse(std::string(fuzz::as_text(data, size))), vars, 1 << 20);
    fuzz::require(out.size() <= (1u << 20), "output within its bound");
  } catch (const jinja::TemplateError&) {
  }
  return 0;
}
