// bf16 sums over MPI, which has no bf16 type (communicator.h): a 2-byte datatype of its own
// and a user-defined sum that adds two bf16 values in fp32 and rounds the result to bf16
// (nearest even), as NCCL's ncclBfloat16 sum does, so each partial sum of a ring or tree is
// rounded. Used by the MPI communicator and by the CUDA emulator's NCCL (tests/cuda_emu).
#pragma once
#include <mpi.h>

namespace mg {

struct MpiBf16Sum {
  MPI_Datatype type;
  MPI_Op op;
};
// Created on first use (after MPI_Init), kept until MPI_Finalize.
const MpiBf16Sum& mpi_bf16_sum();

}  // namespace mg
