#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace mg {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  MG_USER_CHECK(f.good(), "cannot read the chat template file '", p.string(), "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// A special token as tokenizer_config.json writes it: a string, or {"content": ...}.
std::string token_text(const jinja::Value& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const jinja::Value& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return "";
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::find(const std::string& tokenizer_path,
                                               const std::string& override_file,
                                               std::string* warning) {
  fs::path dir = tokenizer_path;
  if (!tokenizer_path.empty() && !fs::is_directory(dir)) dir = dir.parent_path();
  jinja::Value cfg = jinja::Value::object();
  const fs::path cfg_file = dir / "tokenizer_config.json";
  if (!tokenizer_path.empty() && fs::is_regular_file(cfg_file)) {
    cfg = jinja::Value::parse(read_text(cfg_file), nullptr, false);
    if (!cfg.is_object()) cfg = jinja::Value::object();  // no template, no special tokens
  }
  if (!override_file.empty())  // asked for: it must work
    return ChatTemplate(read_text(override_file), token_text(cfg, "bos_token"),
                        token_text(cfg, "eos_token"), override_file);
  // The tokenizer's own: one that is missing or does not parse only disables chat.
  std::string source, origin;
  if (!tokenizer_path.empty() && fs::is_regular_file(dir / "chat_template.jinja")) {
    origin = (dir / "chat_template.jinja").string();
    source = read_text(origin);
  } else if (cfg.contains("chat_template")) {
    origin = cfg_file.string() + " (chat_template)";
    const jinja::Value& t = cfg["chat_template"];
    if (t.is_string()) source = t.get<std::string>();
    if (t.is_array())  // named templates: the "default" one
      for (const jinja::Value& named : t)
        if (named.is_object() && named.contains("name") && named["name"] == "default" &&
            named.contains("template") && named["template"].is_string())
          source = named["template"].get<std::string>();
    if (source.empty()) {
      *warning = str_cat("'", cfg_file.string(),
                         "': chat_template is neither a string nor a list "
                         "holding a \"default\" template");
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  try {
    return ChatTemplate(source, token_text(cfg, "bos_token"), token_text(cfg, "eos_token"), origin);
  } catch (const UsageError& e) {
    *warning = e.what();
    return std::nullopt;
  }
}

std::vector<int64_t> generation_eos_ids(const std::string& tokenizer_path) {
  if (tokenizer_path.empty()) return {};
  fs::path dir = tokenizer_path;
  if (!fs::is_directory(dir)) dir = dir.parent_path();
  const fs::path file = dir / "generation_config.json";
  if (!fs::is_regular_file(file)) return {};
  const jinja::Value cfg = jinja::Value::parse(read_text(file), nullptr, false);
  if (!cfg.is_object() || !cfg.contains("eos_token_id")) return {};
  std::vector<int64_t> ids;
  const jinja::Value& e = cfg["eos_token_id"];
  for (const jinja::Value& id : e.is_array() ? e : jinja::Value::array({e}))
    if (id.is_number_integer()) ids.push_back(id.get<int64_t>());
  return ids;
}

ChatTemplate::ChatTemplate(const std::string& source, std::string bos, std::string eos,
                           std::string origin)
    : bos_(std::move(bos)), eos_(std::move(eos)), origin_(std::move(origin)) {
  try {
    program_ = std::make_shared<const std::vector<jinja::Node>>(jinja::parse(source));
  } catch (const jinja::TemplateError& e) {
    throw UsageError(str_cat("the chat template of ", origin_, " does not parse: ", e.what(),
                             " (pass another with --chat-template FILE)"));
  }
}

std::string ChatTemplate::apply(const jinja::Value& messages, bool add_generation_prompt,
                                const jinja::Value& tools) const {
  // As transformers passes them: tools and documents None when not given.
  const jinja::Value vars = {
      {"messages", messages}, {"add_generation_prompt", add_generation_prompt},
      {"bos_token", bos_},    {"eos_token", eos_},
      {"tools", tools},       {"documents", nullptr}};
  return jinja::render(*program_, vars, size_t(64) << 20);
}

}  // namespace mg
