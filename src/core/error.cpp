#include "core/error.h"

#include "core/log.h"

namespace mg {

void fail_check(const char* cond, const char* file, int line, const std::string& hint) {
  throw InternalError(str_cat(file, ":", line, ": [rank ", log_rank(), "] check `", cond,
                              "` failed", hint.empty() ? "" : ": ", hint));
}

}  // namespace mg
