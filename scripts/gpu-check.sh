#!/usr/bin/env bash
# The GPU check: CPU-vs-CUDA kernel parity and GPU training parity (ctest label gpu) on a GPU
# machine, with a log.
#
# The GPU machines here have CUDA 13, CMake and ninja but none of our other build dependencies
# (oneDNN, OpenMPI, GoogleTest, nlohmann-json) and no package registry, so the test binary is
# built on a development machine and carried over with the one non-system library it needs:
#   here:  scripts/gpu-check.sh pack   -> gpu-pack/pack.tar.gz (git-ignored): gpu_tests, megatron
#          and gpu_attention built
#          for x86-64-v3 (AVX2 + FMA, so any recent server CPU runs the CPU reference), sm_90 +
#          PTX, and the shared libraries they need from this machine (oneDNN, OpenMPI, ...)
#   there: scripts/gpu-check.sh        (device run with carry ["gpu-pack"]; well under 8 minutes)
#          -> $OUT/gpu-check.log (or gpu-pack/gpu-check.log): nvidia-smi, every op's max error
#          against its tolerance and the training-parity curves (each test in its own process;
#          a failed one rerun under compute-sanitizer or CUDA_LAUNCH_BLOCKING=1), a table of the
#          tests, then the GPU attention and training-throughput benchmarks and the 774M phase
#          timers; exit status 0 only if all tests passed.
# cuBLASLt and the CUDA runtime's driver come from the GPU machine's own CUDA 13.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-run}" = pack ]; then
  set -e
  ./scripts/setup.sh
  mkdir -p build-gpu
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_CUDA=ON -DMG_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DCMAKE_CUDA_ARCHITECTURES=90 >build-gpu/configure.log 2>&1 ||
    { tail -20 build-gpu/configure.log >&2; exit 1; }
  cmake --build build-gpu --target gpu_tests megatron gpu_attention -j2 >>build-gpu/configure.log 2>&1 ||
    { tail -20 build-gpu/configure.log >&2; exit 1; }
  # Staged in gpu-pack.tmp/, then carried as one gzip'ed tar (the binaries and oneDNN are ~70 MB,
  # over the device tool's 64 MiB carry limit; ~21 MB packed), unpacked by the run below.
  rm -rf gpu-pack gpu-pack.tmp && mkdir -p gpu-pack gpu-pack.tmp/lib
  cp build-gpu/tests/gpu_tests build-gpu/megatron build-gpu/gpu_attention gpu-pack.tmp/
  # Every shared library the two binaries load, except the C/C++ runtime and CUDA's own
  # (oneDNN, OpenCL, OpenMP, OpenMPI and its helpers; OpenMPI is only loaded, never initialized,
  # by a rank started without mpirun).
  ldd build-gpu/tests/gpu_tests build-gpu/megatron build-gpu/gpu_attention | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
    grep -Ev '^(libc|libm|libmvec|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libcuda|libcublas|libcublasLt|libnccl|libcudart)\.so' |
    sort -u | while read -r name path; do cp -L "$path" "gpu-pack.tmp/lib/$name"; done
  strip --strip-unneeded gpu-pack.tmp/gpu_tests gpu-pack.tmp/megatron gpu-pack.tmp/gpu_attention
  tar czf gpu-pack/pack.tar.gz -C gpu-pack.tmp .
  rm -rf gpu-pack.tmp
  du -sh gpu-pack
  echo "gpu-check: packed; on the GPU machine run scripts/gpu-check.sh with carry [\"gpu-pack\"]"
  exit 0
fi

LOG=${OUT:-gpu-pack}/gpu-check.log
mkdir -p "$(dirname "$LOG")"
[ -f gpu-pack/pack.tar.gz ] || { echo "gpu-check: no gpu-pack/pack.tar.gz: run 'scripts/gpu-check.sh pack' on a development machine and carry gpu-pack" | tee "$LOG"; exit 1; }
# Unpacked beside gpu-pack/ (git-ignored), so gpu-pack/ itself stays the 20 MB to carry.
RUN=$PWD/gpu-pack.run
rm -rf "$RUN" && mkdir -p "$RUN" && tar xzf gpu-pack/pack.tar.gz -C "$RUN"
# cuBLASLt 13: the toolkit's library folder, else the pip wheel PyTorch brings.
CUBLAS_DIR=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null); do
  [ -e "$d/libcublasLt.so.13" ] && { CUBLAS_DIR=$d; break; }
