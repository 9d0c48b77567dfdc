#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace mg {
namespace {

TEST(Tensor, ShapeBytesAlignmentAndZeroFill) {
  Tensor t({3, 5}, DType::F32);
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<float>()) % 64, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.data<float>()[i], 0.f);
  EXPECT_EQ(shape_str(t.shape()), "[3, 5]");
  Tensor i({4}, DType::I32);
  EXPECT_EQ(i.nbytes(), 16u);
}

TEST(Tensor, WrongDtypeAccessIsAnInternalError) {
  Tensor t({2}, DType::I32);
  EXPECT_THROW(t.data<float>(), InternalError);
}

TEST(Tensor, ViewSharesStorage) {
  Tensor t({2, 2});
  TensorView v = t.view();
  v.data<float>()[3] = 7.f;
  EXPECT_EQ(t.data<float>()[3], 7.f);
  EXPECT_EQ(v.dim(-1), 2);
}

}  // namespace
}  // namespace mg
