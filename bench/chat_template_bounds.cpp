// Chat-template rendering cost (text/jinja.h) with serve's output bound (64 MiB): real
// templates over a long agentic conversation, and hostile templates that the work budget must
// stop. Each case renders in a child process, so its peak memory is its own (wait4's maxrss).
//   chat_template_bounds                 every case: wall seconds, peak MB, result
//   chat_template_bounds --dump N FILE   case N as jinja_reference.py's input (the Jinja2 side
//                                        of bench/chat_template_bounds.sh)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/jinja.h"

namespace {

using mg::jinja::Value;

struct Case {
  std::string name, tmpl;
  bool real;  // a template Jinja2 renders too
};

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// 4000 turns of user / tool / assistant, and twenty tools of about 1 KB each.
Value conversation() {
  Value messages = Value::array(), tools = Value::array();
  for (int i = 0; i < 4000; ++i)
    messages.push_back(
        {{"role", i % 3 == 0   ? "user"
                  : i % 3 == 1 ? "tool"
                               : "assistant"},
         {"content", mg::str_cat(" turn ", i, " ", std::string(size_t(i % 200), 'x'))}});
  for (int i = 0; i < 20; ++i)
    tools.push_back(
        {{"type", "function"},
         {"function",
          {{"name", mg::str_cat("tool_", i)}, {"description", std::string(1000, 'd')}}}});
  return {{"messages", messages},
          {"tools", tools},
          {"add_generation_prompt", true},
          {"bos_token", "<s>"}};
}

std::vector<Case> cases() {
  return {
      {"look-back over 4000 turns + 20 tools",
       "{%- for message in messages %}{%- if message.role == 'tool' %}{%- if loop.index0 == 0 or "
       "messages[loop.index0 - 1].role != 'tool' %}<tools>{% endif %}{{ message.content }}{%- if "
       "loop.last or messages[loop.index0 + 1].role != 'tool' %}</tools>{% endif %}{%- else %}<{{ "
       "message.role }}>{{ message.content | trim }}{% if messages | length > 1 and tools %}*{% endif "
       "%}{%- endif %}{%- endfor %}",
       true},
      {"Llama 3 over 4000 turns",
       "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
       "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
       "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
       "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
       "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
       true},
      {"a list doubling in a loop",
       "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = ns.x + [ns.x] %}{% endfor %}",
       false},
      {"10^6 x 10^6 nested loops",
       "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", false},
      {"x in a 10^6 list, per item",
       "{% set r = range(1000000) %}{% for i in r %}{% if i in r %}{% endif %}{% endfor %}", false},
      {"a 60 MB string split into characters",
       "{% set s = 'x' * 60000000 %}{{ s | list | length }}", false},
      {"a 60 MB string split on every byte",
       "{% set s = ',' * 60000000 %}{{ s.split(',') | length }}", false},
      {"tojson with indent 3000", "{{ range(100000) | list | tojson(indent=3000) }}", false},
      {"190 nested nots, 10^6 times",
       "{% for i in range(1000) %}{% for j in range(1000) %}{% if " + repeat("not ", 190) +
           "u %}{% endif %}{% endfor %}{% endfor %}",
       false},
      {"150 lookups under 97 loops, 10^6 times",
       repeat("{% for a in [1] %}", 97) + "{% for i in range(999999) %}{% if u" +
           repeat(" or u", 149) + " %}{% endif %}{% endfor %}" + repeat("{% endfor %}", 97),
       false},
  };
}

std::string run(const Case& c, const Value& vars) {
  try {
    const std::string out = mg::jinja::render(mg::jinja::parse(c.tmpl), vars, size_t(64) << 20);
    return mg::str_cat("rendered ", out.size(), " bytes");
  } catch (const mg::jinja::TemplateError& e) {
    return e.what();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Case> all = cases();
  const Value vars = conversation();
  if (argc == 4 && std::string(argv[1]) == "--dump") {
    const Case& c = all.at(std::stoul(argv[2]));
    std::ofstream(argv[3])
        << Value{{"cases", Value::array({{{"template", c.tmpl}, {"vars", vars}}})}}.dump();
    return 0;
  }
  std::printf("%-3s %-42s %8s %8s  %s\n", "#", "case", "seconds", "peak MB", "result");
  for (size_t i = 0; i < all.size(); ++i) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string r = run(all[i], vars);
      if (write(fds[1], r.data(), r.size()) < 0) _exit(1);
      _exit(0);
    }
    close(fds[1]);
    std::string result;
    char buf[512];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) result.append(buf, size_t(n));
    close(fds[0]);
    int status = 0;
    rusage usage{};
    wait4(pid, &status, 0, &usage);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) result = "CRASHED";
    std::printf("%-3zu %-42s %8.3f %8.1f  %s%s\n", i, all[i].name.c_str(), seconds,
                usage.ru_maxrss / 1024.0, result.substr(0, 70).c_str(),
                all[i].real ? "  (Jinja2 renders it)" : "");
  }
}
