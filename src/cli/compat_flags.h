// Megatron-LM flags that have no option of their own in megatron-cpp, as data: flags accepted
// with no effect (they pick an upstream implementation detail that does not change results),
// flags refused as "not supported by megatron-cpp yet" (later work), flags whose only value here
// is the default (a layout we have; other values are later work), and legacy spellings upstream
// removed (refused, naming the current flag). compat_options() turns the tables into option
// rows appended to a command's table; docs/megatron-compat.md is checked against them.
#pragma once
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "cli/option_table.h"
#include "core/error.h"

namespace mg {

struct NoOpFlag {
  const char* flag;      // "--attention-backend"
  const char* metavar;   // "" for a switch; otherwise the value(s) it takes ("N...": integers)
  const char* choices;   // "flash|fused|..." values upstream accepts ("" : any)
  const char* upstream;  // what it selects in Megatron-LM
  const char* why;       // why that has no effect on results here
};

struct NotYetFlag {
  const char* flag;
  const char* metavar;
  const char* what;  // what honouring it takes (named in the refusal)
};

// Accepted when its (integer) value is `accepted` (the default, the only layout we have);
// refused as not supported yet otherwise.
struct DefaultOnlyFlag {
  const char* flag;
  const char* metavar;
  const char* accepted;
  const char* what;  // what other values would take
};

struct RenamedFlag {
  const char* flag;  // the removed spelling
  const char* metavar;
  const char* replacement;  // the current flag(s), which the old value follows
};

struct CompatTables {
  std::span<const NoOpFlag> no_op;
  std::span<const NotYetFlag> not_yet;
  std::span<const DefaultOnlyFlag> default_only;
  std::span<const RenamedFlag> renamed;
};

// The tables of one subcommand: "train" or "preprocess".
const CompatTables& compat_tables(const std::string& command);

// The refusals' wording (one place; tests and docs read the same functions).
std::string not_yet_message(const std::string& flag, const std::string& what);
std::string renamed_message(const std::string& flag, const std::string& replacement);

// Option rows for every table entry, to append to the command's own table.
template <typename Config>
std::vector<Option<Config>> compat_options(const std::string& command) {
  const CompatTables& t = compat_tables(command);
  auto none = [](const Config&) { return std::string(); };
  std::vector<Option<Config>> out;
  for (const NoOpFlag& f : t.no_op) {
    const std::string flag = f.flag, choices = f.choices;
    out.push_back({flag, f.metavar,
                   std::string("Megatron compatibility, no effect here: ") + f.upstream,
                   [flag, choices,
                    numeric = std::string(f.metavar) == "N" || std::string(f.metavar) == "N..."](
                       Config&, const std::vector<std::string>& values) {
                     // Values are checked as upstream's argparse types check them.
                     if (numeric)
                       for (const std::string& v : values) parse_number<int64_t>(flag, v);
                     if (choices.empty() || values.empty()) return;
                     const std::string v = values.front();
                     const std::string padded = "|" + choices + "|";
                     MG_USER_CHECK(padded.find("|" + v + "|") != std::string::npos, flag, " takes ",
                                   choices, ", not '", v, "'");
                   },
                   none});
  }
  for (const NotYetFlag& f : t.not_yet) {
    const std::string flag = f.flag, what = f.what;
    out.push_back({flag, f.metavar, "not supported by megatron-cpp yet: " + what,
                   [flag, what](Config&, const std::vector<std::string>&) {
                     throw UsageError(not_yet_message(flag, what));
                   },
                   none});
  }
  for (const DefaultOnlyFlag& f : t.default_only) {
    const std::string flag = f.flag, accepted = f.accepted, what = f.what;
    out.push_back({flag, f.metavar,
                   accepted +
                       " (the default layout); other values are not supported by "
                       "megatron-cpp yet: " +
                       what,
                   [flag, accepted, what](Config&, const std::vector<std::string>& values) {
                     const std::string v = values.empty() ? accepted : values.front();
                     if (parse_number<int64_t>(flag, v) != parse_number<int64_t>(flag, accepted))
                       throw UsageError(not_yet_message(flag + " " + v, what));
                   },
                   none});
  }
  for (const RenamedFlag& f : t.renamed) {
    const std::string flag = f.flag, replacement = f.replacement;
    out.push_back({flag, f.metavar, "removed from Megatron-LM: use " + replacement,
                   [flag, replacement](Config&, const std::vector<std::string>&) {
                     throw UsageError(renamed_message(flag, replacement));
                   },
                   none});
  }
  return out;
}

}  // namespace mg
