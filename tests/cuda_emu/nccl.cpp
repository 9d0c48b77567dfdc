// The CUDA emulator's NCCL over MPI (tests/cuda_emu/README.md). Reductions are defined for f32
// and bf16 sums (what the communicator reduces; bf16 by the MPI communicator's own sum,
// comm/mpi_bf16.h, which rounds each partial sum as NCCL does); gathers, broadcasts and
// point-to-point move bytes of any type.
// Calls are queued in stream order, as a GPU runs them: each is posted to MPI (non-blocking)
// once the one before it has finished; event queries progress the queue, and any other stream
// work (kernels, copies, synchronizations) drains it first (emu.h). Another thread (the NCCL
// watchdog) may query events and abort communicators: it never calls MPI, and an abort drops
// the communicator's calls from the queue, which ends a drain the main thread is blocked in.
#include <mpi.h>
#include <nccl.h>
#include <sched.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/mpi_bf16.h"
#include "emu.h"

struct mg_emu_nccl_comm {
  MPI_Comm comm;
  int rank, size;
  std::atomic<ncclResult_t> error{ncclSuccess};  // what ncclCommGetAsyncError reports
};

namespace {

constexpr int kTagBase = 21000, kTags = 8000;

// One queued call: post() starts its MPI transfers (returns an MPI error code).
struct Queued {
  uint64_t seq;
  ncclComm_t comm;
  std::function<int(std::vector<MPI_Request>&)> post;
  std::vector<MPI_Request> reqs;
  bool posted = false;
};
std::mutex g_mu;  // guards the queue (the main thread progresses it; another may abort)
std::deque<Queued> g_queue;
std::atomic<uint64_t> g_enqueued{0};
const std::thread::id g_main = std::this_thread::get_id();  // MPI's thread (FUNNELED)
// Point-to-point calls between ncclGroupStart and ncclGroupEnd, queued as one call (on one
// communicator, as the communicator makes them).
bool g_in_group = false;
std::vector<std::function<int(std::vector<MPI_Request>&)>> g_group;
ncclComm_t g_group_comm = nullptr;

ncclResult_t enqueue(ncclComm_t comm, std::function<int(std::vector<MPI_Request>&)> post) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_queue.push_back({++g_enqueued, comm, std::move(post), {}, false});
  return ncclSuccess;
}

struct IdFields {
  char magic[8];
  int root_world;
  int seq;
};

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt32:
    case ncclFloat32: return 4;
    case ncclInt64: return 8;
    case ncclFloat16:
    case ncclBfloat16: return 2;
  }
  return 0;
}
bool reducible(ncclDataType_t t, ncclRedOp_t op) {
  return (t == ncclFloat32 && (op == ncclSum || op == ncclMax)) ||
         (t == ncclBfloat16 && op == ncclSum);
}
MPI_Datatype mpi_reduce_type(ncclDataType_t t) {
  return t == ncclBfloat16 ? mg::mpi_bf16_sum().type : MPI_FLOAT;
}
MPI_Op mpi_op(ncclDataType_t t, ncclRedOp_t op) {
  if (t == ncclBfloat16) return mg::mpi_bf16_sum().op;
  return op == ncclSum ? MPI_SUM : MPI_MAX;
}

