#include "inference/kv_cache.h"

#include <algorithm>

#include "backend/dispatch.h"
#include "core/checked_math.h"
#include "core/error.h"

namespace mg {

KvCache::KvCache(int64_t layers, int64_t first_layer, int64_t blocks, int64_t block_size,
                 int64_t row_width, DType dtype, Device device)
    : first_layer_(first_layer), block_size_(block_size), row_width_(row_width), dtype_(dtype) {
  MG_CHECK(blocks > 0 && block_size > 0 && row_width > 0, "KV cache of ", blocks, " blocks of ",
           block_size, " rows of ", row_width);
  MG_CHECK(blocks * block_size < (int64_t(1) << 31), "KV cache rows in 32 bits");
  for (int64_t l = 0; l < layers; ++l)
    pools_.emplace_back(Shape{blocks * block_size, row_width}, dtype, device);
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 first
}

void* KvCache::layer(int64_t global_layer) const {
  const int64_t l = global_layer - first_layer_;
  MG_CHECK(l >= 0 && l < int64_t(pools_.size()), "layer ", global_layer, " not in the KV cache");
  return const_cast<void*>(pools_[size_t(l)].raw());
}

bool KvCache::allocate(int64_t n, std::vector<int32_t>& blocks) {
  if (n > int64_t(free_.size())) return false;
  for (int64_t i = 0; i < n; ++i) {
    blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvCache::release(std::vector<int32_t>& blocks) {
  free_.insert(free_.end(), blocks.rbegin(), blocks.rend());
  blocks.clear();
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (const Tensor& t : pools_) b += int64_t(t.nbytes());
  return b;
}

namespace {
Tensor on_device(const std::vector<int32_t>& v) {
  Tensor t({std::max<int64_t>(1, int64_t(v.size()))}, DType::I32, ops::device());
  if (!v.empty()) ops::copy(t.raw(), ops::device(), v.data(), Device::CPU, v.size() * 4);
  return t;
}
}  // namespace

KvStep::KvStep(const KvCache& cache, std::vector<KvSequence> seqs)
    : cache_(cache), seqs_(std::move(seqs)) {
  const int64_t bs = cache.block_size();
  std::vector<int32_t> write, read;
  auto row_of = [&](const KvSequence& s, int64_t pos) {
    MG_CHECK(pos / bs < int64_t(s.blocks->size()), "KV cache: position ", pos, " beyond ",
             s.blocks->size(), " blocks");
    return int32_t((*s.blocks)[size_t(pos / bs)] * bs + pos % bs);
  };
  for (const KvSequence& s : seqs_) {
    MG_CHECK(s.row0 == rows_ && s.n > 0, "KV step: sequences must cover the rows in order");
    rows_ += s.n;
    max_len_ = std::max(max_len_, s.past + s.n);
    for (int64_t p = s.past; p < s.past + s.n; ++p) write.push_back(row_of(s, p));
    read_offset_.push_back(int64_t(read.size()));
    for (int64_t p = 0; p < s.past + s.n; ++p) read.push_back(row_of(s, p));
  }
  write_ = on_device(write);
  read_ = on_device(read);
}

void KvStep::forward(int64_t layer, cpu::MatOut out, const cpu::Heads& q, const cpu::Heads& k,
                     const cpu::Heads& v, int64_t NH, int64_t NKV, int64_t HD) const {
  const DType t = cache_.dtype();
  const int64_t W = cache_.row_width(), es = int64_t(dtype_size(t));
  MG_CHECK(k.dtype == t && W == 2 * NKV * HD && k.heads_per_group == 1 &&
               static_cast<char*>(v.data) == static_cast<char*>(k.data) + HD * es &&
               v.row_stride == k.row_stride && v.group_stride == k.group_stride,
           "KV cache rows of ", W, " elements do not fit the layer's K/V views");
  void* pool = cache_.layer(layer);
  // Each KV group's [k, v] (adjacent in the fused QKV rows) into its place in the rows.
  for (int64_t g = 0; g < NKV; ++g)
    ops::scatter_rows(static_cast<char*>(pool) + g * 2 * HD * es, W,
                      static_cast<const char*>(k.data) + g * k.group_stride * es, k.row_stride,
                      write_.data<int32_t>(), rows_, 2 * HD, t);
  if (kv_.numel() < max_len_ * W) kv_ = Tensor({max_len_, W}, t, ops::device());
  if (lse_.numel() < NH * rows_)
    lse_ = Tensor({NH * std::max<int64_t>(rows_, 1)}, DType::F32, ops::device());
  const ops::Heads kc{kv_.raw(), t, W, 2 * HD, 1};
  for (size_t i = 0; i < seqs_.size(); ++i) {
    const KvSequence& s = seqs_[i];
    const int64_t len = s.past + s.n;
    ops::gather_rows(kv_.raw(), pool, read_.data<int32_t>() + read_offset_[i], len, W, t);
    ops::AttentionShape a{1, s.n, len, NH, NKV, HD};
    a.q_pos0 = s.past;
    ops::attention_forward(
        {static_cast<char*>(out.data) + s.row0 * NH * HD * int64_t(dtype_size(out.dtype)),
         out.dtype},
        lse_.data<float>(), q.shifted(s.row0 * q.row_stride), kc, kc.shifted(HD), a);
  }
}

}  // namespace mg
