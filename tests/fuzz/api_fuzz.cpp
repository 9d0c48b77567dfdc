// libFuzzer target: a request body of the inference server (serve/api.h), parsed and
// validated as `megatron serve` does before anything reaches the engine. Input: the first byte
// picks the endpoint (PUT /api, POST /completions, POST /v1/completions, POST
// /v1/chat/completions through a ChatML-style template), the rest is the body.
// A bad body must end in an ApiError (or a UsageError from the tokenizer); an accepted one must
// give prompts inside the vocabulary and the context, and sampling the engine accepts.
#include "fuzz_util.h"
#include "serve/api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mg;
  if (size == 0) return 0;
  static NullTokenizer tok(500);
  api::Limits limits;
  limits.max_context = 64;
  limits.model_name = "fuzz";
  static const ChatTemplate chat(
      "{% for m in messages %}{{ m['role'] | length }} {{ m.content | trim }} {% endfor %}"
      "{% if add_generation_prompt %}7{% endif %}",
      "", "", "fuzz");
  limits.chat = &chat;
  const api::Endpoint e = api::Endpoint(data[0] % 4);
  try {
    const api::Parsed p =
        api::parse(e, std::string(fuzz::as_text(data + 1, size - 1)), tok, limits);
    fuzz::require(!p.requests.empty() && int64_t(p.requests.size()) <= limits.max_prompts,
                  "1 to max_prompts requests");
    for (const Request& r : p.requests) {
      fuzz::require(!r.prompt.empty() && int64_t(r.prompt.size()) < limits.max_context,
                    "prompt inside the context");
      for (int32_t t : r.prompt) fuzz::require(t >= 0 && t < 500, "prompt inside the vocabulary");
      const Sampling& s = r.sampling;
      fuzz::require(s.max_new_tokens >= 0 && s.temperature >= 0 && s.top_k >= 0 && s.top_p >= 0 &&
                        s.top_p <= 1,
                    "sampling the engine accepts");
    }
  } catch (const api::ApiError&) {
  } catch (const UsageError&) {
  }
  return 0;
}
