#include "data/batch.h"

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

}  // namespace mg