// MPI counts are ints; NCCL's are size_t. Past INT_MAX the emulator refuses instead of wrapping.
bool fits_int(size_t count, size_t elem_bytes) { return count * elem_bytes <= size_t(INT_MAX); }

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInternalError: return "internal error (emulated NCCL: an MPI call failed)";
    case ncclInvalidArgument: return "invalid argument";
    case ncclRemoteError: return "remote process exited or there was a network error (aborted)";
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
      if (msg[0] <= 0 || msg[0] >= nranks || world[size_t(msg[0])] != -1)
        return ncclInvalidArgument;
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
  return enqueue(comm, [=](std::vector<MPI_Request>& r) {
    r.resize(1);
    return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, int(count), mpi_reduce_type(t),
                          mpi_op(t, op), comm->comm, &r[0]);
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * type_bytes(t);
  if (!fits_int(count, type_bytes(t))) return ncclInvalidArgument;
  return enqueue(comm, [=](std::vector<MPI_Request>& r) {
    if (comm->rank == root && send != recv) std::memmove(recv, send, bytes);
    r.resize(1);
    return MPI_Ibcast(recv, int(bytes), MPI_BYTE, root, comm->comm, &r[0]);
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (!reducible(t, op) || !fits_int(count, 1)) return ncclInvalidArgument;
  // NCCL allows one overlap, in place: recv = send + rank * count; MPI wants separate buffers.
  const size_t size = size_t(comm->size), rank = size_t(comm->rank);
  const size_t bytes = count * type_bytes(t);
  const char* in = static_cast<const char*>(send);
  const char* out = static_cast<const char*>(recv);
  const bool overlap = out < in + bytes * size && in < out + bytes;
  if (overlap && out != in + bytes * rank) return ncclInvalidArgument;
  // The copy of an overlapping input is taken when the call starts, and lives until it ends.
  auto copy = std::make_shared<std::vector<char>>();
  return enqueue(comm, [=](std::vector<MPI_Request>& r) {
    if (overlap) copy->assign(in, in + bytes * size);
    r.resize(1);
    return MPI_Ireduce_scatter_block(overlap ? copy->data() : in, recv, int(count),
                                     mpi_reduce_type(t), mpi_op(t, op), comm->comm, &r[0]);
  });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t) {
  if (!fits_int(count, type_bytes(t))) return ncclInvalidArgument;
  const int bytes = int(count * type_bytes(t));
  const bool in_place =
      static_cast<const char*>(send) == static_cast<char*>(recv) + size_t(comm->rank) * bytes;
  return enqueue(comm, [=](std::vector<MPI_Request>& r) {
    r.resize(1);
    return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE,
                          comm->comm, &r[0]);
  });
}

// A send or receive joins the open group, or is queued alone outside one.
static ncclResult_t post(ncclComm_t comm, std::function<int(std::vector<MPI_Request>&)> f) {
  if (g_in_group) {
    if (g_group_comm && g_group_comm != comm) return ncclInvalidArgument;
    g_group_comm = comm;
    g_group.push_back(std::move(f));
    return ncclSuccess;
  }
  return enqueue(comm, std::move(f));
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t) {
  if (!fits_int(count, type_bytes(t))) return ncclInvalidArgument;
  return post(comm, [=](std::vector<MPI_Request>& r) {
    r.emplace_back();
    return MPI_Isend(buf, int(count * type_bytes(t)), MPI_BYTE, peer, 0, comm->comm, &r.back());
  });
}
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t) {
  if (!fits_int(count, type_bytes(t))) return ncclInvalidArgument;
  return post(comm, [=](std::vector<MPI_Request>& r) {
    r.emplace_back();
    return MPI_Irecv(buf, int(count * type_bytes(t)), MPI_BYTE, peer, 0, comm->comm, &r.back());
  });
}

ncclResult_t ncclGroupStart() {
  g_in_group = true;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  g_in_group = false;
  if (g_group.empty()) return ncclSuccess;
  auto calls = std::make_shared<decltype(g_group)>(std::move(g_group));
  g_group.clear();
  ncclComm_t comm = g_group_comm;
  g_group_comm = nullptr;
  return enqueue(comm, [calls](std::vector<MPI_Request>& r) {
    for (auto& c : *calls)
      if (const int rc = c(r); rc != MPI_SUCCESS) return rc;
    return MPI_SUCCESS;
  });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (!comm || !error) return ncclInvalidArgument;
  *error = comm->error;
  return ncclSuccess;
}

// Drops the communicator's queued calls (those already posted are abandoned, as a GPU abandons
// NCCL's kernels); the communicator stays allocated until ncclCommDestroy.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto it = g_queue.begin(); it != g_queue.end();)
    if (it->comm == comm) {
      it = g_queue.erase(it);
    } else {
      ++it;
    }
  comm->error = ncclRemoteError;
  return ncclSuccess;
}

namespace mg_emu {

uint64_t nccl_enqueued() { return g_enqueued; }

bool nccl_progress(uint64_t upto) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (std::this_thread::get_id() != g_main)  // looks, posts and tests nothing
    return g_queue.empty() || g_queue.front().seq > upto;
  while (!g_queue.empty() && g_queue.front().seq <= upto) {
    Queued& q = g_queue.front();
    int rc = MPI_SUCCESS, done = 0;
    if (!q.posted) {
      q.posted = true;
      rc = q.post(q.reqs);
    }
    if (rc == MPI_SUCCESS)
      rc = MPI_Testall(int(q.reqs.size()), q.reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS && q.comm) q.comm->error = ncclInternalError;
    if (rc == MPI_SUCCESS && !done) return false;
    g_queue.pop_front();
  }
  return true;
}

void nccl_drain(uint64_t upto) {
  while (!nccl_progress(upto)) sched_yield();
}

}  // namespace mg_emu