done
export LD_LIBRARY_PATH="$RUN/lib${CUBLAS_DIR:+:$CUBLAS_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  echo "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1
  echo "cuBLASLt from: ${CUBLAS_DIR:-not found}"
  echo "== CPU vs CUDA kernel parity (label gpu)"
} | tee "$LOG"
# The training-parity test runs `megatron train --device cuda|cpu` from the pack.
export MG_BINARY="$RUN/megatron"
export OMP_NUM_THREADS=8
# Each test in a process of its own, under its own timeout: a kernel that faults leaves the CUDA
# context unusable and one that hangs would stop the run, so neither may take the other tests
# with it. A failed test runs again to say where: under compute-sanitizer (memcheck, then
# racecheck for the attention kernels) when the machine has it, else with CUDA_LAUNCH_BLOCKING=1
# so a faulting kernel is named by the check after its own launch.
TESTS=$("$RUN/gpu_tests" --gtest_list_tests 2>/dev/null |
  awk '/^[^ ].*\.$/ { suite = $1; next } /^  [^ ]/ && suite != "" { print suite $1 }')
[ -n "$TESTS" ] || { echo "gpu-check: gpu_tests lists no tests (does it start? try $RUN/gpu_tests)" | tee -a "$LOG"; exit 1; }
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "compute-sanitizer: ${SANITIZER:-not found}" | tee -a "$LOG"
status=0 failed="" summary=""
for t in $TESTS; do
  t0=$SECONDS
  timeout 120 "$RUN/gpu_tests" --gtest_filter="$t" 2>&1 | grep -v '^Running main()' | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  case $rc in 0) r=ok ;; 124) r="TIMEOUT (120 s)" ;; *) r="FAILED (exit $rc)" ;; esac
  [ "$rc" -eq 0 ] || { status=1; failed="$failed $t"; }
  summary="$summary$(printf '%-72s %-18s %4d s' "$t" "$r" $((SECONDS - t0)))"$'\n'
done
for t in $failed; do
  [ $SECONDS -lt 330 ] || { echo "== (no time left to rerun $t)" | tee -a "$LOG"; continue; }
  if [ -n "$SANITIZER" ] && [[ $t == CudaParity.* ]]; then
    tools="memcheck"; [[ $t == *Attention* ]] && tools="memcheck racecheck"
    for tool in $tools; do
      echo "== rerun $t under compute-sanitizer --tool $tool" | tee -a "$LOG"
      timeout 90 "$SANITIZER" --tool "$tool" --print-limit 10 "$RUN/gpu_tests" --gtest_filter="$t" 2>&1 |
        grep -E '=========|Failure|error|Error' | head -60 | tee -a "$LOG"
    done
  else
    echo "== rerun $t with CUDA_LAUNCH_BLOCKING=1" | tee -a "$LOG"
    CUDA_LAUNCH_BLOCKING=1 timeout 120 "$RUN/gpu_tests" --gtest_filter="$t" 2>&1 |
      grep -E 'Failure|error|Error|check|FAILED' | head -40 | tee -a "$LOG"
  fi
done
{ echo "== gpu tests, one process each (${SECONDS} s so far)"; printf '%s' "$summary"; } | tee -a "$LOG"
# The GPU benchmarks (figures only; they do not change the exit status): attention kernels
# (about 20 s), training throughput (at most 6 x 35 s), then where a 774M step's time goes
# (the phase timers of --timing-log-level 2, which synchronize the GPU per phase).
echo "== GPU attention kernels (bench/gpu_attention.sh)" | tee -a "$LOG"
MG_GPU_ATTENTION="$RUN/gpu_attention" TIMEOUT=40 bench/gpu_attention.sh 2>&1 | tee -a "$LOG"
echo "== GPU training throughput (bench/gpu_train_throughput.sh)" | tee -a "$LOG"
TIMEOUT=35 bench/gpu_train_throughput.sh gpt2-124m gpt2-774m 2>&1 | tee -a "$LOG"
if [ $SECONDS -lt 420 ]; then
  echo "== GPT-2 774M phase timers (--timing-log-level 2, iteration 4 of 4)" | tee -a "$LOG"
  out=$(timeout 40 "$RUN/megatron" train --mock-data --device cuda --bf16 --num-layers 36 \
      --hidden-size 1280 --num-attention-heads 20 --seq-length 1024 --vocab-size 50304 \
      --micro-batch-size 4 --global-batch-size 4 --train-iters 4 --lr 1e-4 --log-interval 1 \
      --timing-log-level 2 --attention-dropout 0 --hidden-dropout 0 2>&1)
  last=$(echo "$out" | awk '/iteration +4\// { on = 1 } on' | head -40)
  echo "${last:-$(echo "$out" | tail -5)}" | tee -a "$LOG"
fi
# On the GPU machine a test skipped for want of a device means it was not usable: a failure
# here. (The two-rank tests skip, and say so, where the machine has no mpirun.)
if [ "$status" -eq 0 ] && grep -q 'no CUDA device' "$LOG"; then
  echo "gpu-check: tests were skipped (no usable CUDA device): failing" | tee -a "$LOG"
  status=1
fi
echo "== gpu-check exit status $status (${SECONDS} s)" | tee -a "$LOG"
exit "$status"
