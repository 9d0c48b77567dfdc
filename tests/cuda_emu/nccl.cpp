// The CUDA emulator's NCCL over MPI (tests/cuda_emu/README.md). Reductions are defined for f32
// (all the communicator reduces); gathers, broadcasts and point-to-point move bytes of any type.
#include <mpi.h>
#include <nccl.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

struct mg_emu_nccl_comm {
  MPI_Comm comm;
  int rank, size;
};

namespace {

constexpr int kTagBase = 21000, kTags = 8000;
bool g_in_group = false;
std::vector<MPI_Request> g_pending;

struct IdFields {
  char magic[8];
  int root_world;
  int seq;
};

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt32: case ncclFloat32: return 4;
    case ncclInt64: return 8;
    case ncclFloat16: case ncclBfloat16: return 2;
  }
  return 0;
}
bool reducible(ncclDataType_t t, ncclRedOp_t op) {
  return t == ncclFloat32 && (op == ncclSum || op == ncclMax);
}
MPI_Op mpi_op(ncclRedOp_t op) { return op == ncclSum ? MPI_SUM : MPI_MAX; }

ncclResult_t ok(int mpi_rc) { return mpi_rc == MPI_SUCCESS ? ncclSuccess : ncclInternalError; }

// MPI counts are ints; NCCL's are size_t. Past INT_MAX the emulator refuses instead of wrapping.
bool fits_int(size_t count, size_t elem_bytes) { return count * elem_bytes <= size_t(INT_MAX); }

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInternalError: return "internal error (emulated NCCL: an MPI call failed)";
    case ncclInvalidArgument: return "invalid argument";
  }
  return "unknown result";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static int seq = 0;
  std::memset(id, 0, sizeof(*id));
  IdFields f{};
  std::memcpy(f.magic, "mgemu", 6);
  MPI_Comm_rank(MPI_COMM_WORLD, &f.root_world);
  f.seq = seq++;
  std::memcpy(id->internal, &f, sizeof(f));
  return ncclSuccess;
}

// Members tell the root their world rank (tagged by the id's sequence number); the root answers
// with the whole list, and the members make their communicator from that group alone.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  IdFields f;
  std::memcpy(&f, id.internal, sizeof(f));
  if (std::strncmp(f.magic, "mgemu", 6) != 0 || rank < 0 || rank >= nranks)
    return ncclInvalidArgument;
  const int tag = kTagBase + f.seq % kTags;
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::vector<int> world(size_t(nranks), -1);
  if (rank == 0) {
    if (me != f.root_world) return ncclInvalidArgument;
    world[0] = me;
    for (int i = 1; i < nranks; ++i) {
      int msg[2];
      MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (msg[0] <= 0 || msg[0] >= nranks || world[size_t(msg[0])] != -1) return ncclInvalidArgument;
      world[size_t(msg[0])] = msg[1];
    }
    for (int i = 1; i < nranks; ++i)
      MPI_Send(world.data(), nranks, MPI_INT, world[size_t(i)], tag, MPI_COMM_WORLD);
  } else {
    const int msg[2] = {rank, me};
    MPI_Send(msg, 2, MPI_INT, f.root_world, tag, MPI_COMM_WORLD);
    MPI_Recv(world.data(), nranks, MPI_INT, f.root_world, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Group all, members;
  MPI_Comm_group(MPI_COMM_WORLD, &all);
  MPI_Group_incl(all, nranks, world.data(), &members);
  auto* c = new mg_emu_nccl_comm;
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &c->comm);
  MPI_Group_free(&members);
  MPI_Group_free(&all);
  if (rc != MPI_SUCCESS) {
    delete c;
    return ncclInternalError;
  }
  c->rank = rank;
  c->size = nranks;
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  MPI_Comm_free(&comm->comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (!reducible(t, op) || !fits_int(count, 1)) return ncclInvalidArgument;
  return ok(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, int(count), MPI_FLOAT,
                          mpi_op(op), comm->comm));
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * type_bytes(t);
  if (!fits_int(count, type_bytes(t))) return ncclInvalidArgument;
  if (comm->rank == root && send != recv) std::memmove(recv, send, bytes);
  return ok(MPI_Bcast(recv, int(bytes), MPI_BYTE, root, comm->comm));
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (!reducible(t, op) || !fits_int(count, 1)) return ncclInvalidArgument;
  // NCCL allows one overlap, in place: recv = send + rank * count; MPI wants separate buffers.
  const size_t size = size_t(comm->size), rank = size_t(comm->rank);
  const float* in = static_cast<const float*>(send);
  const float* out = static_cast<const float*>(recv);
  std::vector<float> copy;
  if (out < in + count * size && in < out + count) {
    if (out != in + count * rank) return ncclInvalidArgument;
    copy.assign(in, in + count * size);
    in = copy.data();
  }
  return ok(MPI_Reduce_scatter_block(in, recv, int(count), MPI_FLOAT, mpi_op(op), comm->comm));
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t) {
  if (!fits_int(count, type_bytes(t))) return ncclInvalidArgument;
  const int bytes = int(count * type_bytes(t));
  const bool in_place =
      static_cast<const char*>(send) == static_cast<char*>(recv) + size_t(comm->rank) * bytes;
  return ok(MPI_Allgather(in_place ? MPI_IN_PLACE : send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE,
                          comm->comm));
}

// A send or receive (its request r) joins the open group, or completes now outside one.
static ncclResult_t post(int mpi_rc, const MPI_Request& r) {
  if (mpi_rc != MPI_SUCCESS) return ncclInternalError;
  g_pending.push_back(r);
  return g_in_group ? ncclSuccess : ncclGroupEnd();
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t) {
  if (!fits_int(count, type_bytes(t))) return ncclInvalidArgument;
  MPI_Request r;
  const int rc = MPI_Isend(buf, int(count * type_bytes(t)), MPI_BYTE, peer, 0, comm->comm, &r);
  return post(rc, r);
}
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t) {
  if (!fits_int(count, type_bytes(t))) return ncclInvalidArgument;
  MPI_Request r;
  const int rc = MPI_Irecv(buf, int(count * type_bytes(t)), MPI_BYTE, peer, 0, comm->comm, &r);
  return post(rc, r);
}

ncclResult_t ncclGroupStart() {
  g_in_group = true;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  g_in_group = false;
  const int rc = MPI_Waitall(int(g_pending.size()), g_pending.data(), MPI_STATUSES_IGNORE);
  g_pending.clear();
  return ok(rc);
}
