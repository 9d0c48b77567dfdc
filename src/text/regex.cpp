#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>

#include "core/error.h"
#include "text/unicode.h"

namespace mg {

struct Regex::Code {
  pcre2_code* code = nullptr;
  std::string what;
  ~Code() { pcre2_code_free(code); }
};

struct Regex::State {
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  explicit State(const pcre2_code* code) {
    match = pcre2_match_data_create_from_pattern(code, nullptr);
    context = pcre2_match_context_create(nullptr);
    // Long runs of one class (a page of spaces) need more than the default 32 KiB JIT stack.
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    MG_CHECK(match && context && stack, "PCRE2 allocation failed");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~State() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match);
  }
};

Regex::Regex(const std::string& pattern, const std::string& what) {
  auto code = std::make_shared<Code>();
  code->what = what;
  int error = 0;
  PCRE2_SIZE offset = 0;
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw UsageError(str_cat(what, ": the pattern '", pattern, "' does not compile at offset ",
                             offset, ": ", reinterpret_cast<const char*>(message)));
  }
  // Without JIT (an unsupported CPU) PCRE2 falls back to its interpreter: slower, same matches.
  pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);
  code_ = std::move(code);
  state_ = std::make_unique<State>(code_->code);
}

Regex::Regex(const Regex& other)
    : code_(other.code_), state_(std::make_unique<State>(other.code_->code)) {}

Regex& Regex::operator=(const Regex& other) {
  if (this != &other) {
    code_ = other.code_;
    state_ = std::make_unique<State>(code_->code);
  }
  return *this;
}

Regex::~Regex() = default;

bool Regex::next_match(std::string_view text, size_t pos, size_t& begin, size_t& end) {
  while (pos < text.size()) {
    const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                               pos, PCRE2_NO_UTF_CHECK, state_->match, state_->context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw UsageError(
          str_cat(code_->what, ": matching failed: ", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state_->match);
    begin = ov[0];
    end = ov[1];
    if (end > begin) return true;
    // An empty match: step over one code point and search on.
    char32_t cp;
    const size_t len = unicode::decode_one(text, begin, cp);
    pos = begin + (len ? len : 1);
  }
  return false;
}

std::string Regex::escape(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    if (uint8_t(c) < 0x80 && !std::isalnum(uint8_t(c))) out += '\\';
    out += c;
  }
  return out;
}

int Regex::last_group() const {
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state_->match);
  const uint32_t pairs = pcre2_get_ovector_count(state_->match);
  for (uint32_t g = 1; g < pairs; ++g)
    if (ov[2 * g] != PCRE2_UNSET) return int(g);
  return 0;
}

}  // namespace mg
