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
#          against its tolerance, the training-parity curves, the gtest summary, then the GPU
#          attention and training-throughput benchmarks; exit status 0 only if all tests passed.
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
OMP_NUM_THREADS=8 timeout 200 "$RUN/gpu_tests" 2>&1 | tee -a "$LOG"
status=${PIPESTATUS[0]}
# The GPU benchmarks (figures only; they do not change the exit status): attention kernels
# (about 20 s), then training throughput (at most 6 x 40 s).
echo "== GPU attention kernels (bench/gpu_attention.sh)" | tee -a "$LOG"
MG_GPU_ATTENTION="$RUN/gpu_attention" TIMEOUT=40 bench/gpu_attention.sh 2>&1 | tee -a "$LOG"
echo "== GPU training throughput (bench/gpu_train_throughput.sh)" | tee -a "$LOG"
TIMEOUT=40 bench/gpu_train_throughput.sh gpt2-124m gpt2-774m 2>&1 | tee -a "$LOG"
# On the GPU machine a test skipped for want of a device means it was not usable: a failure
# here. (The two-rank tests skip, and say so, where the machine has no mpirun.)
if [ "$status" -eq 0 ] && grep -q 'no CUDA device' "$LOG"; then
  echo "gpu-check: tests were skipped (no usable CUDA device): failing" | tee -a "$LOG"
  status=1
fi
echo "== gpu-check exit status $status" | tee -a "$LOG"
exit "$status"
