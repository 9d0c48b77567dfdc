// `megatron plan`: a device profile (measured, built in or a file), then one layout's plan or
// the --search over layouts, printed as a report or JSON on rank 0.
#include "plan/plan_command.h"

#include <algorithm>
#include <cstdio>

#include "checkpoint/files.h"
#include "core/error.h"
#include "plan/measure_profile.h"
#include "plan/planner.h"
#include "tokenizer/tokenizer.h"

namespace mg {

namespace {

// The model's vocabulary as train would size it; a tokenizer whose files are not on this
// machine needs --vocab-size (GPT-2's BPE is known: 50257).
void size_vocabulary(TrainConfig& train, const std::set<std::string>& given) {
  // Upstream's example scripts give GPT-2's vocab and merge files without --tokenizer-type.
  if (train.tokenizer.tokenizer_type.empty() && !train.tokenizer.vocab_file.empty() &&
      !train.tokenizer.merge_file.empty())
    train.tokenizer.tokenizer_type = "GPT2BPETokenizer";
  try {
    if (const int64_t v = tokenizer_vocab_size(train.tokenizer, train.model.vocab_size,
                                               given.count("--vocab-size") > 0))
      train.model.vocab_size = v;
  } catch (const UsageError& e) {
    if (train.tokenizer.tokenizer_type == "GPT2BPETokenizer" && !given.count("--vocab-size")) {
      train.model.vocab_size = 50257;
      std::fputs(
          "plan: the tokenizer files are not readable here; GPT-2's vocabulary (50257) "
          "assumed\n",
          stderr);
    } else if (!given.count("--vocab-size")) {
      throw UsageError(str_cat(e.what(),
                               " (or give --vocab-size to plan without the "
                               "tokenizer files)"));
    }
  }
}

}  // namespace

void run_plan(PlanCommand c, const std::vector<std::string>& args,
              std::vector<std::string> train_args, const std::set<std::string>& given,
              const MpiSession& mpi) {
  if (c.profile_device) {
    const std::string json = device_profile_json(measure_cpu_profile(mpi));
    if (mpi.world_rank() != 0) return;
    if (c.output.empty()) {
      std::fputs(json.c_str(), stdout);
    } else {
      ckpt::write_file_atomic(c.output, json);
      std::printf("plan: profile of this machine written to %s\n", c.output.c_str());
    }
    return;
  }
  // A profile measured now is measured on every rank (its collectives need them all).
  const DeviceProfile profile =
      c.device_profile == "cpu" ? measure_cpu_profile(mpi) : load_device_profile(c.device_profile);
  if (mpi.world_rank() != 0) return;
  // A GPU profile plans the run on GPUs: train's checks for --device cuda, and no host-side
  // data indices in the device's memory.
  if (profile.name != "cpu" && !given.count("--device")) c.train.device = "cuda";
  MG_USER_CHECK(c.num_gpus >= 0, "--num-gpus must be positive, not ", c.num_gpus);
  MG_USER_CHECK(c.top >= 1, "--top must be at least 1, not ", c.top);
  const int world = c.num_gpus > 0 ? c.num_gpus : 1;
  size_vocabulary(c.train, given);
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
    std::fputs(device_profile_json(profile).c_str(), stdout);
    return;
  }
  // --search's commands leave out what train would refuse (the ramp-up above).
  if (const auto it = std::find(train_args.begin(), train_args.end(), "--rampup-batch-size");
      it != train_args.end() && c.train.train_samples == 0)
    train_args.erase(it, it + std::min<std::ptrdiff_t>(4, train_args.end() - it));
  if (c.search) {
    const SearchResult r = search_layouts(c.train, world, profile, c.top);
    std::fputs((c.json ? search_json(r, profile, train_args)
                       : search_report(r, profile, train_args))
                   .c_str(),
               stdout);
    return;
  }
  const Plan p = make_plan(c.train, world, profile);
  std::fputs((c.json ? plan_json(p, profile) : plan_report(p, profile)).c_str(), stdout);
}

}  // namespace mg
