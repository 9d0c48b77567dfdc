// The op set the model, the optimizer and the trainer call: backend/ops.h's functions under
// the same names and conventions, sent to backend/cpu or backend/cuda according to the
// process's compute device (set once at start-up: `megatron train --device cpu|cuda`). The
// pointers an op gets must live on that device: Tensor(shape, dtype, ops::device()) allocates
// them there, and copy() moves bytes between host and device. With no CUDA backend built,
// choosing CUDA is a clear error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/ops.h"
#include "tensor/tensor.h"

namespace mg::ops {

using cpu::AttentionShape;
using cpu::FusedQKV;
using cpu::fused_qkv;
using cpu::GradWrite;
using cpu::Heads;
using cpu::Mat;
using cpu::MatOut;
using cpu::Range;

// The compute device of this process. set_device(CUDA) checks that a GPU is usable, selects
// the GPU of this rank (local_rank, its place among its node's ranks: comm's local_rank(),
// modulo the GPU count) and registers the CUDA memory functions with tensor/device_runtime.h.
void set_device(Device d, int local_rank = 0);
Device device();
bool on_cuda();
// Whether this build has the CUDA backend and the runtime finds a GPU; *why says why not.
bool cuda_available(std::string* why = nullptr);
// "cpu", or "cuda: NVIDIA H200 (sm_90, 139.8 GiB)" for the log.
std::string device_description();
// The most device memory ever live at once (the CUDA caching allocator's count; 0 on the CPU).
int64_t device_bytes_peak();
// Bytes this rank may allocate on its compute device before anything is allocated: the host's
// available memory or this GPU's free memory (tensor/device_runtime.h), split evenly among
// the ranks that share it: the ranks_on_node ranks of this node on the host; on GPUs those of
// them that picked the same GPU. -1 when unknown. *source says what the figure is, for
// messages ("host MemAvailable / 4 ranks on this node").
int64_t memory_available_to_rank(int local_rank, int ranks_on_node, std::string* source);
// Waits for the compute stream (no-op on the CPU). The trainer calls it before it reads an
// iteration's time, so the step time contains the step's GPU work, and the phase timers of
// --timing-log-level call it where each timed phase starts and stops (timers::set_sync).
void synchronize();

// Memory on a device, and copies where either side may be host or device: tensor/'s
// device_runtime.h under the op set's names.
void* alloc(size_t bytes, Device d);
void release(void* p, Device d);
void memset_zero(void* p, size_t bytes, Device d);
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Where p points: CUDA for device memory, else CPU (always CPU without the CUDA backend).
Device where(const void* p);

// The op list (backend/op_list.inc: each op's contract), each op routed to its cpu:: or
// cuda:: twin by backend/dispatch.cpp.
#include "backend/declare_ops.inc"

}  // namespace mg::ops
