#include "serve/api.h"

#include <atomic>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace mg::api {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Values nest at most this deep: copying a JSON value recurses (a chat request's messages are
// copied into the template's variables), and a body of 20,000 nested brackets would overflow a
// handler thread's stack.
constexpr int kMaxDepth = 64;

json parse_json(const std::string& body) {
  json j;
  try {
    j = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth)
        throw ApiError(str_cat("the request body nests deeper than ", kMaxDepth, " levels"));
      return true;
    });
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

std::vector<int32_t> tokenize(Tokenizer& tok, const std::string& text, bool add_bos, size_t index,
                              const Limits& limits) {
  std::vector<int32_t> ids = tok.encode(text);
  if (add_bos) ids.insert(ids.begin(), tok.bos() >= 0 ? tok.bos() : tok.eod());
  if (ids.empty())
    throw ApiError(str_cat("prompt ", index, " is empty (an empty prompt needs add_BOS)"));
  if (int64_t(ids.size()) >= limits.max_context)
    throw ApiError(str_cat("prompt ", index, " is ", ids.size(),
                           " tokens, which leaves no room to "
                           "generate in the context of ",
                           limits.max_context, " tokens (--inference-max-seq-length)"));
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
  if (s.max_new_tokens < 0)
    throw ApiError("tokens_to_generate must be an integer greater than or equal to 0");
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
    throw ApiError(
        str_cat("stop_token ", stop, " is outside the vocabulary of ", tok.vocab_size()));
  s.stop_tokens = {int32_t(stop)};
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty() && !add_bos) throw ApiError("Empty prompts require add_BOS=true");
    Request r{tokenize(tok, prompts[i], add_bos, i, limits), s};
    r.sampling.seed = s.seed + i;
    p.requests.push_back(std::move(r));
  }
  return p;
}

int64_t unix_seconds() {
  return int64_t(std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count());
}

