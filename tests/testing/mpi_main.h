// The main() of a test binary that runs inside mpirun: gtest's report from rank 0 only, and
// every rank's result in the exit code.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

namespace mg::testing {

// After MpiSession: runs every test on every rank; non-zero when a test failed on any rank.
inline int run_tests_on_every_rank(int* argc, char** argv, int world_rank) {
  ::testing::InitGoogleTest(argc, argv);
  if (world_rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}

}  // namespace mg::testing
