// Errors: invariant violations (MG_CHECK, a bug: file:line + hint) and user errors (UsageError:
// a bad flag, file or value, reported as one line naming what to fix, exit code 2).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace mg {

// A user/config/IO error: the message names the flag or file and what to do.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& msg) : std::runtime_error(msg) {}
};

// A broken internal invariant (a bug), carrying file:line and a hint.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

[[noreturn]] void fail_check(const char* cond, const char* file, int line, const std::string& hint);

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace mg

// MG_CHECK(cond, "hint", values...): throws InternalError "file:line: check `cond` failed: hint".
#define MG_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond)) ::mg::fail_check(#cond, __FILE__, __LINE__, ::mg::str_cat(__VA_ARGS__)); \
  } while (0)

// MG_USER_CHECK(cond, message...): throws UsageError with the message (no file:line: it is for users).
#define MG_USER_CHECK(cond, ...)                                     \
  do {                                                               \
    if (!(cond)) throw ::mg::UsageError(::mg::str_cat(__VA_ARGS__)); \
  } while (0)
