// docs/architecture.md's module table as a test: every `#include "module/..."` under src/ must name a module
// the including one may use (the table's "may use" column, followed transitively), and the
// graph of modules must have no cycle. A new src/ folder must be added to the table here.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace mg {
namespace {

namespace fs = std::filesystem;
using Modules = std::set<std::string>;

// Each module and the modules it may use directly, in docs/architecture.md's order (arrows point down).
const std::vector<std::pair<std::string, Modules>>& may_use() {
  static const std::vector<std::pair<std::string, Modules>> table = {
      {"core", {}},
      {"tensor", {"core"}},
      {"backend", {"tensor"}},
      {"comm", {"tensor"}},
      {"parallel", {"comm"}},
      {"tensor_parallel", {"backend", "parallel"}},
      {"context_parallel", {"backend", "comm"}},
      {"moe", {"comm"}},
      {"layers", {"tensor_parallel", "context_parallel", "moe"}},
      {"model", {"layers"}},
      {"pipeline", {"model", "comm"}},
      {"distributed", {"comm"}},
      {"optim", {"distributed"}},
      {"text", {"core"}},
      {"tokenizer", {"text"}},
      {"data", {"tokenizer"}},
      {"checkpoint", {"model", "optim"}},
      {"train",
       {"core", "tensor", "backend", "comm", "parallel", "tensor_parallel", "layers", "model",
        "pipeline", "distributed", "optim", "data", "checkpoint"}},
      {"inference", {"model"}},
      {"serve", {"inference", "tokenizer"}},
      {"plan", {"train"}},  // memory: train/rank_memory.h; time: the schedule table
      {"cli",
       {"core", "tensor", "backend", "comm", "parallel", "tensor_parallel", "layers", "model",
        "pipeline", "distributed", "optim", "text", "tokenizer", "data", "checkpoint", "train",
        "inference", "serve", "plan"}},
  };
  return table;
}

// Edges the code has that the table does not list. Each still points down the table or
// sideways without a cycle; they predate this test and are not to grow. (The distributed
// optimizer lives in distributed/ and builds on optim/'s Optimizer; DP buckets and the
// optimizer read the model's parameter layout; generation loads checkpoints and tokenizes, and
// so does the server.)
const std::set<std::pair<std::string, std::string>>& known_exceptions() {
  static const std::set<std::pair<std::string, std::string>> edges = {
      {"distributed", "backend"},  {"distributed", "parallel"}, {"distributed", "model"},
      {"distributed", "optim"},    {"optim", "backend"},        {"optim", "model"},
      {"inference", "checkpoint"}, {"inference", "tokenizer"},  {"serve", "checkpoint"},
  };
  return edges;
}

// Which modules each module may include: its own, and everything reachable through may_use().
std::map<std::string, Modules> allowed() {
  std::map<std::string, Modules> direct(may_use().begin(), may_use().end());
  std::map<std::string, Modules> out;
  for (const auto& [m, uses] : direct) {
    Modules& reach = out[m];
    std::vector<std::string> todo(uses.begin(), uses.end());
    while (!todo.empty()) {
      const std::string u = todo.back();
      todo.pop_back();
      if (!reach.insert(u).second) continue;
      for (const std::string& v : direct.at(u)) todo.push_back(v);
    }
    reach.insert(m);
  }
  return out;
}

struct Include {
  std::string file;  // relative to the repository root
  int line;
  std::string from, to;  // modules
};

// Every quoted #include of a module header in src/ (a name without a folder is the including
// file's own module).
std::vector<Include> src_includes() {
  const fs::path root = fs::path(MG_SOURCE_DIR);
  const std::regex include_re(R"(^\s*#\s*include\s*"([^"/]+)/)");
  std::vector<Include> out;
  for (const auto& e : fs::recursive_directory_iterator(root / "src")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() ||
        (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".inc"))
      continue;
    const fs::path rel = fs::relative(e.path(), root);
    const std::string from = (++rel.begin())->string();  // src/<module>/...
    std::ifstream f(e.path());
    std::string text;
    int line = 0;
    std::smatch m;
    while (std::getline(f, text)) {
      ++line;
      if (std::regex_search(text, m, include_re)) out.push_back({rel.string(), line, from, m[1]});
    }
  }
  return out;
}

// The edges the module-boundary issue removed stay forbidden (so does anything else upward).
TEST(IncludeRules, TableForbidsTheRemovedEdges) {
  const auto ok = allowed();
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{{"tensor", "backend"},
                                                        {"backend", "comm"},
                                                        {"comm", "backend"},
                                                        {"parallel", "model"},
                                                        {"checkpoint", "train"}})
    EXPECT_FALSE(ok.at(from).count(to) || known_exceptions().count({from, to}))
        << from << " -> " << to;
}

TEST(IncludeRules, EveryModuleIsInTheTable) {
  const auto ok = allowed();
  for (const auto& e : fs::directory_iterator(fs::path(MG_SOURCE_DIR) / "src")) {
    if (!e.is_directory()) continue;
    EXPECT_TRUE(ok.count(e.path().filename().string()))
        << "src/" << e.path().filename().string()
        << "/ is not in the module table of tests/include_rules_test.cpp (docs/architecture.md's)";
  }
}

TEST(IncludeRules, IncludesPointDownTheTable) {
  const auto ok = allowed();
  const std::vector<Include> includes = src_includes();
  ASSERT_GT(includes.size(), 100u) << "no #include lines found under " << MG_SOURCE_DIR;
  for (const Include& i : includes) {
    if (!ok.count(i.to)) continue;  // not a module: a library header such as "nlohmann/json.hpp"
    ASSERT_TRUE(ok.count(i.from)) << i.file;
    EXPECT_TRUE(ok.at(i.from).count(i.to) || known_exceptions().count({i.from, i.to}))
        << i.file << ":" << i.line << ": " << i.from << "/ includes " << i.to
        << "/, which docs/architecture.md's module table does not let it use";
  }
}

TEST(IncludeRules, ModulesFormNoCycle) {
  std::map<std::string, Modules> graph;
  std::map<std::pair<std::string, std::string>, std::string> where;
  for (const Include& i : src_includes()) {
    if (i.from == i.to || !allowed().count(i.to)) continue;
    graph[i.from].insert(i.to);
    where.emplace(std::make_pair(i.from, i.to), i.file + ":" + std::to_string(i.line));
  }
  // Depth-first search; a back edge closes a cycle, reported with one include per edge.
  std::map<std::string, int> state;  // 0 unvisited, 1 on the stack, 2 done
  std::vector<std::string> stack;
  std::function<void(const std::string&)> visit = [&](const std::string& m) {
    state[m] = 1;
    stack.push_back(m);
    const auto edges = graph.find(m);
    if (edges != graph.end())
      for (const std::string& n : edges->second) {
        if (state[n] == 1) {
          std::string cycle;
          auto it = std::find(stack.begin(), stack.end(), n);
          for (; it != stack.end(); ++it) {
            const std::string& next = it + 1 != stack.end() ? *(it + 1) : n;
            cycle += "\n  " + *it + " -> " + next + " (" + where[{*it, next}] + ")";
          }
          ADD_FAILURE() << "include cycle between modules:" << cycle;
        } else if (state[n] == 0) {
          visit(n);
        }
      }
    stack.pop_back();
    state[m] = 2;
  };
  for (const auto& [m, uses] : graph)
    if (state[m] == 0) visit(m);
}

}  // namespace
}  // namespace mg
