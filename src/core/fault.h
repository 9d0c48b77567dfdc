// Fault injection for the no-hang tests (docs/reliability.md): MG_FAULT_STOP=RANK:SITE:ITER
// makes world rank RANK stop itself with SIGSTOP the first time it reaches SITE during iteration
// ITER, as a hung process would (alive, silent, holding its connections). Sites: forward,
// backward, optimizer, checkpoint-save. Unset, a fault point costs one test of a flag.
#pragma once
#include <cstdint>

namespace mg::fault {

enum class Site { Forward, Backward, Optimizer, CheckpointSave };

// Reads MG_FAULT_STOP for this rank (a malformed value is a UsageError naming it).
void arm(int world_rank);
// The training loop, at the start of each iteration.
void set_iteration(int64_t iteration);
// Stops this process here if MG_FAULT_STOP names this rank, this site and the iteration.
void point(Site site);

}  // namespace mg::fault
