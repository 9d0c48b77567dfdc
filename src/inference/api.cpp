#include "inference/api.h"

#include <atomic>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace mg::api {

using nlohmann::json;

namespace {

json parse_json(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // a syntax error, or a number that overflows
    throw ApiError(str_cat("the request body is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) throw ApiError("the request body must be a JSON object");
  return j;
}

// Optional typed fields; a present field of the wrong type names itself.
bool has(const json& j, const char* f) { return j.contains(f) && !j[f].is_null(); }
int64_t integer(const json& j, const char* f, int64_t def) {
  if (!has(j, f)) return def;
  if (!j[f].is_number_integer()) throw ApiError(str_cat(f, " must be an integer"));
  return j[f].get<int64_t>();
}
double number(const json& j, const char* f, double def) {
  if (!has(j, f)) return def;
  if (!j[f].is_number()) throw ApiError(str_cat(f, " must be a number"));
  const double v = j[f].get<double>();
  if (!std::isfinite(v)) throw ApiError(str_cat(f, " must be finite"));
  return v;
}
bool boolean(const json& j, const char* f, bool def) {
  if (!has(j, f)) return def;
  if (!j[f].is_boolean()) throw ApiError(str_cat(f, " must be a boolean"));
  return j[f].get<bool>();
}
// A string or a list of strings.
std::vector<std::string> strings(const json& j, const char* f) {
  std::vector<std::string> out;
  if (!has(j, f)) return out;
  if (j[f].is_string()) return {j[f].get<std::string>()};
  if (!j[f].is_array()) throw ApiError(str_cat(f, " must be a string or a list of strings"));
  for (const json& x : j[f]) {
    if (!x.is_string()) throw ApiError(str_cat(f, " must be a string or a list of strings"));
    out.push_back(x.get<std::string>());
  }
  return out;
}

std::vector<int32_t> tokenize(Tokenizer& tok, const std::string& text, bool add_bos,
                              size_t index, const Limits& limits) {
  std::vector<int32_t> ids = tok.encode(text);
  if (add_bos) ids.insert(ids.begin(), tok.bos() >= 0 ? tok.bos() : tok.eod());
  if (ids.empty()) throw ApiError(str_cat("prompt ", index, " is empty (an empty prompt needs add_BOS)"));
  if (int64_t(ids.size()) >= limits.max_context)
    throw ApiError(str_cat("prompt ", index, " is ", ids.size(), " tokens, which leaves no room to "
                           "generate in the context of ", limits.max_context,
                           " tokens (--inference-max-seq-length)"));
  return ids;
}

uint64_t fresh_seed() {
  return uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Megatron's PUT /api (text_generation_server.py's validation, in its order).
Parsed parse_api(const json& j, Tokenizer& tok, const Limits& limits) {
  for (const char* legacy : {"max_len", "sentences", "beam_width"})
    if (j.contains(legacy))
      throw ApiError(str_cat(legacy, " is not supported (use tokens_to_generate and prompts)"));
  if (!j.contains("prompts")) throw ApiError("prompts argument required");
  const std::vector<std::string> prompts = strings(j, "prompts");
  if (!j["prompts"].is_array()) throw ApiError("prompts is not a list of strings");
  if (prompts.empty()) throw ApiError("prompts is empty");
  if (int64_t(prompts.size()) > limits.max_prompts)
    throw ApiError(str_cat("Maximum number of prompts is ", limits.max_prompts));
  Sampling s;
  s.max_new_tokens = integer(j, "tokens_to_generate", 64);
  if (s.max_new_tokens < 0) throw ApiError("tokens_to_generate must be an integer greater than or equal to 0");
  Parsed p;
  p.logprobs = s.logprobs = boolean(j, "logprobs", false);
  if (s.max_new_tokens == 0 && !s.logprobs)
    throw ApiError("tokens_to_generate=0 implies logprobs should be True");
  s.temperature = number(j, "temperature", 1.0);
  if (!(s.temperature > 0 && s.temperature <= 100))
    throw ApiError("temperature must be a positive number less than or equal to 100.0");
  s.top_k = integer(j, "top_k", 0);
  if (s.top_k < 0 || s.top_k > 1000) throw ApiError("top_k must be an integer from 0 to 1000");
  s.top_p = number(j, "top_p", 0.0);
  if (s.top_p < 0 || s.top_p > 1) throw ApiError("top_p must be a number from 0 to 1");
  if (s.top_p > 0 && s.top_k > 0) throw ApiError("cannot set both top-k and top-p samplings.");
  for (const char* f : {"top_p_decay", "top_p_bound"}) {
    const double v = number(j, f, 0.0);
    if (has(j, f) && (v < 0 || v > 1)) throw ApiError(str_cat(f, " must be a number from 0 to 1"));
    if (has(j, f) && s.top_p == 0) throw ApiError(str_cat(f, " requires top_p"));
  }
  const bool add_bos = boolean(j, "add_BOS", false);
  for (const char* f : {"stop_on_eol", "stop_on_double_eol", "prevent_newline_after_colon"})
    boolean(j, f, false);
  number(j, "length_penalty", 1.0);
  const int64_t seed = integer(j, "random_seed", -1);
  if (has(j, "random_seed") && seed < 0) throw ApiError("random_seed must be a positive integer");
  s.seed = seed >= 0 ? uint64_t(seed) : fresh_seed();
  const int64_t stop = integer(j, "stop_token", tok.eod());
  if (stop < 0 || stop >= tok.vocab_size())
    throw ApiError(str_cat("stop_token ", stop, " is outside the vocabulary of ", tok.vocab_size()));
  s.stop_tokens = {int32_t(stop)};
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty() && !add_bos) throw ApiError("Empty prompts require add_BOS=true");
    Request r{tokenize(tok, prompts[i], add_bos, i, limits), s};
    r.sampling.seed = s.seed + i;
    p.requests.push_back(std::move(r));
  }
  return p;
}

// POST /completions and /v1/completions (OpenAI's fields; temperature 0 is greedy).
Parsed parse_completions(Endpoint e, const json& j, Tokenizer& tok, const Limits& limits) {
  Parsed p;
  p.endpoint = e;
  if (!has(j, "prompt")) throw ApiError("prompt is required");
  const std::vector<std::string> prompts = strings(j, "prompt");
  if (prompts.empty()) throw ApiError("prompt is empty");
  if (int64_t(prompts.size()) > limits.max_prompts)
    throw ApiError(str_cat("at most ", limits.max_prompts, " prompts per request"));
  if (boolean(j, "stream", false)) throw ApiError("stream is not supported yet; leave it out");
  for (const char* f : {"n", "best_of"})
    if (integer(j, f, 1) != 1) throw ApiError(str_cat(f, " must be 1"));
  p.model = has(j, "model") ? (j["model"].is_string() ? j["model"].get<std::string>()
                                                       : throw ApiError("model must be a string"))
                            : limits.model_name;
  Sampling s;
  s.max_new_tokens = integer(j, "max_tokens", 16);
  if (s.max_new_tokens < 0) throw ApiError("max_tokens must be >= 0");
  s.temperature = number(j, "temperature", 1.0);
  if (s.temperature < 0 || s.temperature > 100) throw ApiError("temperature must be in [0, 100]");
  s.top_k = integer(j, "top_k", 0);
  if (s.top_k < 0) throw ApiError("top_k must be >= 0");
  const double top_p = number(j, "top_p", 1.0);
  if (top_p <= 0 || top_p > 1) throw ApiError("top_p must be in (0, 1]");
  s.top_p = top_p < 1 ? top_p : 0.0;
  const int64_t lp = has(j, "logprobs") && j["logprobs"].is_boolean()
                         ? int64_t(j["logprobs"].get<bool>())
                         : integer(j, "logprobs", 0);
  if (lp < 0 || lp > 1) throw ApiError("logprobs must be 0 or 1 (top alternatives are not returned yet)");
  p.logprobs = s.logprobs = lp > 0;
  p.echo = boolean(j, "echo", false);
  const int64_t seed = integer(j, "seed", -1);
  s.seed = seed >= 0 ? uint64_t(seed) : fresh_seed();
  s.stop_tokens = {tok.eod()};
  p.stop = strings(j, "stop");
  for (const std::string& x : p.stop)
    if (x.empty()) throw ApiError("stop strings must not be empty");
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r{tokenize(tok, prompts[i], false, i, limits), s};
    r.sampling.seed = s.seed + i;
    p.requests.push_back(std::move(r));
  }
  return p;
}

}  // namespace

