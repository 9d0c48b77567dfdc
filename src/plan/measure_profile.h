// `megatron plan --profile-device` (and --device-profile cpu): this machine measured as a
// device profile. Each rank of `mpirun -np N` runs with its share of the cores, as training
// does, and times linear layers of several sizes forward and backward (the efficiency curve is
// fitted to them), the attention kernel, the elementwise kernels (their effective bandwidth)
// and, with N > 1, all-reduces over the N ranks (link bandwidth and latency).
#pragma once
#include "comm/mpi_communicator.h"
#include "plan/device_profile.h"

namespace mg {

DeviceProfile measure_cpu_profile(const MpiSession& mpi);

}  // namespace mg
