// libFuzzer target: the safetensors reader (checkpoint/safetensors.h) on arbitrary files, as
// `megatron convert --direction hf-to-megatron` opens model.safetensors. An accepted file must
// then convert every tensor to f32.
#include "checkpoint/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mg;
  const std::string path = fuzz::scratch_path("model.safetensors");
  fuzz::write_file(path, fuzz::as_text(data, size));
  fuzz::expect_usage_errors_only([&] {
    const SafetensorsReader reader(path);
    double sum = 0;
    for (const auto& [name, t] : reader.tensors())
      for (float v : reader.get(name).to_f32()) sum += double(v);
    fuzz::keep(sum);
  });
  return 0;
}
