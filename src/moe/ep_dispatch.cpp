// The EP token exchange (ep_dispatch.h). The all-to-all-v lands rows source-major (for each
// source rank, its rows for each of this rank's local experts); the experts want them
// expert-major, so each (source, local expert) block moves whole: EP x LE block copies.
#include "moe/ep_dispatch.h"

#include "core/checked_math.h"
#include "core/error.h"
#include "tensor/device_runtime.h"

namespace mg::moe {

namespace {

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s = checked_add(s, x, "MoE rows");
  return s;
}

// Scratch memory where `like` lives (a device buffer under --device cuda).
class Scratch {
 public:
  Scratch(size_t bytes, const void* like) : bytes_(bytes), device_(runtime::where(like)) {
    if (bytes_) p_ = runtime::alloc(bytes_, device_);
  }
  ~Scratch() {
    if (p_) runtime::release(p_, device_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  size_t bytes_;
  Device device_;
  void* p_ = nullptr;
};

// Moves each (source s, local expert l) block of rows between the source-major order of the
// all-to-all-v and the expert-major order of the experts; to_experts picks the direction.
void reorder(const EpRoute& r, const char* from, char* to, int64_t row_bytes, bool to_experts) {
  const int64_t EP = r.ep_size, LE = r.local_experts;
  std::vector<int64_t> source_major(size_t(EP * LE)), expert_major(source_major.size());
  int64_t at = 0;
  for (int64_t s = 0; s < EP; ++s)
    for (int64_t l = 0; l < LE; ++l) {
      source_major[size_t(s * LE + l)] = at;
      at += r.recv[size_t(s * LE + l)];
    }
  at = 0;
  for (int64_t l = 0; l < LE; ++l)
    for (int64_t s = 0; s < EP; ++s) {
      expert_major[size_t(s * LE + l)] = at;
      at += r.recv[size_t(s * LE + l)];
    }
  const Device df = runtime::where(from), dt = runtime::where(to);
  for (size_t b = 0; b < source_major.size(); ++b) {
    if (r.recv[b] == 0) continue;
    const int64_t src = to_experts ? source_major[b] : expert_major[b];
    const int64_t dst = to_experts ? expert_major[b] : source_major[b];
    runtime::copy(to + dst * row_bytes, dt, from + src * row_bytes, df,
                  size_t(r.recv[b] * row_bytes));
  }
}

void check_group(const Communicator& ep, const EpRoute& r) {
  MG_CHECK(ep.size() == r.ep_size && ep.rank() == r.ep_rank, "MoE: a route of EP rank ", r.ep_rank,
           " of ", r.ep_size, " used on rank ", ep.rank(), " of ", ep.size());
}

// Element counts of one all-to-all-v of rows of row_elems elements.
std::vector<int64_t> elements(const std::vector<int64_t>& rows, int64_t row_elems) {
  std::vector<int64_t> n(rows.size());
  for (size_t j = 0; j < rows.size(); ++j) n[j] = checked_mul(rows[j], row_elems, "MoE elements");
  return n;
}

}  // namespace

int64_t EpRoute::rows_in() const { return sum(send_per_expert); }
int64_t EpRoute::rows_out() const { return sum(recv); }

std::vector<int64_t> EpRoute::send_per_rank() const {
  std::vector<int64_t> n(size_t(ep_size), 0);
  for (int64_t g = 0; g < num_experts; ++g)
    n[size_t(g / local_experts)] += send_per_expert[size_t(g)];
  return n;
}

std::vector<int64_t> EpRoute::recv_per_rank() const {
  std::vector<int64_t> n(size_t(ep_size), 0);
  for (int64_t s = 0; s < ep_size; ++s)
    for (int64_t l = 0; l < local_experts; ++l) n[size_t(s)] += recv[size_t(s * local_experts + l)];
  return n;
}

std::vector<int64_t> EpRoute::rows_per_local_expert() const {
  std::vector<int64_t> n(size_t(local_experts), 0);
  for (int64_t s = 0; s < ep_size; ++s)
    for (int64_t l = 0; l < local_experts; ++l) n[size_t(l)] += recv[size_t(s * local_experts + l)];
  return n;
}

EpRoute ep_route(Communicator& ep, const std::vector<int64_t>& rows_per_expert) {
  EpRoute r;
  r.ep_size = ep.size();
  r.ep_rank = ep.rank();
  r.num_experts = int64_t(rows_per_expert.size());
  MG_CHECK(r.num_experts > 0 && r.num_experts % r.ep_size == 0, "MoE: ", r.num_experts,
           " experts do not split over ", r.ep_size, " expert-parallel ranks");
  for (int64_t n : rows_per_expert) MG_CHECK(n >= 0, "MoE: negative row count ", n);
  r.local_experts = r.num_experts / r.ep_size;
  r.send_per_expert = rows_per_expert;
  r.recv.assign(size_t(r.num_experts), 0);
  // Experts are contiguous per rank, so the counts already lie in chunks of LE per rank.
  ep.all_to_all(r.send_per_expert.data(), r.recv.data(), r.local_experts, DType::I64);
  return r;
}

void ep_dispatch(Communicator& ep, const EpRoute& r, const void* rows, void* out, int64_t H,
                 DType dtype) {
  const int64_t row_bytes = checked_mul(H, int64_t(dtype_size(dtype)), "MoE row bytes");
  check_group(ep, r);
  Scratch landed(size_t(checked_mul(r.rows_out(), row_bytes, "MoE dispatch bytes")), out);
  ep.all_to_all_v(rows, elements(r.send_per_rank(), H).data(), landed.get(),
                  elements(r.recv_per_rank(), H).data(), dtype);
  reorder(r, landed.get(), static_cast<char*>(out), row_bytes, /*to_experts=*/true);
}

void ep_combine(Communicator& ep, const EpRoute& r, const void* rows, void* out, int64_t H,
                DType dtype) {
  const int64_t row_bytes = checked_mul(H, int64_t(dtype_size(dtype)), "MoE row bytes");
  check_group(ep, r);
  Scratch by_source(size_t(checked_mul(r.rows_out(), row_bytes, "MoE combine bytes")), rows);
  reorder(r, static_cast<const char*>(rows), by_source.get(), row_bytes, /*to_experts=*/false);
  ep.all_to_all_v(by_source.get(), elements(r.recv_per_rank(), H).data(), out,
                  elements(r.send_per_rank(), H).data(), dtype);
}

int64_t ep_dispatch_bytes(const EpRoute& r, int64_t H, DType dtype) {
  const std::vector<int64_t> per_rank = r.send_per_rank();
  int64_t rows = 0;
  for (int j = 0; j < r.ep_size; ++j)
    if (j != r.ep_rank) rows += per_rank[size_t(j)];
  return checked_product({rows, H, int64_t(dtype_size(dtype))}, "MoE dispatch bytes");
}

}  // namespace mg::moe