Parsed parse(Endpoint e, const std::string& body, Tokenizer& tok, const Limits& limits) {
  const json j = parse_json(body);
  return e == Endpoint::Api ? parse_api(j, tok, limits) : parse_completions(e, j, tok, limits);
}

std::string completion_text(const Parsed& p, const Completion& c, Tokenizer& tok,
                            std::string* finish_reason) {
  std::string text = tok.decode(c.tokens);
  *finish_reason = c.finish_reason;
  size_t cut = std::string::npos;
  for (const std::string& s : p.stop) cut = std::min(cut, text.find(s));
  if (cut != std::string::npos) {
    text.resize(cut);
    *finish_reason = "stop";
  }
  return text;
}

json respond(const Parsed& p, const std::vector<Completion>& done, Tokenizer& tok) {
  if (p.endpoint == Endpoint::Api) {
    json text = json::array(), tokens = json::array(), logprobs = json::array();
    for (const Completion& c : done) {
      std::vector<int32_t> all = c.prompt;
      all.insert(all.end(), c.tokens.begin(), c.tokens.end());
      text.push_back(tok.decode(all));
      tokens.push_back(all);
      logprobs.push_back(c.logprobs);
    }
    json out = {{"text", text}, {"tokens", tokens}};
    if (p.logprobs) out["logprobs"] = logprobs;
    return out;
  }
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < done.size(); ++i) {
    const Completion& c = done[i];
    std::string finish;
    std::string text = completion_text(p, c, tok, &finish);
    std::vector<int32_t> all = c.prompt;
    all.insert(all.end(), c.tokens.begin(), c.tokens.end());
    if (p.echo) {  // the whole text, cut at the first stop string after the prompt's
      text = tok.decode(all);
      const size_t from = std::min(text.size(), tok.decode(c.prompt).size());
      size_t cut = std::string::npos;
      for (const std::string& x : p.stop) cut = std::min(cut, text.find(x, from));
      if (cut != std::string::npos) text.resize(cut);
    }
    json lp = nullptr;
    if (p.logprobs) {  // the generated tokens' (and with echo the prompt's, after its first)
      json toks = json::array(), values = json::array();
      const size_t first = p.echo ? 0 : c.prompt.size() - 1;
      for (size_t k = first; k < c.logprobs.size(); ++k) {
        toks.push_back(tok.decode({all[k + 1]}));
        values.push_back(c.logprobs[k]);
      }
      lp = {{"tokens", toks}, {"token_logprobs", values}, {"top_logprobs", nullptr}};
    }
    choices.push_back({{"index", i}, {"text", text}, {"logprobs", lp}, {"finish_reason", finish}});
    prompt_tokens += int64_t(c.prompt.size());
    completion_tokens += int64_t(c.tokens.size());
  }
  json out = {{"choices", choices}};
  if (p.endpoint == Endpoint::OpenAiCompletions) {
    static std::atomic<int64_t> next{0};
    out["id"] = str_cat("cmpl-", next++);
    out["object"] = "text_completion";
    out["created"] = int64_t(std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
    out["model"] = p.model;
    out["usage"] = {{"prompt_tokens", prompt_tokens},
                    {"completion_tokens", completion_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens}};
  }
  return out;
}

json models(const std::string& name) {
  return {{"object", "list"},
          {"data", json::array({{{"id", name}, {"object", "model"}, {"created", 0},
                                 {"owned_by", "megatron-cpp"}}})}};
}

}  // namespace mg::api
