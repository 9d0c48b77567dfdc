// Pre-tokenizer regular expressions (tokenizer.json's Split patterns, tiktoken's patterns) with
// PCRE2 in UTF + UCP mode (\p{L}, \s and \w follow Unicode), JIT-compiled. The pattern is used
// as given: PCRE2 reads (?i:...), possessive quantifiers, {m,n} and look-ahead as Oniguruma and
// fancy-regex (the engines of HF tokenizers and tiktoken) do.
// Copies share the compiled pattern and own their match state: one per thread.
#pragma once
#include <memory>
#include <string>
#include <string_view>

namespace mg {

class Regex {
 public:
  // `what` names the pattern's origin for the error message (a UsageError when it does not
  // compile).
  Regex(const std::string& pattern, const std::string& what);
  Regex(const Regex& other);
  Regex& operator=(const Regex& other);
  ~Regex();

  // Calls on_match(begin, end) for each match in order, left to right, over valid UTF-8 text
  // (the caller checks validity once). Empty matches are skipped.
  template <typename F>
  void for_each_match(std::string_view text, F&& on_match) {
    size_t pos = 0, begin = 0, end = 0;
    while (next_match(text, pos, begin, end)) {
      on_match(begin, end);
      pos = end;
    }
  }

  // The number of the first capture group that took part in the last match (0: none).
  int last_group() const;

  // `literal` as a pattern that matches exactly it.
  static std::string escape(const std::string& literal);

 private:
  struct Code;
  struct State;
  // The first non-empty match at or after `pos`; false when none is left.
  bool next_match(std::string_view text, size_t pos, size_t& begin, size_t& end);

  std::shared_ptr<const Code> code_;
  std::unique_ptr<State> state_;
};

}  // namespace mg
