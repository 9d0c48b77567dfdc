#include "data/batch.h"

#include "core/error.h"

namespace mg {

Batch make_batch(const SampleDataset& ds, int64_t first, int64_t B, int64_t S,
                 const BatchOptions& opt) {
  Batch b;
  b.B = B;
  b.S = S;
  b.tokens.resize(B * S);
  b.labels.resize(B * S);
  b.position_ids.resize(B * S);
  b.loss_mask.resize(B * S);
  if (opt.reset_attention_mask) b.attention_start.resize(B * S);
  std::vector<int32_t> text(S + 1);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t real = ds.sample((first + r) % ds.size(), text.data());
    int32_t pos = 0, start = 0;
    for (int64_t t = 0; t < S; ++t) {
      if (opt.reset_attention_mask) b.attention_start[r * S + t] = start;
      if (text[t] == opt.eod) start = int32_t(t + 1);
      const int64_t i = r * S + t;
      b.tokens[i] = text[t];
      b.labels[i] = text[t + 1];
      b.position_ids[i] = pos++;
      const bool padded = t + 1 >= real;
      b.loss_mask[i] = padded || (opt.eod_mask_loss && text[t] == opt.eod) ? 0.f : 1.f;
      if (opt.reset_position_ids && text[t] == opt.eod) pos = 0;
    }
  }
  return b;
}

Batch slice_for_context_parallel(const Batch& b, const CpLayout& cp) {
  MG_CHECK(cp.S == b.S && b.S % (2 * cp.size) == 0, "context parallelism over ", cp.size,
           " ranks needs a sequence length divisible by ", 2 * cp.size, " (got ", b.S, ")");
  const int64_t S_local = cp.local_length();
  Batch out;
  out.B = b.B;
  out.S = S_local;
  auto slice = [&](const auto& in, auto& dst) {
    if (in.empty()) return;
    dst.resize(size_t(b.B * S_local));
    for (int64_t r = 0; r < b.B; ++r)
      for (int64_t t = 0; t < S_local; ++t)
        dst[size_t(r * S_local + t)] = in[size_t(r * b.S + cp.position(t))];
  };
  slice(b.tokens, out.tokens);
  slice(b.labels, out.labels);
  slice(b.position_ids, out.position_ids);
  slice(b.loss_mask, out.loss_mask);
  slice(b.attention_start, out.attention_start);
  return out;
}

}  // namespace mg
