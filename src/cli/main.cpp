// The `megatron` binary: one program, subcommands. User errors print one line naming the flag
// or file and exit 2; a failure on one rank ends every rank of the job.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/dispatch.h"
#include "cli/commands.h"
#include "comm/mpi_communicator.h"
#include "comm/rank_threads.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/process_groups.h"
#include "checkpoint/files.h"
#include "plan/measure_profile.h"
#include "plan/planner.h"
#include "train/checkpoint_model.h"
#include "train/rank_memory.h"
#include "train/trainer.h"

namespace {

const char* kUsage =
    "usage: megatron <command> [flags]\n\n"
    "Trains GPT-style transformer language models, the way Megatron-LM does, in one native "
    "program.\n\n"
    "commands:\n"
    "  train            train a model (megatron train --help for its flags)\n"
    "  preprocess       JSON lines -> Megatron .bin/.idx token datasets\n"
    "  merge-datasets   concatenate .bin/.idx datasets\n"
    "  generate         continue prompts with a trained model\n"
    "  serve            serve a checkpoint over HTTP (Megatron's PUT /api, OpenAI completions)\n"
    "  convert          Hugging Face GPT-2, Llama, Mistral, Qwen2 <-> megatron-cpp checkpoints\n"
    "  plan             memory per rank and step time of a train command line, and --search\n"
    "                   for the fastest layout on N devices (docs/planner.md)\n\n"
    "Threads: train divides a node's cores among the ranks on it; OMP_NUM_THREADS overrides\n"
    "(other commands: all cores).\n"
    "Many ranks: mpirun -np N megatron train ... (data-parallel size = N / (TP x PP)).\n";

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

// The tokenizer sizes the model's vocabulary (Megatron pads it afterwards). The types that
// Megatron builds from args.vocab_size take the model's --vocab-size: NullTokenizer always,
// TikTokenizer when the flag is given (else its own default, 2^17).
// The tokenizer's vocabulary size (0 without --tokenizer-type). NullTokenizer's is the model's
// --vocab-size; TikTokenizer takes --vocab-size as its cap when it is given (Megatron's
// args.vocab_size), else its own default.
int64_t tokenizer_vocab_size(mg::TokenizerConfig& tok, int64_t model_vocab_size,
                             bool vocab_size_given) {
  tok.validate();
  if (tok.tokenizer_type.empty()) return 0;
  if (tok.tokenizer_type == "NullTokenizer" ||
      (tok.tokenizer_type == "TikTokenizer" && vocab_size_given))
    tok.vocab_size = model_vocab_size;
  return mg::make_tokenizer(tok)->vocab_size();
}

int train(const std::vector<std::string>& args, const mg::MpiSession& mpi) {
  if (wants_help(args)) {
    std::fputs(mg::help_text(mg::train_options(), "usage: megatron train [flags]\n\nTrains a "
               "GPT-2-style model. Flags follow Megatron-LM's names and meanings.").c_str(), stdout);
    return 0;
  }
  std::set<std::string> given;
  mg::TrainConfig cfg = mg::parse_train_args(args, &given);
  cfg.argv = args;
  // --load with a checkpoint: model flags not given come from it.
  const bool model_from_ckpt = mg::model_from_checkpoint(cfg, given);
  if (const int64_t v = tokenizer_vocab_size(cfg.tokenizer, cfg.model.vocab_size,
                                             given.count("--vocab-size") > 0))
    cfg.model.vocab_size = mg::train_vocab_size(cfg, v, model_from_ckpt, given);
  const std::string warning = cfg.finalize_and_validate(mpi.world_size());
  if (!warning.empty()) mg::log_line(warning);
  const mg::RankGrid grid = cfg.rank_grid();
  mg::set_comm_timeout(cfg.distributed_timeout_minutes * 60.0);
  // Outside the try: the handler below aborts while the communicators still exist (tearing
  // an NCCL group down while the other ranks sit in its collectives could hang).
  std::optional<mg::ProcessGroups> groups;
  try {
    // The node's cores divided among its ranks (OMP_NUM_THREADS wins). Every
    // rank calls it (local_size() is collective while MPI runs); logged once the run starts.
    const mg::RankThreads threads = mg::set_rank_threads();
    // A GPU run selects its GPU before any NCCL group exists.
    if (cfg.device == "cuda") mg::ops::set_device(mg::Device::CUDA, mg::local_rank());
    // Before anything is allocated, each rank measures what it will need against what is
    // free: a run that cannot fit is refused here, not by the allocator or the OOM killer.
    // (Every rank measures before any allocates: creating the groups below needs all ranks.)
    std::string where;
    const int64_t available =
        mg::ops::memory_available_to_rank(mg::local_rank(), mg::local_size(), &where);
    mg::check_rank_memory(cfg, mpi.world_rank(), available, where);
    groups.emplace(!mpi.active()          ? mg::make_single_process_groups()
                   : cfg.device == "cuda" ? mg::make_gpu_process_groups(grid, cfg.distributed_backend)
                                          : mg::make_mpi_process_groups(grid));
    mg::log_line(mg::describe(threads), /*all_ranks=*/true);
    mg::run_training(cfg, *groups);
  } catch (const std::exception& e) {
    // Past validation an error may hit some ranks only (no GPU on one node, a bad file on the
    // ranks that read data, a bad token on one DP rank): end the whole job now, before any
    // communicator is torn down, so no rank waits forever. One rank: main() reports it.
    if (mpi.world_size() > 1) {
      const bool usage = dynamic_cast<const mg::UsageError*>(&e) != nullptr;
      mg::log_error(std::string(usage ? "megatron: error: " : "megatron: internal error: ") +
                    e.what());
      mg::MpiSession::abort(usage ? 2 : 1);
    }
    throw;
  }
  return 0;
}

int preprocess(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::fputs(mg::help_text(mg::preprocess_options(), "usage: megatron preprocess [flags]\n\n"
               "Tokenizes JSON lines into Megatron's indexed dataset format.").c_str(), stdout);
    return 0;
  }
  const mg::PreprocessConfig cfg = mg::parse_args(mg::preprocess_options(), args, "preprocess");
  const mg::PreprocessSummary s = mg::run_preprocess(cfg);
  std::string outputs;
  for (const std::string& k : cfg.json_keys) outputs += " " + cfg.output_prefix + "_" + k + "_document.{bin,idx}";
  if (cfg.partitions > 1)
    outputs += mg::str_cat(" (merged from ", cfg.partitions, " partitions ", cfg.output_prefix,
                           "_<0..", cfg.partitions - 1, ">_<key>_document)");
  std::printf("preprocess: %lld documents, %lld tokens, %lld bad lines skipped, %.2f MB in %.2f s "
              "(%.2f MB/s, %.0f docs/s, %d workers; tokenizer loaded in %.2f s) ->%s\n",
              (long long)s.documents, (long long)s.tokens, (long long)s.bad_lines,
              double(s.bytes) / 1e6, s.seconds, double(s.bytes) / 1e6 / s.seconds,
              double(s.documents) / s.seconds, cfg.workers, s.startup_seconds, outputs.c_str());
  return 0;
}

