// One option table per subcommand: --help text, parsing and per-flag type checks are all
// generated from it, so they cannot drift. Semantic validation lives next to each config.
// A metavar ending in "..." takes every following argument up to the next --flag.
#pragma once
#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/parse_number.h"

namespace mg {

template <typename Config>
struct Option {
  std::string flag;     // "--hidden-size"
  std::string metavar;  // "N"; empty for on/off switches
  std::string help;
  std::function<void(Config&, const std::vector<std::string>&)> set;
  std::function<std::string(const Config&)> show;  // current value, for --help defaults
};

namespace cli_detail {

template <typename T>
T parse_value(const std::string& flag, const std::string& text) {
  if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else {
    return parse_number<T>(flag, text);
  }
}

template <typename T>
std::string show_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "on" : "off";
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
    return s;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return "";  // unset: a value no flag can give (parse_number refuses nan)
    std::ostringstream os;
    os << v;
    return os.str();
  } else {
    std::ostringstream os;
    os << v;
    return os.str();
  }
}

}  // namespace cli_detail

// An option bound to the field `access(config)` returns; its type decides the parsing.
template <typename Config, typename Access>
Option<Config> valued(std::string flag, std::string metavar, std::string help, Access access) {
  using T = std::remove_reference_t<decltype(access(std::declval<Config&>()))>;
  return {flag, std::move(metavar), std::move(help),
          [=](Config& c, const std::vector<std::string>& values) {
            if constexpr (std::is_same_v<T, std::vector<std::string>>) {
              access(c) = values;
            } else {
              access(c) = cli_detail::parse_value<T>(flag, values.at(0));
            }
          },
          [=](const Config& c) { return cli_detail::show_value(access(const_cast<Config&>(c))); }};
}

template <typename Config, typename Access>
Option<Config> on_off(std::string flag, std::string help, Access access) {
  return {flag, "", std::move(help),
          [=](Config& c, const std::vector<std::string>&) { access(c) = true; },
          [=](const Config& c) { return cli_detail::show_value(access(const_cast<Config&>(c))); }};
}

// Another command's options applied to a member of this command's config (`serve` takes every
// `train` flag): the same flags, help and parsing, on access(config).
template <typename Config, typename Inner, typename Access>
std::vector<Option<Config>> options_of(const std::vector<Option<Inner>>& inner, Access access) {
  std::vector<Option<Config>> out;
  for (const Option<Inner>& o : inner)
    out.push_back(
        {o.flag, o.metavar, o.help,
         [set = o.set, access](Config& c, const std::vector<std::string>& v) { set(access(c), v); },
         [show = o.show, access](const Config& c) {
           return show(access(const_cast<Config&>(c)));
         }});
  return out;
}

// Parses argv-style arguments (without the subcommand). Throws UsageError naming the flag.
// `given`, when not null, receives each flag that appeared.
template <typename Config>
Config parse_args(const std::vector<Option<Config>>& table, const std::vector<std::string>& args,
                  const std::string& command, std::set<std::string>* given = nullptr) {
  Config cfg;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::vector<std::string> values;
    bool inline_value = false;
    if (auto eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      values.push_back(flag.substr(eq + 1));
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    const Option<Config>* opt = nullptr;
    for (const auto& o : table)
      if (o.flag == flag) opt = &o;
    MG_USER_CHECK(opt != nullptr, flag.starts_with("--") ? "unknown flag " : "unexpected argument ",
                  flag, " (see `megatron ", command, " --help`)");
    if (opt->metavar.empty()) {
      MG_USER_CHECK(!inline_value, flag, " takes no value");
    } else if (!inline_value) {
      const bool many = opt->metavar.ends_with("...");
      while (i + 1 < args.size() && !args[i + 1].starts_with("--")) {
        values.push_back(args[++i]);
        if (!many) break;
      }
      MG_USER_CHECK(!values.empty(), flag, " needs a value (", opt->metavar, ")");
    }
    opt->set(cfg, values);
    if (given) given->insert(flag);
  }
  return cfg;
}

template <typename Config>
std::string help_text(const std::vector<Option<Config>>& table, const std::string& header) {
  std::ostringstream os;
  os << header << "\n\n";
  const Config defaults;
  for (const auto& o : table) {
    std::string left = "  " + o.flag + (o.metavar.empty() ? "" : " " + o.metavar);
    if (left.size() < 34) left.resize(34, ' ');
    else left += "  ";
    os << left << o.help;
    const std::string def = o.metavar.empty() ? "" : o.show(defaults);
    if (!def.empty()) os << " [default: " << def << "]";
    os << "\n";
  }
  return os.str();
}

}  // namespace mg
