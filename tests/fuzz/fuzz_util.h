// Helpers shared by the libFuzzer targets (tests/fuzz/*_fuzz.cpp): a per-process scratch
// directory ($TMPDIR, else in memory under /dev/shm) for targets whose entry point reads files, and
// the rule every target follows: a UsageError is the expected answer to a bad input; any other
// exception escapes, and libFuzzer reports it (with crashes, sanitizer reports, hangs, OOMs).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"

namespace mg::fuzz {

// A directory of this process's own, removed at exit (never destroyed: the exit handler reads it).
inline const std::string& scratch_dir() {
  static const std::string& dir = *new std::string([] {
    const char* tmp = std::getenv("TMPDIR");  // run_fuzzer.sh: a directory it removes itself
    const bool shm = std::filesystem::is_directory("/dev/shm") && access("/dev/shm", W_OK) == 0;
    std::string tmpl = (tmp ? std::string(tmp) : shm ? "/dev/shm" : "/tmp") + "/mg_fuzz_XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return tmpl;
  }());
  return dir;
}

inline std::string scratch_path(const std::string& name) { return scratch_dir() + "/" + name; }

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f.good()) std::abort();  // the scratch directory itself failed: not a finding
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property every accepted input must have; its failure is a finding (abort: libFuzzer keeps
// the input).
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: property violated: %s\n", what);
    std::abort();
  }
}

// Keeps a value computed from the data read, so the reads are not optimized away.
template <typename T>
void keep(const T& v) {
  static volatile T sink;
  sink = v;
}

// Runs f; a UsageError (the input was rejected with a message) is the expected outcome.
template <typename F>
void expect_usage_errors_only(F&& f) {
  try {
    f();
  } catch (const UsageError&) {
  }
}

}  // namespace mg::fuzz
