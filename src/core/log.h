// Logging with a rank prefix on every line but rank 0's (rank 0 prints Megatron-style lines bare).
#pragma once
#include <cstdint>
#include <string>

namespace mg {

void set_log_rank(int rank);
int log_rank();

// Prints one line to stdout (rank 0 only unless all_ranks) and flushes.
void log_line(const std::string& line, bool all_ranks = false);
// Prints one line to stderr from any rank, prefixed with the rank when not rank 0.
void log_error(const std::string& line);

// Bytes for a message: "512 bytes", "21.7 GiB", "9.10 TiB" (binary units, 3 significant digits).
std::string format_bytes(int64_t bytes);

}  // namespace mg
