// CUDA emulation: the NCCL calls comm/nccl_communicator.cu makes, over MPI on host memory
// (tests/cuda_emu/README.md). A communicator is an MPI communicator of its members, built from
// the unique id (its root's world rank and a sequence number) without involving other ranks.
// Calls are queued in stream order and complete through event queries or later stream work.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

enum ncclResult_t {
  ncclSuccess = 0,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclRemoteError = 6,
};
enum ncclDataType_t {
  ncclInt32 = 2,
  ncclInt64 = 4,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclBfloat16 = 9,
};
enum ncclRedOp_t { ncclSum = 0, ncclMax = 2 };
struct ncclUniqueId {
  char internal[128];
};
struct mg_emu_nccl_comm;
using ncclComm_t = mg_emu_nccl_comm*;

const char* ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error);
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t s);
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t s);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
