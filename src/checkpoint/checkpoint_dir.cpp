#include "checkpoint/checkpoint_dir.h"

#include <stdio.h>  // renameat2, RENAME_EXCHANGE
#include <fcntl.h>  // AT_FDCWD

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "checkpoint/files.h"
#include "checkpoint/json_fields.h"
#include "core/error.h"
#include "core/log.h"

namespace mg {

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Every final-named checkpoint directory in dir, as (iteration, path), oldest first.
std::vector<std::pair<int64_t, fs::path>> final_dirs(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t it = iteration_of_dir_name(e.path().filename().string());
    if (it >= 0 && e.is_directory(ec)) out.emplace_back(it, e.path());
  }
  MG_USER_CHECK(!ec, "cannot list checkpoint directory '", dir, "': ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

bool complete(const fs::path& ckdir) {
  std::error_code ec;
  return fs::is_regular_file(ckdir / "metadata.json", ec);
}

void remove_all_checked(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  MG_USER_CHECK(!ec, "cannot remove '", p.string(), "': ", ec.message());
}

void rename_checked(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  MG_USER_CHECK(!ec, "cannot rename '", from.string(), "' to '", to.string(), "': ", ec.message());
}

}  // namespace

std::string checkpoint_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "iter_%07lld", (long long)iteration);
  return buf;
}

int64_t iteration_of_dir_name(const std::string& name) {
  if (name.size() < 12 || name.size() > 5 + 15 || name.rfind("iter_", 0) != 0) return -1;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  const int64_t it = std::stoll(name.substr(5));     // at most 15 digits: no overflow
  return checkpoint_dir_name(it) == name ? it : -1;  // one spelling per iteration
}

int64_t read_latest_iteration(const std::string& dir) {
  const std::string latest = dir + "/" + kLatestFile;
  std::error_code ec;
  if (!fs::exists(latest, ec)) return -1;
  const std::string text = ckpt::read_text_file(latest);
  const size_t end = text.find_last_not_of(" \t\r\n") + 1;  // npos + 1 == 0: blank
  const bool digits = end > 0 && end <= 15 && text.find_first_not_of("0123456789") >= end;
  MG_USER_CHECK(digits, "'", latest, "' should hold the iteration of the latest checkpoint, not '",
                text.substr(0, 40), "'");
  return std::stoll(text.substr(0, end));
}

namespace ckpt {

void remove_dir_safely(const std::string& path) {
  fs::path doomed = path;
  if (!ends_with(path, ".deleting")) {
    doomed = path + ".deleting";
    remove_all_checked(doomed);  // a leftover of the same name
    rename_checked(path, doomed);
    fsync_dir(fs::path(path).parent_path().string());
  }
  remove_all_checked(doomed);
}

void remove_leftovers(const std::string& dir) {
  const int64_t latest = read_latest_iteration(dir);
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const size_t dot = n.find('.');
    const std::string stem = n.substr(0, dot), ext = dot == std::string::npos ? "" : n.substr(dot);
    const int64_t it = iteration_of_dir_name(stem);
    const bool leftover =
        (it >= 0 && (ext == ".tmp" || ext == ".deleting" || ext == ".old")) ||
        n == std::string(kLatestFile) + ".tmp" ||
        (it >= 0 && ext.empty() && it < latest && e.is_directory(ec) && !complete(e.path()));
    if (leftover) doomed.push_back(e.path());
  }
  MG_USER_CHECK(!ec, "cannot list checkpoint directory '", dir, "': ", ec.message());
  for (const fs::path& p : doomed) {
    log_line(" > removing '" + p.string() + "', left by an interrupted checkpoint save or removal");
    if (p.extension() == ".tmp" || p.extension() == ".deleting" || p.extension() == ".old")
      remove_all_checked(p);  // not a final name: no reader looks at it
    else remove_dir_safely(p.string());
  }
}

void begin_save(const std::string& dir, const std::string& tmp) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MG_USER_CHECK(fs::is_directory(dir, ec), "--save: cannot create directory '", dir, "'");
  remove_leftovers(dir);
  fs::create_directories(tmp, ec);
  MG_USER_CHECK(!ec, "--save: cannot create '", tmp, "': ", ec.message());
}

void publish_checkpoint(const std::string& dir, const std::string& tmp, int64_t iteration) {
  const std::string final_dir = dir + "/" + checkpoint_dir_name(iteration);
  std::error_code ec;
  std::string old;  // a checkpoint of the same iteration that this one replaces
  if (fs::exists(final_dir, ec)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      old = tmp;  // the swap left the replaced checkpoint under the .tmp name
    } else {
      // A file system without atomic exchange: the old one goes aside first, so for a moment
      // the latest file may name a missing directory (only when re-saving that iteration).
      old = final_dir + ".deleting";
      remove_all_checked(old);
      rename_checked(final_dir, old);
      rename_checked(tmp, final_dir);
    }
  } else {
    rename_checked(tmp, final_dir);
  }
  fsync_dir(dir);
  write_file_atomic(dir + "/" + kLatestFile, std::to_string(iteration) + "\n");
  if (!old.empty()) remove_all_checked(old);  // not a final name any more
}

void keep_last_checkpoints(const std::string& dir, int64_t latest, int64_t keep_last) {
  if (keep_last <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> older = final_dirs(dir);
  older.erase(std::remove_if(older.begin(), older.end(),
                             [&](const auto& e) { return e.first >= latest; }),
              older.end());
  int64_t kept = 1;  // the latest itself
  for (auto it = older.rbegin(); it != older.rend(); ++it) {
    if (kept < keep_last && complete(it->second)) {
      ++kept;
      continue;
    }
    remove_dir_safely(it->second.string());
  }
}

}  // namespace ckpt
}  // namespace mg