// OpenAI's sampling and response fields, shared by completions and chat completions
// (temperature 0 is greedy).
Sampling openai_fields(const json& j, Endpoint e, Tokenizer& tok, const Limits& limits, Parsed& p) {
  p.endpoint = e;
  for (const char* f : {"n", "best_of"})
    if (integer(j, f, 1) != 1) throw ApiError(str_cat(f, " must be 1"));
  p.model = has(j, "model") ? (j["model"].is_string() ? j["model"].get<std::string>()
                                                      : throw ApiError("model must be a string"))
                            : limits.model_name;
  p.stream = boolean(j, "stream", false);
  if (has(j, "stream_options")) {
    if (!j["stream_options"].is_object()) throw ApiError("stream_options must be an object");
    if (!p.stream) throw ApiError("stream_options needs stream: true");
    p.include_usage = boolean(j["stream_options"], "include_usage", false);
  }
  static std::atomic<int64_t> next{0};
  p.id = str_cat(e == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-", next++);
  p.created = unix_seconds();
  Sampling s;
  const bool chat = e == Endpoint::ChatCompletions;
  const char* max_field =
      chat && has(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  s.max_new_tokens = integer(j, max_field, chat ? limits.max_context : 16);
  if (s.max_new_tokens < 0) throw ApiError(str_cat(max_field, " must be >= 0"));
  s.temperature = number(j, "temperature", 1.0);
  if (s.temperature < 0 || s.temperature > 100) throw ApiError("temperature must be in [0, 100]");
  s.top_k = integer(j, "top_k", 0);
  if (s.top_k < 0) throw ApiError("top_k must be >= 0");
  const double top_p = number(j, "top_p", 1.0);
  if (top_p <= 0 || top_p > 1) throw ApiError("top_p must be in (0, 1]");
  s.top_p = top_p < 1 ? top_p : 0.0;
  if (chat) {
    p.logprobs = boolean(j, "logprobs", false);
    if (integer(j, "top_logprobs", 0) != 0)
      throw ApiError("top_logprobs must be 0 (top alternatives are not returned yet)");
  } else {
    const int64_t lp = has(j, "logprobs") && j["logprobs"].is_boolean()
                           ? int64_t(j["logprobs"].get<bool>())
                           : integer(j, "logprobs", 0);
    if (lp < 0 || lp > 1)
      throw ApiError("logprobs must be 0 or 1 (top alternatives are not returned yet)");
    p.logprobs = lp > 0;
  }
  s.logprobs = p.logprobs;
  const int64_t seed = integer(j, "seed", -1);
  s.seed = seed >= 0 ? uint64_t(seed) : fresh_seed();
  s.stop_tokens = {tok.eod()};
  p.stop = strings(j, "stop");
  for (const std::string& x : p.stop)
    if (x.empty()) throw ApiError("stop strings must not be empty");
  return s;
}

// POST /completions and /v1/completions.
Parsed parse_completions(Endpoint e, const json& j, Tokenizer& tok, const Limits& limits) {
  Parsed p;
  if (!has(j, "prompt")) throw ApiError("prompt is required");
  const std::vector<std::string> prompts = strings(j, "prompt");
  if (prompts.empty()) throw ApiError("prompt is empty");
  if (int64_t(prompts.size()) > limits.max_prompts)
    throw ApiError(str_cat("at most ", limits.max_prompts, " prompts per request"));
  const Sampling s = openai_fields(j, e, tok, limits, p);
  if (p.stream && prompts.size() > 1) throw ApiError("stream takes one prompt per request");
  if (p.stream && e != Endpoint::OpenAiCompletions) throw ApiError("stream needs /v1/completions");
  p.echo = boolean(j, "echo", false);
  if (p.stream && p.echo) throw ApiError("echo is not supported with stream");
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r{tokenize(tok, prompts[i], false, i, limits), s};
    r.sampling.seed = s.seed + i;
    p.requests.push_back(std::move(r));
  }
  return p;
}

// A message's content for the template: a string, null, or OpenAI's content parts
// ({"type": "text", "text"}) joined into one string.
ordered_json message_text(const ordered_json& content, size_t i) {
  if (content.is_null() || content.is_string()) return content;  // null stays null (tool calls)
  if (!content.is_array())
    throw ApiError(str_cat("messages[", i, "].content must be a string or a list of parts"));
  std::string text;
  for (const ordered_json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw ApiError(str_cat("messages[", i,
                             "].content: only {\"type\": \"text\", \"text\": ...} "
                             "parts are supported"));
    text += part["text"].get<std::string>();
  }
  return text;
}

// POST /v1/chat/completions: the messages through the model's chat template, as one prompt.
Parsed parse_chat(const json& j, const std::string& body, Tokenizer& tok, const Limits& limits) {
  if (!limits.chat)
    throw ApiError(
        "this model has no chat template (no chat_template in its tokenizer's "
        "tokenizer_config.json): start the server with --chat-template FILE");
  if (!has(j, "messages")) throw ApiError("messages is required");
  // Parsed again keeping the keys' order: templates see dicts as Python does.
  ordered_json messages = ordered_json::parse(body)["messages"];
  if (!messages.is_array() || messages.empty())
    throw ApiError("messages must be a non-empty list of {\"role\", \"content\"}");
  for (size_t i = 0; i < messages.size(); ++i) {
    ordered_json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw ApiError(str_cat("messages[", i, "] must be an object with a string role"));
    m["content"] = message_text(m.contains("content") ? m["content"] : ordered_json(), i);
  }
  Parsed p;
  Sampling s = openai_fields(j, Endpoint::ChatCompletions, tok, limits, p);
  s.stop_tokens.insert(s.stop_tokens.end(), limits.chat_stop.begin(), limits.chat_stop.end());
  std::string text;
  try {
    const ordered_json tools =
        has(j, "tools") ? ordered_json::parse(body)["tools"] : ordered_json();
    text = limits.chat->apply(messages, true, tools);
  } catch (const jinja::TemplateError& e) {
    throw ApiError(str_cat("the chat template refuses these messages: ", e.what()));
  }
  std::vector<int32_t> prompt = tok.encode(text);
  if (prompt.empty()) throw ApiError("the chat template renders these messages as no tokens");
  if (int64_t(prompt.size()) >= limits.max_context)
    throw ApiError(str_cat("the chat prompt is ", prompt.size(),
                           " tokens, which leaves no room to "
                           "generate in the context of ",
                           limits.max_context, " tokens (--inference-max-seq-length)"));
  Request r{std::move(prompt), s};
  // The answer may use what the context has left (max_tokens is a bound, not a reservation).
  r.sampling.max_new_tokens =
      std::min(r.sampling.max_new_tokens, limits.max_context - int64_t(r.prompt.size()));
  p.requests.push_back(std::move(r));
  return p;
}

}  // namespace

