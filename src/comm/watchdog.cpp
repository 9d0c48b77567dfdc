// The bounded waits and the liveness census of comm/watchdog.h. The census runs on its own
// duplicate of MPI_COMM_WORLD, so its probes never match a training message: a timed-out rank
// probes every other rank; each rank answers from inside its next poll (a rank in a long
// computation answers late, a stopped one never); after census_grace() the rank reports.
#include "comm/watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/log.h"

namespace mg {

namespace {

using Clock = std::chrono::steady_clock;

double g_timeout = 600.0;             // Megatron's --distributed-timeout-minutes default, 10
const WaitSite* g_current = nullptr;  // the wait this rank is in (probes are answered with it)
MPI_Comm g_census = MPI_COMM_NULL;
GroupInfo g_world;
TimeoutHandler g_handler = nullptr;

// A wait polls as MPI_Wait does (busy: Open MPI yields inside its progress calls when ranks
// outnumber cores), so the steady state costs what it cost; it never sleeps, since an MPI
// non-blocking collective advances only inside MPI calls (a large one fragment by fragment).
// Every 64th poll reads the clock; past 1 ms the wait also answers liveness probes.
constexpr double kProbeAfter = 1e-3;
constexpr uint32_t kPollsPerCheck = 64;
// A probe carries the tag its answer must use, new for every census: a late answer to an
// earlier census can never be taken for an answer to this one.
constexpr int kProbeTag = 1, kFirstAnswerTag = 2, kAnswerTags = 30000;

// One rank's answer to a census probe.
struct Answer {
  int32_t timed_out = 0;  // 1: this rank's own wait timed out
  float waited = 0;       // seconds in its current wait
  char what[240] = {};    // the wait, described
};
// Answers in flight (MPI may read them until their sends complete; the process ends soon).
std::deque<Answer> g_sent;
bool g_timed_out = false;
int g_first_prober = INT_MAX;  // the lowest rank that probed this one (it timed out too)

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Answers every probe that has arrived with what this rank waits on now.
void answer_probes(double waited) {
  if (g_census == MPI_COMM_NULL) return;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kProbeTag, g_census, &flag, &st);
    if (!flag) return;
    int answer_tag = 0;
    MPI_Recv(&answer_tag, 1, MPI_INT, st.MPI_SOURCE, kProbeTag, g_census, MPI_STATUS_IGNORE);
    g_first_prober = std::min(g_first_prober, st.MPI_SOURCE);
    Answer& a = g_sent.emplace_back();
    a.timed_out = g_timed_out ? 1 : 0;
    a.waited = float(waited);
    const std::string what = g_current ? g_current->describe() : std::string("(between waits)");
    std::snprintf(a.what, sizeof(a.what), "%s", what.c_str());
    MPI_Request r;
    MPI_Isend(&a, int(sizeof(Answer)), MPI_BYTE, st.MPI_SOURCE, answer_tag, g_census, &r);
    MPI_Request_free(&r);
  }
}

// The census: every other rank's answer, or none within the grace (or until all answered).
std::vector<std::optional<Answer>> run_census(double waited) {
  int me = 0, n = 1;
  MPI_Comm_rank(g_census, &me);
  MPI_Comm_size(g_census, &n);
  std::vector<Answer> got(static_cast<size_t>(n));
  std::vector<MPI_Request> reqs(size_t(n), MPI_REQUEST_NULL);
  static int censuses = 0;
  static int answer_tag;  // the probes' payload (MPI may read it until they are delivered)
  answer_tag = kFirstAnswerTag + censuses++ % kAnswerTags;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    MPI_Request s;
    MPI_Isend(&answer_tag, 1, MPI_INT, r, kProbeTag, g_census, &s);
    MPI_Request_free(&s);
    MPI_Irecv(&got[size_t(r)], int(sizeof(Answer)), MPI_BYTE, r, answer_tag, g_census,
              &reqs[size_t(r)]);
  }
  const Clock::time_point start = Clock::now();
  std::vector<std::optional<Answer>> out(static_cast<size_t>(n));
  int missing = n - 1;
  while (missing > 0 && since(start) < census_grace()) {
    for (int r = 0; r < n; ++r) {
      if (reqs[size_t(r)] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      MPI_Test(&reqs[size_t(r)], &flag, MPI_STATUS_IGNORE);
      if (flag) {
        out[size_t(r)] = got[size_t(r)];
        --missing;
      }
    }
    answer_probes(waited + since(start));
    sleep_seconds(1e-3);
  }
  // Unanswered receives are withdrawn (their buffers go away with this frame).
  for (MPI_Request& r : reqs)
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  return out;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

// "rank 3", "ranks [0-3,8]".
std::string ranks_text(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? str_cat("rank ", ranks[0]) : "ranks " + format_ranks(ranks);
}

// The report: this rank's wait, the ranks that did not answer, what the others wait on.
std::string census_report(int me, double waited, const WaitSite& site,
                          const std::vector<std::optional<Answer>>& answers) {
  std::vector<int> silent;
  // Ranks grouped by what they wait on (answers alike differ only in their seconds).
  std::map<std::pair<bool, std::string>, std::pair<std::vector<int>, double>> waiting;
  for (int r = 0; r < int(answers.size()); ++r) {
    if (r == me) continue;
    if (!answers[size_t(r)]) {
      silent.push_back(r);
      continue;
    }
    const Answer& a = *answers[size_t(r)];
    auto& entry = waiting[{a.timed_out != 0, std::string(a.what)}];
    entry.first.push_back(r);
    entry.second = std::max(entry.second, double(a.waited));
  }
  std::string out =
      str_cat("megatron: error: rank ", me, " timed out after ", seconds_text(waited),
              " (--distributed-timeout-minutes ", comm_timeout() / 60.0, ") in ", site.describe());
  if (!silent.empty())
    out += str_cat("\n  not responding: ", ranks_text(silent),
                   " (stopped, stuck, or computing for longer than ", seconds_text(census_grace()),
                   ")");
  else if (answers.size() > 1)
    out +=
        "\n  every rank answered: a deadlock (each waits on another), or a rank's "
        "operation does not match its peers'";
  int lines = 0;
  for (const auto& [what, entry] : waiting) {
    if (++lines > 16) {
      out += str_cat("\n  ... and ", waiting.size() - 16, " more kinds of wait");
      break;
    }
    const char* state = what.first               ? "timed out after "
                        : entry.first.size() > 1 ? "waiting up to "
                                                 : "waiting ";
    out += str_cat("\n  ", ranks_text(entry.first), ": ", state, seconds_text(entry.second), " in ",
                   what.second);
  }
  out += str_cat("\n  ending the job (exit code ", kCommTimeoutExitCode,
                 "); if a rank was only slow, raise --distributed-timeout-minutes");
  return out;
}

[[noreturn]] void end_job(const std::string& report) {
  if (g_handler) {
    g_handler(report);
    g_timed_out = false;
    g_first_prober = INT_MAX;
    throw std::runtime_error(report);  // a test handler returned: the caller sees the timeout
  }
  log_error(report);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, kCommTimeoutExitCode);
  std::_Exit(kCommTimeoutExitCode);
}

}  // namespace

