// Upstream Megatron-LM's launch scripts as flag lists (tests/cli/upstream_scripts/*.args), each
// flag classified against megatron-cpp's option tables and compatibility tables
// (cli/compat_flags.h), the runnable command line built from a list, and the generated part of
// docs/megatron-compat.md. Shared by the unit test of the tables and doc and the runs test.
#pragma once
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/compat_flags.h"

namespace mg::testing {

struct UpstreamScript {
  const char* file;      // under tests/cli/upstream_scripts/
  const char* title;     // short name in the doc
  const char* upstream;  // the script in Megatron-LM
  const char* command;   // megatron subcommand: train | preprocess
};

inline const std::vector<UpstreamScript>& upstream_scripts() {
  static const std::vector<UpstreamScript> s = {
      {"gpt3_175b.args", "GPT-3 175B", "examples/gpt3/train_gpt3_175b_distributed.sh", "train"},
      {"llama3_8b_fp8.args", "Llama-3 8B", "examples/llama/train_llama3_8b_h100_fp8.sh", "train"},
      {"mixtral_8x7b.args", "Mixtral 8x7B", "examples/mixtral/train_mixtral_8x7b_distributed.sh",
       "train"},
      {"sc21.args", "SC21", "examples/academic_paper_scripts/sc21/ (CONFIG.sh + run_*.sh)",
       "train"},
      {"preprocess_data.args", "preprocess", "tools/preprocess_data.py", "preprocess"},
  };
  return s;
}

// One flag of a list with the values that follow it.
struct FlagUse {
  std::string flag;
  std::vector<std::string> values;
};

inline std::string upstream_scripts_dir() {
  return std::string(MG_SOURCE_DIR) + "/tests/cli/upstream_scripts/";
}

// The list's arguments ('#' starts a comment), with @NAME@ replaced from `subst`.
inline std::vector<std::string> script_tokens(
    const UpstreamScript& s, const std::map<std::string, std::string>& subst = {}) {
  std::ifstream in(upstream_scripts_dir() + s.file);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    for (std::string w; words >> w;) {
      for (const auto& [key, value] : subst)
        for (size_t p; (p = w.find(key)) != std::string::npos;) w.replace(p, key.size(), value);
      out.push_back(w);
    }
  }
  return out;
}

inline std::vector<FlagUse> flag_uses(const std::vector<std::string>& tokens) {
  std::vector<FlagUse> uses;
  for (const std::string& t : tokens) {
    if (t.starts_with("--")) uses.push_back({t, {}});
    else if (!uses.empty()) uses.back().values.push_back(t);
  }
  return uses;
}

enum class FlagClass {
  Option,       // a real option of the command
  NoOp,         // accepted, no effect (compat table)
  DefaultOnly,  // accepted: its value is the default
  NotYet,       // refused: not supported yet (incl. a default-only flag's other values)
  Renamed,      // refused: removed upstream, the message names the current flag
  Unknown,
};

// The command's own flags (its option table without the compatibility rows).
inline std::set<std::string> real_flags(const std::string& command) {
  std::set<std::string> flags;
  auto add = [&](const auto& table) {
    for (const auto& o : table) flags.insert(o.flag);
  };
  if (command == "train") add(train_options());
  else add(preprocess_options());
  const CompatTables& t = compat_tables(command);
  for (const auto& f : t.no_op) flags.erase(f.flag);
  for (const auto& f : t.not_yet) flags.erase(f.flag);
  for (const auto& f : t.default_only) flags.erase(f.flag);
  for (const auto& f : t.renamed) flags.erase(f.flag);
  return flags;
}

template <typename Row>
const Row* find_row(std::span<const Row> rows, const std::string& flag) {
  for (const Row& r : rows)
    if (flag == r.flag) return &r;
  return nullptr;
}

inline FlagClass classify(const std::string& command, const FlagUse& u) {
  const CompatTables& t = compat_tables(command);
  if (real_flags(command).count(u.flag)) return FlagClass::Option;
  if (find_row(t.no_op, u.flag)) return FlagClass::NoOp;
  if (find_row(t.not_yet, u.flag)) return FlagClass::NotYet;
  if (find_row(t.renamed, u.flag)) return FlagClass::Renamed;
  if (const DefaultOnlyFlag* d = find_row(t.default_only, u.flag))
    return !u.values.empty() && u.values[0] == d->accepted ? FlagClass::DefaultOnly
                                                           : FlagClass::NotYet;
  return FlagClass::Unknown;
}

