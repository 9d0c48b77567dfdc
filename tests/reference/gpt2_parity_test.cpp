// PyTorch parity (label `reference`): our GPT-2 against the float64 PyTorch model in
// gpt2_reference.py (written for this test); the run and its tolerances: testing/pytorch_parity.h.
#include "testing/pytorch_parity.h"

namespace mg {
namespace {

TEST(GPT2Parity, MatchesPyTorch) {
  testing::ParityCase pc;
  pc.script = "gpt2_reference.py";
  GPTConfig& c = pc.model;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 32;
  c.vocab_size = 500;  // padded to 512: the padded rows take part in the softmax, as in Megatron
  testing::check_pytorch_parity(pc);
}

}  // namespace
}  // namespace mg
