// Logging with a rank prefix on every line but rank 0's (rank 0 prints Megatron-style lines bare).
#pragma once
#include <string>

namespace mg {

void set_log_rank(int rank);
int log_rank();

// Prints one line to stdout (rank 0 only unless all_ranks) and flushes.
void log_line(const std::string& line, bool all_ranks = false);
// Prints one line to stderr from any rank, prefixed with the rank when not rank 0.
void log_error(const std::string& line);

}  // namespace mg