int merge(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::fputs(mg::help_text(mg::merge_options(), "usage: megatron merge-datasets [flags]").c_str(),
               stdout);
    return 0;
  }
  const mg::MergeConfig cfg = mg::parse_args(mg::merge_options(), args, "merge-datasets");
  const int n = mg::run_merge_datasets(cfg);
  std::printf("merge-datasets: %d datasets -> %s.{bin,idx}\n", n, cfg.output_prefix.c_str());
  return 0;
}

int convert(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::fputs(mg::help_text(mg::convert_options(),
                             "usage: megatron convert --direction hf-to-megatron|megatron-to-hf "
                             "--load SRC --save DST")
                   .c_str(),
               stdout);
    return 0;
  }
  mg::convert(mg::parse_args(mg::convert_options(), args, "convert"));
  return 0;
}

int generate(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::fputs(mg::help_text(mg::generate_options(), "usage: megatron generate [flags]").c_str(),
               stdout);
    return 0;
  }
  std::set<std::string> given;
  mg::GenerateConfig cfg = mg::parse_args(mg::generate_options(), args, "generate", &given);
  if (const int64_t v = tokenizer_vocab_size(cfg.tokenizer, cfg.model.vocab_size,
                                             given.count("--vocab-size") > 0))
    cfg.model.vocab_size = v;
  for (const std::string& text : mg::generate(cfg)) std::printf("%s\n----\n", text.c_str());
  return 0;
}

