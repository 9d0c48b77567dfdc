// Skips the calling gtest (reported SKIPPED, with the runtime's reason) when no CUDA device is
// usable: the gpu tests on machines without a GPU.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/device.h"

#define MG_REQUIRE_GPU()                                                         \
  do {                                                                           \
    std::string why;                                                             \
    if (!::mg::cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)