Parsed parse(Endpoint e, const std::string& body, Tokenizer& tok, const Limits& limits) {
  const json j = parse_json(body);
  if (e == Endpoint::Api) return parse_api(j, tok, limits);
  if (e == Endpoint::ChatCompletions) return parse_chat(j, body, tok, limits);
  return parse_completions(e, j, tok, limits);
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

namespace {
json usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}
// A chat answer's token in OpenAI's logprobs.content.
json token_logprob(Tokenizer& tok, int32_t token, float logprob) {
  const std::string text = tok.decode({token});
  json bytes = json::array();
  for (const char c : text) bytes.push_back(int(static_cast<unsigned char>(c)));
  return {{"token", text}, {"logprob", logprob}, {"bytes", bytes}, {"top_logprobs", json::array()}};
}
}  // namespace

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
    prompt_tokens += int64_t(c.prompt.size());
    completion_tokens += int64_t(c.tokens.size());
    if (p.endpoint == Endpoint::ChatCompletions) {
      json lp = nullptr;
      if (p.logprobs) {
        lp = {{"content", json::array()}};
        for (size_t k = 0; k < c.tokens.size(); ++k)
          lp["content"].push_back(
              token_logprob(tok, c.tokens[k], c.logprobs[c.prompt.size() - 1 + k]));
      }
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", text}}},
                         {"logprobs", lp},
                         {"finish_reason", finish}});
      continue;
    }
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
  }
  json out = {{"choices", choices}};
  if (p.endpoint == Endpoint::OpenAiCompletions || p.endpoint == Endpoint::ChatCompletions) {
    out["id"] = p.id;
    out["object"] = p.endpoint == Endpoint::ChatCompletions ? "chat.completion" : "text_completion";
    out["created"] = p.created;
    out["model"] = p.model;
    out["usage"] = usage(prompt_tokens, completion_tokens);
  }
  return out;
}

