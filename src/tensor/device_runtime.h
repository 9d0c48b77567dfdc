// Memory on the device a tensor lives on, and copies where either side may be host or device:
// what Tensor allocates through, and what comm/ stages buffers with. Host memory is implemented
// here; a device backend (backend/cuda) registers its functions when the process selects that
// device (ops::set_device), so tensor/ depends on no backend and a build without CUDA needs
// none. Until a device runtime is registered every pointer is host memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace mg {

// The functions a device backend provides (all required). Plain C++: no CUDA types.
struct DeviceRuntime {
  void* (*alloc)(size_t bytes);
  void (*release)(void* p);
  void (*memset_zero)(void* p, size_t bytes);                        // queued on the stream
  void (*copy_to_device)(void* dst, const void* src, size_t bytes);  // queued on the stream
  void (*copy_to_host)(void* dst, const void* src, size_t bytes);    // returns once copied
  void (*copy_on_device)(void* dst, const void* src, size_t bytes);  // queued on the stream
  bool (*is_device_pointer)(const void* p);
  void (*synchronize)();                   // waits for everything queued on the stream
  void* (*stream)();                       // the stream device work is queued on (a cudaStream_t)
  int64_t (*available_bytes)() = nullptr;  // device memory this process can still allocate
                                           // (null: unknown)
};

// Installs the device runtime (the same one again is a no-op). It stays installed for the
// life of the process: device buffers may be released after the compute device went back to
// the CPU.
void register_device_runtime(const DeviceRuntime& runtime);
bool device_runtime_registered();

namespace runtime {

// Memory on a device (64-byte aligned on the host), and copies where either side may be
// host or device.
void* alloc(size_t bytes, Device d);
void release(void* p, Device d);
void memset_zero(void* p, size_t bytes, Device d);
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Where p points: CUDA for device memory, else CPU (always CPU with no device runtime).
Device where(const void* p);
// Waits for the device's queued work (no-op with no device runtime).
void synchronize();
// The device's stream, for a library that queues its own work there (NCCL). Needs a runtime.
void* stream();
// Memory a process can still allocate on device d, -1 when unknown. CPU: the kernel's estimate
// of available memory (/proc/meminfo MemAvailable) within the cgroup's limit, if one is set;
// *source (if given) says which ("host MemAvailable", "host cgroup limit").
int64_t available_bytes(Device d, std::string* source = nullptr);
// Refuses (UsageError "WHAT needs 9.10 TiB, only 21.7 GiB available (host MemAvailable)")
// host allocations of `bytes` in all that the host cannot hold, before they are made; does
// nothing when the available memory is unknown.
void check_host_fits(int64_t bytes, const std::string& what);

}  // namespace runtime
}  // namespace mg