int serve(const std::vector<std::string>& args, const mg::MpiSession& mpi) {
  if (wants_help(args)) {
    std::fputs(mg::help_text(mg::serve_options(),
                             "usage: [mpirun -np TPxPP] megatron serve --load DIR [flags]\n\n"
                             "Serves a checkpoint over HTTP (docs/serving.md). Every `train` flag "
                             "is accepted, as upstream's server scripts pass them: model flags "
                             "must agree with the checkpoint; the layout flags place it.")
                   .c_str(),
               stdout);
    return 0;
  }
  std::set<std::string> given;
  const mg::ServeCommand c = mg::parse_args(mg::serve_options(), args, "serve", &given);
  mg::serve(mg::serve_config(c, given), mpi);
  return 0;
}

int plan(const std::vector<std::string>& args, const mg::MpiSession& mpi) {
  if (wants_help(args)) {
    std::fputs(mg::help_text(mg::plan_options(),
                             "usage: megatron plan --num-gpus N [--device-profile NAME|FILE] "
                             "[--search] [--json] [train's flags]\n\nPredicts each rank's memory "
                             "and the step time of `megatron train` with the same flags "
                             "(docs/planner.md).")
                   .c_str(),
               stdout);
    return 0;
  }
  std::set<std::string> given;
  mg::PlanCommand c = mg::parse_args(mg::plan_options(), args, "plan", &given);
  if (c.profile_device) {
    const std::string json = mg::device_profile_json(mg::measure_cpu_profile(mpi));
    if (mpi.world_rank() != 0) return 0;
    if (c.output.empty()) {
      std::fputs(json.c_str(), stdout);
    } else {
      mg::ckpt::write_file_atomic(c.output, json);
      std::printf("plan: profile of this machine written to %s\n", c.output.c_str());
    }
    return 0;
  }
  // A profile measured now is measured on every rank (its collectives need them all).
  const mg::DeviceProfile profile = c.device_profile == "cpu"
                                        ? mg::measure_cpu_profile(mpi)
                                        : mg::load_device_profile(c.device_profile);
  if (mpi.world_rank() != 0) return 0;
  // A GPU profile plans the run on GPUs: train's checks for --device cuda, and no host-side
  // data indices in the device's memory.
  if (profile.name != "cpu" && !given.count("--device")) c.train.device = "cuda";
  MG_USER_CHECK(c.num_gpus >= 0, "--num-gpus must be positive, not ", c.num_gpus);
  MG_USER_CHECK(c.top >= 1, "--top must be at least 1, not ", c.top);
  const int world = c.num_gpus > 0 ? c.num_gpus : 1;
  // Upstream's example scripts give GPT-2's vocab and merge files without --tokenizer-type.
  if (c.train.tokenizer.tokenizer_type.empty() && !c.train.tokenizer.vocab_file.empty() &&
      !c.train.tokenizer.merge_file.empty())
    c.train.tokenizer.tokenizer_type = "GPT2BPETokenizer";
  // The model's vocabulary as train would size it; a tokenizer whose files are not on this
  // machine needs --vocab-size (GPT-2's BPE is known: 50257).
  try {
    if (const int64_t v = tokenizer_vocab_size(c.train.tokenizer, c.train.model.vocab_size,
                                               given.count("--vocab-size") > 0))
      c.train.model.vocab_size = v;
  } catch (const mg::UsageError& e) {
    if (c.train.tokenizer.tokenizer_type == "GPT2BPETokenizer" && !given.count("--vocab-size")) {
      c.train.model.vocab_size = 50257;
      std::fputs("plan: the tokenizer files are not readable here; GPT-2's vocabulary (50257) "
                 "assumed\n", stderr);
    } else if (!given.count("--vocab-size")) {
      throw mg::UsageError(mg::str_cat(e.what(), " (or give --vocab-size to plan without the "
                                                  "tokenizer files)"));
    }
  }
  c.train.argv = args;
  // A plan is of the full batch's step: a batch ramp-up does not change what fits or the steady
  // speed. (Upstream's GPT-3 175B script pairs --rampup-batch-size with --train-iters, which
  // train refuses as upstream does; plan answers it.)
  if (!c.train.rampup_batch_size.empty()) {
    c.train.rampup_batch_size.clear();
    std::fputs("plan: --rampup-batch-size ignored: planned at the full --global-batch-size\n",
               stderr);
  }
  if (c.show_profile) {
    std::fputs(mg::device_profile_json(profile).c_str(), stdout);
    return 0;
  }
  std::vector<std::string> train_args = mg::plan_train_args(args);
  // --search's commands leave out what train would refuse (the ramp-up above).
  if (const auto it = std::find(train_args.begin(), train_args.end(), "--rampup-batch-size");
      it != train_args.end() && c.train.train_samples == 0)
    train_args.erase(it, it + std::min<std::ptrdiff_t>(4, train_args.end() - it));
  if (c.search) {
    const mg::SearchResult r = mg::search_layouts(c.train, world, profile, c.top);
    std::fputs((c.json ? mg::search_json(r, profile, train_args)
                       : mg::search_report(r, profile, train_args))
                   .c_str(),
               stdout);
    return 0;
  }
  const mg::Plan p = mg::make_plan(c.train, world, profile);
  std::fputs((c.json ? mg::plan_json(p, profile) : mg::plan_report(p, profile)).c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Keep large freed blocks (oneDNN's GEMM packing buffers) in the heap instead of returning
  // them to the kernel with munmap after every call: re-faulting and zeroing those pages cost
  // several percent of a training step.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "preprocess") return preprocess(args);
    if (command == "merge-datasets") return merge(args);
    if (command == "generate") return generate(args);
    if (command == "convert") return convert(args);
  } catch (const mg::UsageError& e) {
    mg::log_error(std::string("megatron ") + command + ": error: " + e.what());
    return 2;
  } catch (const std::exception& e) {
    mg::log_error(std::string("megatron ") + command + ": internal error: " + e.what());
    return 1;
  }
  if (command != "train" && command != "serve" && command != "plan") {
    mg::log_error("megatron: error: unknown command '" + command + "' (see `megatron --help`)");
    return 2;
  }
  if (command == "serve") {  // before MPI starts its threads: see mg::serve
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  }
  mg::MpiSession mpi(&argc, &argv);
  mg::set_log_rank(mpi.world_rank());
  try {
    if (command == "plan") return plan(args, mpi);
    return command == "train" ? train(args, mpi) : serve(args, mpi);
  } catch (const mg::UsageError& e) {
    // Every rank validates the same flags, so every rank stops here; rank 0 says why.
    if (mpi.world_rank() == 0) mg::log_error(std::string("megatron: error: ") + e.what());
    return 2;
  } catch (const std::exception& e) {
    // A failure on one rank: end the whole job rather than leave the others waiting.
    mg::log_error(std::string("megatron: internal error: ") + e.what());
    if (mpi.world_size() > 1) mg::MpiSession::abort(1);
    return 1;
  }
}