std::string EventStream::chunk(const json& choice, const json& use) const {
  const bool chat = p_.endpoint == Endpoint::ChatCompletions;
  json c = {{"id", p_.id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", p_.created},
            {"model", p_.model},
            {"choices", choice.is_null() ? json::array() : json::array({choice})}};
  if (!use.is_null()) c["usage"] = use;
  return "data: " + c.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string EventStream::piece(const std::string& text, const json& logprobs) const {
  if (p_.endpoint == Endpoint::ChatCompletions)
    return chunk({{"index", 0},
                  {"delta", {{"content", text}}},
                  {"logprobs", logprobs},
                  {"finish_reason", nullptr}});
  return chunk({{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", nullptr}});
}

std::string EventStream::start() {
  if (p_.endpoint != Endpoint::ChatCompletions) return "";
  return chunk({{"index", 0},
                {"delta", {{"role", "assistant"}, {"content", ""}}},
                {"logprobs", nullptr},
                {"finish_reason", nullptr}});
}

std::string EventStream::update(const std::vector<int32_t>& generated,
                                const std::vector<float>& logprobs, bool* stopped) {
  return emit(generated, logprobs, stopped, false);
}

std::string EventStream::emit(const std::vector<int32_t>& generated,
                              const std::vector<float>& logprobs, bool* stopped, bool final) {
  *stopped = false;
  if (stopped_) return "";
  // New text comes from decoding a window that starts at the previous read point (a token's
  // text can depend on the one before: SentencePiece's leading space, clean-ups), taken once it
  // is whole: not ending in U+FFFD (a byte-fallback run or a tiktoken character not yet
  // complete) and extending what the window's first part gave before.
  if (generated.size() > read_) {
    const auto at = [&](size_t i) { return generated.begin() + std::ptrdiff_t(i); };
    const std::string before = tok_.decode(std::vector<int32_t>(at(prefix_), at(read_)));
    const std::string now = tok_.decode(std::vector<int32_t>(at(prefix_), generated.end()));
    const bool whole = !now.ends_with("\xEF\xBF\xBD") && now.size() >= before.size() &&
                       now.compare(0, before.size(), before) == 0;
    if (whole || final) {
      if (now.size() > before.size()) text_ += now.substr(before.size());
      prefix_ = read_;
      read_ = generated.size();
    }
  }
  const std::string& text = text_;
  size_t cut = std::string::npos;
  for (const std::string& x : p_.stop) cut = std::min(cut, text.find(x));
  size_t ready = text.size();
  if (cut != std::string::npos) {
    ready = cut;
    stopped_ = *stopped = true;
  } else if (!final) {
    // Hold back what could still become a stop string, and a character cut short.
    for (const std::string& x : p_.stop)
      for (size_t k = std::min(x.size() - 1, text.size()); k > 0; --k)
        if (text.compare(text.size() - k, k, x, 0, k) == 0) {
          ready = std::min(ready, text.size() - k);
          break;
        }
    size_t lead = ready;  // back to the start of the last character
    while (lead > 0 && (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) --lead;
    if (lead > 0) {
      const unsigned char c = static_cast<unsigned char>(text[lead - 1]);
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (ready - (lead - 1) < need) ready = lead - 1;
    }
  }
  if (ready <= sent_) return "";
  json lp = nullptr;
  if (p_.logprobs) {  // the tokens not yet reported
    json content = json::array();
    for (; sent_tokens_ < generated.size() && sent_tokens_ < logprobs.size(); ++sent_tokens_)
      content.push_back(token_logprob(tok_, generated[sent_tokens_], logprobs[sent_tokens_]));
    lp = p_.endpoint == Endpoint::ChatCompletions ? json{{"content", content}} : json(nullptr);
  }
  const std::string out = piece(text.substr(sent_, ready - sent_), lp);
  sent_ = ready;
  return out;
}

std::string EventStream::finish(const Completion& c) {
  std::string out;
  if (!stopped_) {  // what was held back
    bool stopped = false;
    const std::vector<float> lps(c.logprobs.end() -
                                     std::ptrdiff_t(std::min(c.logprobs.size(), c.tokens.size())),
                                 c.logprobs.end());
    out += emit(c.tokens, lps, &stopped, true);
  }
  std::string finish;
  completion_text(p_, c, tok_, &finish);
  if (stopped_) finish = "stop";
  const json reason = finish;
  if (p_.endpoint == Endpoint::ChatCompletions)
    out += chunk({{"index", 0},
                  {"delta", json::object()},
                  {"logprobs", nullptr},
                  {"finish_reason", reason}});
  else out += chunk({{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", reason}});
  if (p_.include_usage)
    out += chunk(nullptr, usage(int64_t(c.prompt.size()), int64_t(c.tokens.size())));
  return out + "data: [DONE]\n\n";
}

json models(const std::string& name) {
  return {
      {"object", "list"},
      {"data",
       json::array(
           {{{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "megatron-cpp"}}})}};
}

}  // namespace mg::api
