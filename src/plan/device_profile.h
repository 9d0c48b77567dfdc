// A device profile: what `megatron plan` needs to know about one accelerator (or this CPU) and
// the links between them, as a small JSON file (docs/planner.md lists every field). Built-in
// profiles: h100-sxm, h200, a100-80gb (datasheet peaks and links; the calibration constants
// fitted as docs/planner.md shows), and cpu (measured here by `megatron plan --profile-device`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace mg {

struct LinkProfile {
  double bandwidth = 0;  // bytes/s one rank can send (and receive) at once over this link
  double latency = 0;    // seconds per message
};

struct DeviceProfile {
  std::string name, description;
  double peak_fp32 = 0, peak_bf16 = 0, peak_fp16 = 0;  // FLOP/s, dense
  // Achievable GEMM efficiency (of the dtype's peak) for an (M x K) . (K x N) product:
  // gemm_max_efficiency x d / (d + gemm_half_dim) with d = 3 / (1/M + 1/N + 1/K): small dimensions
  // starve the units (calibration constants).
  double gemm_max_efficiency = 0, gemm_half_dim = 0;
  // The attention core (QK^T, softmax, .V) as a fraction of the dtype's peak, and the share of
  // its s^2 work the kernel does (0.5: causal blocks skipped, as flash attention does).
  // With attention_half_dim the efficiency falls off with the head dim as the GEMMs' does with
  // theirs: attention_efficiency x HD / (HD + attention_half_dim).
  double attention_efficiency = 0, attention_causal_fraction = 1, attention_half_dim = 0;
  // A kernel that computes the causal keys per block of this many query rows does
  // causal_fraction + block / (2 S) of the square (0: causal_fraction whatever S).
  double attention_causal_block = 0;
  // The share of the S_q x S_k score square the kernel computes.
  double attention_fraction(int64_t S_keys) const;
  bool attention_fp32 = false;  // the kernel computes in fp32 whatever the model dtype (CPU)
  // Seconds per attention score element to draw and apply the attention-dropout mask (forward,
  // and again in backward) when --attention-dropout > 0: the CPU kernel hashes each element;
  // 0 where the fused GPU kernel's draws are inside attention_efficiency.
  double attention_dropout_seconds = 0;
  double memory_bandwidth = 0;  // bytes/s streamed (the optimizer step)
  // The share of memory_bandwidth the elementwise kernels (norms, activations, residual adds,
  // the loss) reach, counted in their nominal bytes: 1 where they stream (GPUs); below 1 where
  // they are compute-bound (a CPU core's GELU).
  double elementwise_efficiency = 1;
  int64_t memory_bytes = 0;  // per device
  LinkProfile intra_node, inter_node;
  int64_t devices_per_node = 1;
  // The fraction of TP / CP / EP communication time not hidden behind compute (calibration).
  double exposed_comm_fraction = 1;
  // The fraction of the DP gradient reduction (and parameter all-gather) left exposed after
  // what the overlap model hides (calibration; 1: as modelled).
  double dp_exposed_fraction = 1;

  double peak(DType t) const;
  // Seconds for an M x N x K GEMM (2 M N K FLOPs) in dtype t.
  double gemm_seconds(int64_t M, int64_t N, int64_t K, DType t) const;
};

// A built-in profile by name, or a JSON file; a missing or mistyped field is a UsageError
// naming the file and the field.
DeviceProfile load_device_profile(const std::string& name_or_file);
DeviceProfile parse_device_profile(const std::string& json_text, const std::string& source);
std::string device_profile_json(const DeviceProfile& p);
std::vector<std::string> builtin_profile_names();

}  // namespace mg
