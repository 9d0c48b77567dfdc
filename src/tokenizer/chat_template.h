// A served model's chat template (POST /v1/chat/completions): Hugging Face's Jinja template
// from the tokenizer's tokenizer_config.json ("chat_template"), or chat_template.jinja beside
// it, or --chat-template FILE; rendered (text/jinja.h) with the conversation's messages,
// add_generation_prompt and the tokenizer's bos_token / eos_token, as transformers'
// apply_chat_template does.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/jinja.h"

namespace mg {

class ChatTemplate {
 public:
  // override_file (--chat-template) if given, else the template found beside tokenizer_path
  // (the tokenizer's file or directory); nullopt when there is none. An override_file that
  // cannot be read or does not parse is a UsageError naming the file (and line); a tokenizer's
  // template that does not parse gives nullopt and says why in *warning (chat is then off, the
  // rest of the server works).
  static std::optional<ChatTemplate> find(const std::string& tokenizer_path,
                                          const std::string& override_file, std::string* warning);
  // source: the template; origin: where it came from (messages name it).
  ChatTemplate(const std::string& source, std::string bos, std::string eos, std::string origin);
  // The prompt text of messages (OpenAI's [{"role", "content", ...}]); tools passed when not
  // null. Throws jinja::TemplateError (a role the template refuses: its raise_exception).
  std::string apply(const jinja::Value& messages, bool add_generation_prompt,
                    const jinja::Value& tools = nullptr) const;
  const std::string& origin() const { return origin_; }
  const std::string& eos() const { return eos_; }

 private:
  std::shared_ptr<const std::vector<jinja::Node>> program_;
  std::string bos_, eos_, origin_;
};

// generation_config.json's eos_token_id (a number or a list) beside the tokenizer; none if
// there is no such file.
std::vector<int64_t> generation_eos_ids(const std::string& tokenizer_path);

}  // namespace mg
