#include "plan/planner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "parallel/rank_grid.h"

namespace mg {

namespace {

template <typename... Args>
std::string fmt(const char* f, Args... args) {
  std::string out(size_t(std::snprintf(nullptr, 0, f, args...)), '\0');
  std::snprintf(out.data(), out.size() + 1, f, args...);
  return out;
}

std::vector<int> divisors(int64_t n, int64_t cap) {
  std::vector<int> d;
  for (int64_t i = 1; i <= std::min(n, cap); ++i)
    if (n % i == 0) d.push_back(int(i));
  return d;
}

// The flags a layout sets (value-taking, then switches): replaced in train_command.
const std::set<std::string> kLayoutValueFlags = {"--tensor-model-parallel-size",
                                                 "--pipeline-model-parallel-size",
                                                 "--context-parallel-size",
                                                 "--expert-model-parallel-size",
                                                 "--expert-tensor-parallel-size",
                                                 "--num-layers-per-virtual-pipeline-stage",
                                                 "--num-virtual-stages-per-pipeline-rank",
                                                 "--micro-batch-size",
                                                 "--recompute-granularity",
                                                 "--recompute-method",
                                                 "--recompute-num-layers"};
const std::set<std::string> kLayoutSwitches = {"--sequence-parallel", "--use-distributed-optimizer",
                                               "--recompute-activations"};

std::string gib(int64_t bytes) { return format_bytes(bytes); }

}  // namespace

Plan make_plan(TrainConfig cfg, int world, const DeviceProfile& profile) {
  MG_USER_CHECK(world >= 1, "--num-gpus must be at least 1, not ", world);
  // The step-time model visits every layer: bounded here, far beyond any model that fits.
  MG_USER_CHECK(cfg.model.num_layers <= 1000000, "--num-layers ", cfg.model.num_layers,
                ": plan models up to a million layers");
  cfg.finalize_and_validate(world);
  Plan plan;
  plan.world = world;
  const RankGrid grid = cfg.rank_grid();
  plan.with_host = cfg.device == "cpu";
  const bool host = plan.with_host;
  for (int r = 0; r < grid.pp; ++r) {
    RankGrid::Coord c{};
    c.pp = r;
    StagePlan s{r, grid.rank_of(c), rank_memory(cfg, grid.rank_of(c))};
    const int64_t total = s.memory.total(host);
    if (total > plan.peak_bytes) {
      plan.peak_bytes = total;
      plan.peak_stage = r;
    }
    plan.stages.push_back(s);
  }
  plan.fits = plan.peak_bytes <= profile.memory_bytes;
  plan.step = estimate_step(cfg, profile);
  plan.cfg = std::move(cfg);
  return plan;
}

SearchResult search_layouts(const TrainConfig& base, int world, const DeviceProfile& profile,
                            int top_n) {
  const auto start = std::chrono::steady_clock::now();
  // Layouts are compared at one batch: without the flag each would get its own (micro-batch
  // x DP, train's default).
  MG_USER_CHECK(base.global_batch_size > 0,
                "--search needs --global-batch-size: the batch "
                "every layout is compared at");
  SearchResult r;
  const GPTConfig& m = base.model;
  const bool moe = m.num_experts > 0;
  std::vector<Plan> fitting;
  for (int tp : divisors(world, profile.devices_per_node))
    for (int pp : divisors(world / tp, m.num_layers))
      for (int cp : divisors(world / (tp * pp), 8))
        for (int ep : moe ? divisors(m.num_experts, world / (tp * pp * cp)) : std::vector<int>{1}) {
          std::vector<int> vps = {1};
          if (pp > 1)
            for (int v : divisors(m.num_layers / pp, 8))
              if (v > 1) vps.push_back(v);
          for (int v : vps)
            for (int64_t mbs : {1, 2, 4, 8})
              for (bool recompute : {false, true})
                for (bool distopt : {false, true}) {
                  TrainConfig c = base;
                  ParallelConfig& p = c.parallel;
                  p.tensor_model_parallel_size = tp;
                  p.pipeline_model_parallel_size = pp;
                  p.context_parallel_size = cp;
                  p.expert_model_parallel_size = ep;
                  p.expert_tensor_parallel_size = 0;
                  p.sequence_parallel = tp > 1;
                  p.num_layers_per_virtual_pipeline_stage = 0;
                  p.num_virtual_stages_per_pipeline_rank = v > 1 ? v : 0;
                  c.micro_batch_size = mbs;
                  c.recompute_activations = false;
                  c.recompute_granularity = recompute ? "full" : "";
                  c.recompute_method = recompute ? "uniform" : "";
                  c.recompute_num_layers = recompute ? 1 : 0;
                  c.use_distributed_optimizer = distopt;
                  ++r.candidates;
                  try {
                    Plan plan = make_plan(std::move(c), world, profile);
                    if (!plan.fits) {
                      ++r.too_large;
                      continue;
                    }
                    fitting.push_back(std::move(plan));
                  } catch (const UsageError&) {
                    ++r.invalid;
                  }
                }
        }
  std::stable_sort(fitting.begin(), fitting.end(), [](const Plan& a, const Plan& b) {
    return a.step.tokens_per_second > b.step.tokens_per_second;
  });
  if (int64_t(fitting.size()) > top_n) fitting.resize(size_t(top_n));
  r.top = std::move(fitting);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string train_command(const Plan& plan, const std::vector<std::string>& user_args) {
  std::string cmd = str_cat("mpirun -np ", plan.world, " megatron train");
  for (size_t i = 0; i < user_args.size(); ++i) {
    const std::string& a = user_args[i];
    const std::string name = a.substr(0, a.find('='));
    if (kLayoutSwitches.count(name)) continue;
    if (kLayoutValueFlags.count(name)) {
      if (a.find('=') == std::string::npos && i + 1 < user_args.size()) ++i;
      continue;
    }
    cmd += " " + (a.find_first_of(" \t'\"") == std::string::npos ? a : "'" + a + "'");
  }
  const TrainConfig& c = plan.cfg;
  const ParallelConfig& p = c.parallel;
  cmd +=
      str_cat(" --tensor-model-parallel-size ", p.tp(), " --pipeline-model-parallel-size ", p.pp());
  if (p.virtual_stages > 1)
    cmd += str_cat(" --num-virtual-stages-per-pipeline-rank ", p.virtual_stages);
  if (p.cp() > 1) cmd += str_cat(" --context-parallel-size ", p.cp());
  if (p.ep() > 1) cmd += str_cat(" --expert-model-parallel-size ", p.ep());
  if (p.sequence_parallel) cmd += " --sequence-parallel";
  cmd += str_cat(" --micro-batch-size ", c.micro_batch_size);
  if (c.recompute_granularity == "full")
    cmd += str_cat(" --recompute-granularity full --recompute-method ", c.recompute_method,
                   " --recompute-num-layers ", c.recompute_num_layers);
  if (c.use_distributed_optimizer) cmd += " --use-distributed-optimizer";
  return cmd;
}

std::string plan_report(const Plan& plan, const DeviceProfile& profile) {
  const TrainConfig& c = plan.cfg;
  const bool host = plan.with_host;
  std::string out = str_cat(
      "plan: ", c.model.num_parameters(), " parameters on ", plan.world, " x ", profile.name, " (",
      profile.description, ")\n", "layout: ", c.parallel.layout_string(plan.world),
      c.parallel.sequence_parallel ? " (sequence parallel)" : "",
      c.parallel.virtual_stages > 1 ? str_cat(", ", c.parallel.virtual_stages, " virtual stages")
                                    : "",
      "; micro-batch ", c.micro_batch_size, " x ", c.num_micro_batches(),
      " per DP rank, global batch ", c.global_batch_size, " x ", c.model.seq_length, " tokens",
      c.recompute_granularity == "full" ? "; full recompute" : "",
      c.use_distributed_optimizer ? "; distributed optimizer" : "", "; ",
      dtype_name(c.model_dtype()), "\n\n");
  out += "memory per rank (bytes; exact for what megatron-cpp allocates):\n";
  out += fmt("  %-6s %-6s %16s %16s %16s %16s %16s  %s\n", "stage", "rank", "params", "grads",
             "optimizer", "activations", "total", "");
  for (const StagePlan& s : plan.stages) {
    const RankMemory& m = s.memory;
    out += fmt("  %-6d %-6d %16lld %16lld %16lld %16lld %16lld  %s\n", s.stage, s.world_rank,
               (long long)m.params, (long long)m.grads, (long long)m.optimizer,
               (long long)m.activations, (long long)m.total(host), gib(m.total(host)).c_str());
  }
  const RankMemory& peak = plan.stages[size_t(plan.peak_stage)].memory;
  std::vector<std::pair<std::string, int64_t>> terms = {{"params", peak.params},
                                                        {"grads", peak.grads},
                                                        {"optimizer", peak.optimizer},
                                                        {"activations", peak.activations}};
  if (host) terms.push_back({"data indices", peak.data + peak.final_params});
  std::sort(terms.begin(), terms.end(), [](auto& a, auto& b) { return a.second > b.second; });
  out += str_cat("  ", plan.fits ? "fits" : "DOES NOT FIT", ": stage ", plan.peak_stage, " needs ",
                 gib(plan.peak_bytes), " of ", gib(profile.memory_bytes),
                 " (largest: ", terms[0].first, " ", gib(terms[0].second), ", ", terms[1].first,
                 " ", gib(terms[1].second), ")\n\n");
  const StepEstimate& e = plan.step;
  out +=
      fmt("step time: %.4g s per iteration | %.1f tokens/s | %.1f TFLOP/s per GPU (model "
          "FLOPs, full s^2 attention) | MFU %.1f%% | pipeline bubble %.1f%%\n",
          e.iteration_seconds, e.tokens_per_second, e.model_tflops_per_gpu, 100 * e.mfu,
          100 * e.bubble_fraction);
  for (const auto& [name, seconds] : e.parts.named())
    if (seconds > 0)
      out += fmt("  %-16s %10.4g s  %5.1f%%\n", name.c_str(), seconds,
                 100 * seconds / e.iteration_seconds);
  return out;
}

namespace {
nlohmann::json plan_object(const Plan& plan) {
  const bool host = plan.with_host;
  nlohmann::json stages = nlohmann::json::array();
  for (const StagePlan& s : plan.stages)
    stages.push_back({{"stage", s.stage},
                      {"world_rank", s.world_rank},
                      {"params", s.memory.params},
                      {"grads", s.memory.grads},
                      {"optimizer", s.memory.optimizer},
                      {"activations", s.memory.activations},
                      {"data_indices", s.memory.data},
                      {"total", s.memory.total(host)}});
  nlohmann::json parts = nlohmann::json::object();
  for (const auto& [name, seconds] : plan.step.parts.named()) parts[name] = seconds;
  const ParallelConfig& p = plan.cfg.parallel;
  return {{"world", plan.world},
          {"layout",
           {{"tp", p.tp()},
            {"pp", p.pp()},
            {"vp", p.virtual_stages},
            {"cp", p.cp()},
            {"ep", p.ep()},
            {"dp", plan.cfg.data_parallel_size},
            {"sequence_parallel", p.sequence_parallel},
            {"micro_batch_size", plan.cfg.micro_batch_size},
            {"recompute", plan.cfg.recompute_granularity},
            {"distributed_optimizer", plan.cfg.use_distributed_optimizer}}},
          {"memory",
           {{"stages", stages},
            {"peak_bytes", plan.peak_bytes},
            {"peak_stage", plan.peak_stage},
            {"fits", plan.fits}}},
          {"step",
           {{"iteration_seconds", plan.step.iteration_seconds},
            {"tokens_per_second", plan.step.tokens_per_second},
            {"model_tflops_per_gpu", plan.step.model_tflops_per_gpu},
            {"mfu", plan.step.mfu},
            {"bubble_fraction", plan.step.bubble_fraction},
            {"parts", parts}}}};
}
}  // namespace

std::string plan_json(const Plan& plan, const DeviceProfile& profile) {
  nlohmann::json j = plan_object(plan);
  j["profile"] = profile.name;
  j["parameters"] = plan.cfg.model.num_parameters();
  return j.dump(2) + "\n";
}

std::string search_report(const SearchResult& r, const DeviceProfile& profile,
                          const std::vector<std::string>& user_args) {
  std::string out =
      fmt("search: %lld layouts, %lld refused by train's checks, %lld over %s's "
          "memory, %zu shown; %.2f s\n",
          (long long)r.candidates, (long long)r.invalid, (long long)r.too_large,
          profile.name.c_str(), r.top.size(), r.seconds);
  int i = 0;
  for (const Plan& p : r.top)
    out +=
        fmt("\n#%d  %.1f tokens/s  %.1f TFLOP/s per GPU  MFU %.1f%%  %.4g s/iter  peak %s "
            "(stage %d)\n  %s\n",
            ++i, p.step.tokens_per_second, p.step.model_tflops_per_gpu, 100 * p.step.mfu,
            p.step.iteration_seconds, gib(p.peak_bytes).c_str(), p.peak_stage,
            train_command(p, user_args).c_str());
  if (r.top.empty())
    out += r.too_large > 0
               ? "no valid layout fits; add devices, or lower --seq-length / the model's size\n"
               : "every layout was refused by train's checks (the device count must split into "
                 "TP x CP x PP x DP with the heads, layers and --global-batch-size divisible: "
                 "see `megatron plan` without --search for the reason)\n";
  return out;
}

std::string search_json(const SearchResult& r, const DeviceProfile& profile,
                        const std::vector<std::string>& user_args) {
  nlohmann::json top = nlohmann::json::array();
  for (const Plan& p : r.top) {
    nlohmann::json j = plan_object(p);
    j["command"] = train_command(p, user_args);
    top.push_back(j);
  }
  return nlohmann::json{{"profile", profile.name}, {"candidates", r.candidates},
                        {"invalid", r.invalid},    {"too_large", r.too_large},
                        {"seconds", r.seconds},    {"top", top}}
             .dump(2) +
         "\n";
}

}  // namespace mg
