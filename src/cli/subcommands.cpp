// The subcommands' table (subcommands.h) and each one's run function: parse its option table
// (cli/*_options.cpp), then hand the typed config to the module that does the work.
#include "cli/subcommands.h"

#include <cstdio>
#include <optional>
#include <set>

#include "backend/dispatch.h"
#include "cli/commands.h"
#include "comm/rank_threads.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/process_groups.h"
#include "plan/plan_command.h"
#include "train/checkpoint_model.h"
#include "train/rank_memory.h"
#include "train/trainer.h"

namespace mg {

namespace {

int train(const std::vector<std::string>& args, const MpiSession* session) {
  const MpiSession& mpi = *session;
  std::set<std::string> given;
  TrainConfig cfg = parse_train_args(args, &given);
  cfg.argv = args;
  // --load with a checkpoint: model flags not given come from it.
  const bool model_from_ckpt = model_from_checkpoint(cfg, given);
  if (const int64_t v = tokenizer_vocab_size(cfg.tokenizer, cfg.model.vocab_size,
                                             given.count("--vocab-size") > 0))
    cfg.model.vocab_size = train_vocab_size(cfg, v, model_from_ckpt, given);
  const std::string warning = cfg.finalize_and_validate(mpi.world_size());
  if (!warning.empty()) log_line(warning);
  const RankGrid grid = cfg.rank_grid();
  set_comm_timeout(cfg.distributed_timeout_minutes * 60.0);
  // Outside the try: the handler below aborts while the communicators still exist (tearing
  // an NCCL group down while the other ranks sit in its collectives could hang).
  std::optional<ProcessGroups> groups;
  try {
    // The node's cores divided among its ranks (OMP_NUM_THREADS wins). Every
    // rank calls it (local_size() is collective while MPI runs); logged once the run starts.
    const RankThreads threads = set_rank_threads();
    // A GPU run selects its GPU before any NCCL group exists.
    if (cfg.device == "cuda") ops::set_device(Device::CUDA, local_rank());
    // Before anything is allocated, each rank measures what it will need against what is
    // free: a run that cannot fit is refused here, not by the allocator or the OOM killer.
    // (Every rank measures before any allocates: creating the groups below needs all ranks.)
    std::string where;
    const int64_t available = ops::memory_available_to_rank(local_rank(), local_size(), &where);
    check_rank_memory(cfg, mpi.world_rank(), available, where);
    groups.emplace(!mpi.active()          ? make_single_process_groups()
                   : cfg.device == "cuda" ? make_gpu_process_groups(grid, cfg.distributed_backend)
                                          : make_mpi_process_groups(grid));
    log_line(describe(threads), /*all_ranks=*/true);
    run_training(cfg, *groups);
  } catch (const std::exception& e) {
    // Past validation an error may hit some ranks only (no GPU on one node, a bad file on the
    // ranks that read data, a bad token on one DP rank): end the whole job now, before any
    // communicator is torn down, so no rank waits forever. One rank: main() reports it.
    if (mpi.world_size() > 1) {
      const bool usage = dynamic_cast<const UsageError*>(&e) != nullptr;
      log_error(std::string(usage ? "megatron: error: " : "megatron: internal error: ") + e.what());
      MpiSession::abort(usage ? 2 : 1);
    }
    throw;
  }
  return 0;
}

int preprocess(const std::vector<std::string>& args, const MpiSession*) {
  const PreprocessConfig cfg = parse_args(preprocess_options(), args, "preprocess");
  const PreprocessSummary s = run_preprocess(cfg);
  std::string outputs;
  for (const std::string& k : cfg.json_keys)
    outputs += " " + cfg.output_prefix + "_" + k + "_document.{bin,idx}";
  if (cfg.partitions > 1)
    outputs += str_cat(" (merged from ", cfg.partitions, " partitions ", cfg.output_prefix, "_<0..",
                       cfg.partitions - 1, ">_<key>_document)");
  std::printf(
      "preprocess: %lld documents, %lld tokens, %lld bad lines skipped, %.2f MB in %.2f s "
      "(%.2f MB/s, %.0f docs/s, %d workers; tokenizer loaded in %.2f s) ->%s\n",
      (long long)s.documents, (long long)s.tokens, (long long)s.bad_lines, double(s.bytes) / 1e6,
      s.seconds, double(s.bytes) / 1e6 / s.seconds, double(s.documents) / s.seconds, cfg.workers,
      s.startup_seconds, outputs.c_str());
  return 0;
}

int merge(const std::vector<std::string>& args, const MpiSession*) {
  const MergeConfig cfg = parse_args(merge_options(), args, "merge-datasets");
  const int n = run_merge_datasets(cfg);
  std::printf("merge-datasets: %d datasets -> %s.{bin,idx}\n", n, cfg.output_prefix.c_str());
  return 0;
}

int convert(const std::vector<std::string>& args, const MpiSession*) {
  convert(parse_args(convert_options(), args, "convert"));
  return 0;
}

int generate(const std::vector<std::string>& args, const MpiSession*) {
  std::set<std::string> given;
  GenerateConfig cfg = parse_args(generate_options(), args, "generate", &given);
  if (const int64_t v = tokenizer_vocab_size(cfg.tokenizer, cfg.model.vocab_size,
                                             given.count("--vocab-size") > 0))
    cfg.model.vocab_size = v;
  for (const std::string& text : generate(cfg)) std::printf("%s\n----\n", text.c_str());
  return 0;
}

int serve(const std::vector<std::string>& args, const MpiSession* mpi) {
  std::set<std::string> given;
  const ServeCommand c = parse_args(serve_options(), args, "serve", &given);
  serve(serve_config(c, given), *mpi);
  return 0;
}

int plan(const std::vector<std::string>& args, const MpiSession* mpi) {
  std::set<std::string> given;
  const PlanCommand c = parse_args(plan_options(), args, "plan", &given);
  run_plan(c, args, plan_train_args(args), given, *mpi);
  return 0;
}

}  // namespace

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> table = {
      {"train", "train a model (megatron train --help for its flags)",
       [] {
         return help_text(train_options(),
                          "usage: megatron train [flags]\n\nTrains a "
                          "GPT-2-style model. Flags follow Megatron-LM's names and meanings.");
       },
       train, /*needs_mpi=*/true, /*blocks_stop_signals=*/false},
      {"preprocess", "JSON lines -> Megatron .bin/.idx token datasets",
       [] {
         return help_text(preprocess_options(),
                          "usage: megatron preprocess [flags]\n\n"
                          "Tokenizes JSON lines into Megatron's indexed dataset format.");
       },
       preprocess, false, false},
      {"merge-datasets", "concatenate .bin/.idx datasets",
       [] { return help_text(merge_options(), "usage: megatron merge-datasets [flags]"); }, merge,
       false, false},
      {"generate", "continue prompts with a trained model",
       [] { return help_text(generate_options(), "usage: megatron generate [flags]"); }, generate,
       false, false},
      {"serve", "serve a checkpoint over HTTP (Megatron's PUT /api, OpenAI completions)",
       [] {
         return help_text(serve_options(),
                          "usage: [mpirun -np TPxPP] megatron serve --load DIR [flags]\n\n"
                          "Serves a checkpoint over HTTP (docs/serving.md). Every `train` flag "
                          "is accepted, as upstream's server scripts pass them: model flags "
                          "must agree with the checkpoint; the layout flags place it.");
       },
       serve, true, true},
      {"convert", "Hugging Face GPT-2, Llama, Mistral, Qwen2 <-> megatron-cpp checkpoints",
       [] {
         return help_text(convert_options(),
                          "usage: megatron convert --direction hf-to-megatron|megatron-to-hf "
                          "--load SRC --save DST");
       },
       convert, false, false},
      {"plan",
       "memory per rank and step time of a train command line, and --search\n"
       "for the fastest layout on N devices (docs/planner.md)",
       [] {
         return help_text(plan_options(),
                          "usage: megatron plan --num-gpus N [--device-profile NAME|FILE] "
                          "[--search] [--json] [train's flags]\n\nPredicts each rank's memory "
                          "and the step time of `megatron train` with the same flags "
                          "(docs/planner.md).");
       },
       plan, true, false},
  };
  return table;
}

std::string usage_text() {
  std::string out =
      "usage: megatron <command> [flags]\n\n"
      "Trains GPT-style transformer language models, the way Megatron-LM does, in one native "
      "program.\n\n"
      "commands:\n";
  constexpr size_t kColumn = 19;  // where the summaries start
  for (const Subcommand& c : subcommands()) {
    out += "  " + std::string(c.name) + std::string(kColumn - 2 - std::string(c.name).size(), ' ');
    for (const char* p = c.summary; *p; ++p)
      out += *p == '\n' ? "\n" + std::string(kColumn, ' ') : std::string(1, *p);
    out += "\n";
  }
  out +=
      "\nThreads: train divides a node's cores among the ranks on it; OMP_NUM_THREADS overrides\n"
      "(other commands: all cores).\n"
      "Many ranks: mpirun -np N megatron train ... (data-parallel size = N / (TP x PP)).\n";
  return out;
}

}  // namespace mg