void set_comm_timeout(double seconds) {
  MG_CHECK(std::isfinite(seconds) && seconds > 0, "communication timeout ", seconds, " s");
  g_timeout = seconds;
}
double comm_timeout() { return g_timeout; }
double census_grace() { return std::clamp(0.1 * g_timeout, 1.0, 30.0); }

std::string format_ranks(const std::vector<int>& ranks) {
  std::string out = "[";
  int items = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items++ == 8) {
      out += str_cat(",... (", ranks.size(), " ranks)");
      break;
    }
    if (i > 0) out += ",";
    out += j > i + 1 ? str_cat(ranks[i], "-", ranks[j])
           : j == i  ? str_cat(ranks[i])
                     : str_cat(ranks[i], ",", ranks[j]);
    i = j + 1;
  }
  return out + "]";
}

std::string WaitSite::describe() const {
  const std::string where = group
                                ? str_cat(group->name, " group ", format_ranks(group->world_ranks))
                                : std::string("group");
  if (peers.empty()) return str_cat(op, " over the ", where);
  std::string out;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (!pending.empty() && !pending[i]) continue;
    const int p = peers[i].peer;
    const int world =
        group && p < int(group->world_ranks.size()) ? group->world_ranks[size_t(p)] : p;
    out += str_cat(out.empty() ? "" : " + ", peers[i].is_send ? "send to rank " : "recv from rank ",
                   world);
  }
  return str_cat(out, " (", where, ")");
}

BoundedWait::BoundedWait(WaitSite& site) : site_(site), outer_(g_current), start_(Clock::now()) {
  g_current = &site_;
}
BoundedWait::~BoundedWait() { g_current = outer_; }

double BoundedWait::seconds() const { return since(start_); }

bool BoundedWait::pause() {
  if (++polls_ % kPollsPerCheck == 0) {
    const double t = seconds();
    if (t >= kProbeAfter) answer_probes(t);
    if (t > g_timeout) return true;
  }
  return false;
}

void BoundedWait::timed_out() { report_timeout(site_, seconds()); }

void report_timeout(const WaitSite& site, double waited) {
  struct Current {  // what the census answers say of this rank
    const WaitSite* outer = g_current;
    ~Current() { g_current = outer; }
  } current;
  g_current = &site;
  int me = 0;
  if (g_census == MPI_COMM_NULL)
    end_job(str_cat("megatron: error: timed out after ", seconds_text(waited), " in ",
                    site.describe()));
  MPI_Comm_rank(g_census, &me);
  g_timed_out = true;
  const auto answers = run_census(waited);
  // One full report per job: a rank defers to a lower rank that timed out as well (it
  // answered so, or probed this rank: only a timed-out rank probes).
  int reporter = std::min(me, g_first_prober);
  for (int r = 0; r < reporter; ++r)
    if (answers[size_t(r)] && answers[size_t(r)]->timed_out) {
      reporter = r;
      break;
    }
  if (reporter != me) {
    log_error(str_cat("megatron: error: rank ", me, " timed out after ", seconds_text(waited),
                      " in ", site.describe(), "; rank ", reporter, " reports"));
    // Its report ends the job; should it not, this rank reports in its place.
    const Clock::time_point start = Clock::now();
    while (since(start) < census_grace()) {
      answer_probes(waited + since(start));
      sleep_seconds(1e-3);
    }
  }
  end_job(census_report(me, waited, site, answers));
}

void watchdog_start() {
  if (g_census != MPI_COMM_NULL) return;
  MPI_Comm_dup(MPI_COMM_WORLD, &g_census);
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  g_world.name = "world";
  for (int r = 0; r < n; ++r) g_world.world_ranks.push_back(r);
}

void watchdog_finish() {
  if (g_census == MPI_COMM_NULL) return;
  MPI_Request req;
  MPI_Ibarrier(g_census, &req);
  int done = 0;
  MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  if (!done) {
    WaitSite site{"barrier before exit", &g_world, {}, {}};
    BoundedWait w(site);
    while (!done) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (!done && w.pause()) w.timed_out();
    }
  }
  MPI_Comm_free(&g_census);
}

const GroupInfo& world_group_info() { return g_world; }

void set_timeout_handler(TimeoutHandler handler) { g_handler = handler; }

}  // namespace mg
