// The message of the UsageError a call throws, for tests of refusals ("(no UsageError)" when
// it returns; any other exception propagates and fails the test).
#pragma once
#include <functional>
#include <string>

#include "core/error.h"

namespace mg::testing {

inline std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

}  // namespace mg::testing