// The arguments a user runs once megatron-cpp refused what it refuses: not-yet flags dropped,
// renamed ones replaced by the current spelling.
inline std::vector<std::string> runnable_args(const std::string& command,
                                              const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  for (const FlagUse& u : flag_uses(tokens)) {
    std::vector<std::string> head;
    switch (classify(command, u)) {
      case FlagClass::Option:
      case FlagClass::NoOp:
      case FlagClass::DefaultOnly:
      case FlagClass::Unknown:  // kept: the run must then fail on it
        head = {u.flag};
        break;
      case FlagClass::Renamed: {
        std::istringstream words(find_row(compat_tables(command).renamed, u.flag)->replacement);
        for (std::string w; words >> w;) head.push_back(w);
        break;
      }
      case FlagClass::NotYet: continue;
    }
    out.insert(out.end(), head.begin(), head.end());
    out.insert(out.end(), u.values.begin(), u.values.end());
  }
  return out;
}

// docs/megatron-compat.md's generated part: every flag of the lists and what megatron-cpp does
// with it, then the compatibility tables.
inline std::string compat_markdown() {
  auto cell = [](std::string s) {
    for (size_t p; (p = s.find(" | ")) != std::string::npos;) s.replace(p, 3, ", ");
    for (size_t p; (p = s.find('|')) != std::string::npos;) s.replace(p, 1, ", ");
    return s;
  };
  std::ostringstream md;
  // flag -> (titles of the scripts using it, what megatron-cpp does)
  std::map<std::string, std::pair<std::vector<std::string>, std::string>> rows;
  for (const UpstreamScript& s : upstream_scripts()) {
    const std::string cmd = s.command;
    std::map<std::string, std::string> help;
    if (cmd == "train")
      for (const auto& o : train_options()) help[o.flag] = o.help;
    else
      for (const auto& o : preprocess_options()) help[o.flag] = o.help;
    for (const FlagUse& u : flag_uses(script_tokens(s))) {
      const std::string key = (cmd == "train" ? "" : "preprocess ") + u.flag;
      auto& row = rows[key];
      if (std::find(row.first.begin(), row.first.end(), s.title) == row.first.end())
        row.first.push_back(s.title);
      const CompatTables& t = compat_tables(cmd);
      switch (classify(cmd, u)) {
        case FlagClass::Option: row.second = "honoured: " + cell(help[u.flag]); break;
        case FlagClass::NoOp:
          row.second = "accepted, no effect: " + cell(find_row(t.no_op, u.flag)->why);
          break;
        case FlagClass::DefaultOnly:
        case FlagClass::NotYet:
          if (const DefaultOnlyFlag* d = find_row(t.default_only, u.flag))
            row.second = std::string("honoured for ") + d->accepted +
                         " (the default); other values: not supported yet (" + d->what + ")";
          else row.second = std::string("not supported yet: ") + find_row(t.not_yet, u.flag)->what;
          break;
        case FlagClass::Renamed:
          row.second = std::string("removed upstream: use `") +
                       find_row(t.renamed, u.flag)->replacement + "`";
          break;
        case FlagClass::Unknown: row.second = "UNKNOWN"; break;
      }
    }
  }
  md << "### Every flag of the upstream scripts\n\n| flag | used by | megatron-cpp |\n|---|---|---|\n";
  for (const auto& [flag, row] : rows) {
    std::string users;
    for (const auto& t : row.first) users += (users.empty() ? "" : ", ") + t;
    md << "| `" << flag << "` | " << users << " | " << row.second << " |\n";
  }
  for (const char* cmd : {"train", "preprocess"}) {
    const CompatTables& t = compat_tables(cmd);
    md << "\n### `megatron " << cmd << "`: accepted, no effect\n\n"
       << "| flag | value | what it selects in Megatron-LM | why it changes nothing here |\n"
       << "|---|---|---|---|\n";
    for (const NoOpFlag& f : t.no_op)
      md << "| `" << f.flag << "` | " << cell(*f.choices ? f.choices : f.metavar) << " | "
         << f.upstream << " | " << f.why << " |\n";
    md << "\n### `megatron " << cmd << "`: not supported yet (refused)\n\n"
       << "| flag | what honouring it takes |\n|---|---|\n";
    for (const NotYetFlag& f : t.not_yet) md << "| `" << f.flag << "` | " << f.what << " |\n";
    for (const DefaultOnlyFlag& f : t.default_only)
      md << "| `" << f.flag << "` other than " << f.accepted << " | " << f.what << " |\n";
    if (!t.renamed.empty()) {
      md << "\n### `megatron " << cmd << "`: removed upstream (refused, naming the current flag)"
         << "\n\n| removed flag | use instead |\n|---|---|\n";
      for (const RenamedFlag& f : t.renamed)
        md << "| `" << f.flag << "` | `" << f.replacement << "` |\n";
    }
  }
  return md.str();
}

}  // namespace mg::testing
