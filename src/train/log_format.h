// Megatron-LM's stdout lines (training_log / evaluate_and_print_results), so existing log
// parsers keep working:
//  iteration        N/       T | consumed samples: ... | elapsed time per iteration (ms): ... |
//  [throughput per GPU (TFLOP/s/GPU): ... |] learning rate: 1.234567E-04 | global batch size: ... |
//  lm loss: 2.345678E+00 | [load_balancing_loss: ... | z_loss: ... | dropped tokens: ... |]
//  loss scale: 1.0 | grad norm: 0.987 | number of skipped iterations:
//  ... | number of nan iterations: ... |
// (the throughput field only with --log-throughput, as upstream), followed by this rank's
// per-step communication volume:
//  tp comm bytes: ... | pp comm bytes: ... | dp comm bytes: ... | embedding comm bytes: ... |
//  cp comm bytes: ... | [ep comm bytes: ... |]
#pragma once
#include <cstdint>
#include <string>

namespace mg {

struct IterationLog {
  int64_t iteration = 0, train_iters = 0, consumed_samples = 0, global_batch_size = 0;
  double ms_per_iter = 0, tflops = 0, lr = 0, lm_loss = 0, loss_scale = 1.0, grad_norm = 0;
  int64_t skipped_iterations = 0, nan_iterations = 0;
  // --log-num-zeros-in-grad, --log-params-norm (< 0: off, the field is left out).
  double num_zeros = -1, params_norm = -1;
  // MoE models (< 0: left out): the load-balancing and z losses as Megatron logs them (without
  // their coefficients; averaged over MoE layers, micro-batches and DP), and the (token,
  // expert) assignments dropped for capacity in the step.
  double load_balancing_loss = -1, z_loss = -1, dropped_tokens = -1;
  // The load-balancing loss's name: seq_load_balancing_loss under seq_aux_loss, as Megatron.
  const char* load_balancing_name = "load_balancing_loss";
  bool show_throughput = false;  // --log-throughput: print the tflops field
  // Bytes this rank sent per step in each process group (ring-algorithm accounting).
  int64_t tp_bytes = 0, pp_bytes = 0, dp_bytes = 0, embedding_bytes = 0, cp_bytes = 0;
  int64_t ep_bytes = -1;  // MoE under expert parallelism (< 0: the field is left out)
};

std::string format_iteration(const IterationLog& l);
// Megatron's validation perplexity: exp of the loss, capped at exp(20).
double validation_ppl(double lm_loss);
// " validation loss at iteration N<set> | lm loss value: ...", set e.g. " on test set".
std::string format_validation(int64_t iteration, double lm_loss, const std::string& set = "");
std::string memory_report(int64_t param_bytes, int64_t grad_bytes, size_t optimizer_bytes,
                          size_t activation_bytes, double optimizer_formula_bytes);

}  // namespace mg
