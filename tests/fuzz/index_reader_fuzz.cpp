// libFuzzer target: Megatron's indexed dataset reader (data/indexed_dataset.h) on arbitrary
// .idx/.bin pairs. Input: a u32 little-endian length L, then L bytes of P.idx, then P.bin (the
// rest). An accepted pair must then serve every token of every sequence.
#include <algorithm>
#include <cstring>
#include <vector>

#include "data/indexed_dataset.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mg;
  uint32_t idx_len = 0;
  if (size >= 4) std::memcpy(&idx_len, data, 4);
  const std::string_view rest = fuzz::as_text(data, size).substr(std::min<size_t>(size, 4));
  const std::string_view idx = rest.substr(0, std::min<size_t>(idx_len, rest.size()));
  const std::string_view bin = rest.substr(idx.size());
  const std::string prefix = fuzz::scratch_path("d");
  fuzz::write_file(prefix + ".idx", idx);
  fuzz::write_file(prefix + ".bin", bin);
  fuzz::expect_usage_errors_only([&] {
    const IndexedDataset ds(prefix);
    std::vector<int32_t> tokens;
    int64_t sum = 0;
    for (int64_t i = 0; i < ds.num_sequences(); ++i) {
      const int64_t n = ds.sequence_length(i);
      tokens.resize(size_t(n));
      ds.get(i, 0, n, tokens.data());
      if (n > 1) ds.get(i, 1, n - 1, tokens.data());  // an offset read, as GPTDataset does
      for (int32_t t : tokens) sum += t;
    }
    // The boundaries the GPT dataset walks: every document's sequences exist.
    for (int64_t k = 0; k < ds.num_documents(); ++k) {
      const int64_t b0 = ds.document_bound(k), b1 = ds.document_bound(k + 1);
      fuzz::require(b0 >= 0 && b0 <= b1 && b1 <= ds.num_sequences(),
                    "document boundaries within the sequences, in order");
    }
    fuzz::keep(sum);
  });
  return 0;
}
