// libFuzzer target: the `megatron` command line, parsed and validated as main() does before
// any file is read or memory allocated (no training). Input: lines; the first is
// "<subcommand> [world size]" (train, preprocess, merge-datasets, generate, convert, serve, plan;
// anything else: train), each further line is one argv entry. Bad flags must end in a UsageError; an
// accepted train config must give finite learning rates and a parameter count.
#include <cmath>

#include "cli/commands.h"
#include "plan/planner.h"
#include "fuzz_util.h"

namespace {

using namespace mg;

std::vector<std::string> split_lines(std::string_view in) {
  std::vector<std::string> out;
  while (!in.empty()) {
    const size_t nl = in.find('\n');
    out.emplace_back(in.substr(0, nl));
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  }
  return out;
}

void train(const std::vector<std::string>& args, int world_size) {
  TrainConfig cfg = parse_train_args(args);
  // What main() does with the tokenizer before validation (GPT-2's reads files: not here).
  if (cfg.tokenizer.tokenizer_type == "NullTokenizer") {
    cfg.tokenizer.vocab_size = cfg.model.vocab_size;
    cfg.model.vocab_size = make_tokenizer(cfg.tokenizer)->vocab_size();
  }
  cfg.finalize_and_validate(world_size);
  // What the trainer reads of a validated config before its first step.
  fuzz::keep(cfg.num_micro_batches());
  fuzz::keep(cfg.model.num_parameters());
  fuzz::keep(cfg.model.train_flops_per_token());
  const LRSchedule s = cfg.lr_schedule();
  const int64_t G = cfg.global_batch_size;
  // The warmup is a real number of samples (an unrounded --lr-warmup-fraction): both sides of it.
  const auto whole = [](double x) { return x < 9.2e18 ? int64_t(x) : INT64_MAX - 1; };
  const int64_t w = whole(s.warmup_steps);
  for (int64_t samples : {int64_t(0), G, w, w + 1, s.decay_steps, s.wd_incr_steps}) {
    fuzz::require(std::isfinite(s.at(samples)), "a finite learning rate");
    fuzz::require(std::isfinite(s.weight_decay_at(samples)), "a finite weight decay");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = split_lines(fuzz::as_text(data, size));
  if (args.empty()) return 0;
  const std::string head = args.front();
  args.erase(args.begin());
  const std::string command = head.substr(0, head.find(' '));
  int world_size = 1;
  if (const size_t sp = head.find(' '); sp != std::string::npos)
    world_size = 1 + int((std::strtol(head.c_str() + sp + 1, nullptr, 10) % 1024 + 1024) % 1024);
  fuzz::expect_usage_errors_only([&] {
    if (command == "preprocess") {
      parse_args(preprocess_options(), args, command).validate();
    } else if (command == "merge-datasets") {
      fuzz::keep(parse_args(merge_options(), args, command).input.size());
    } else if (command == "generate") {
      GenerateConfig cfg = parse_args(generate_options(), args, command);
      if (cfg.tokenizer.tokenizer_type == "NullTokenizer")
        cfg.tokenizer.vocab_size = cfg.model.vocab_size;
      cfg.validate();
    } else if (command == "convert") {
      parse_args(convert_options(), args, command).validate();
    } else if (command == "plan") {
      // One layout planned on a built-in profile (no search: each input stays fast).
      PlanCommand c = parse_args(plan_options(), args, command);
      const DeviceProfile profile = load_device_profile("h100-sxm");
      const Plan p = make_plan(c.train, c.num_gpus > 0 ? c.num_gpus : world_size, profile);
      fuzz::require(std::isfinite(p.step.iteration_seconds) && p.step.iteration_seconds > 0,
                    "a finite, positive planned step time");
    } else if (command == "serve") {
      ServeCommand c = parse_args(serve_options(), args, command);  // the flags only: no
      c.serve.load = c.train.load;                                  // checkpoint, no server
      c.serve.validate();
    } else {
      train(args, world_size);
    }
  });
  return 0;
}
