#!/usr/bin/env bash
# Installs the Debian 12 packages shardc needs, only those missing (idempotent).
# Usage: scripts/deps.sh            (run as root, or with sudo available)
set -euo pipefail

pkgs=(
  gcc make cmake flex bison           # the compiler's build
  clang libclang-dev                  # libclang for `use`, clang + libFuzzer for fuzzing
  libclang-rt-14-dev                  # sanitizer and fuzzer runtimes for clang
  libopenblas-dev                     # cblas for the cpu runtime
  libopenmpi-dev openmpi-bin          # MPI for the distributed cpu target
  python3 python3-numpy python3-torch # reference tests against PyTorch
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The CUDA toolkit is not a Debian package here and never required: the cuda
# target's GPU libraries and the nvcc tests are built when it is found, and
# its host build (--target cuda-host) runs everywhere.  Say what is there.
cuda_report() {
  local nvcc
  nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
  if [ -z "$nvcc" ]; then
    echo "deps: CUDA toolkit not found (nvcc): --target cuda is not built, the CUDA tests run on the host build only" >&2
    return
  fi
  local ver root nccl=no lt=no gpu=no
  ver=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  ls "$root"/lib*/libnccl.so* >/dev/null 2>&1 && nccl=yes
  ls "$root"/lib*/libcublasLt.so* >/dev/null 2>&1 && lt=yes
  nvidia-smi -L >/dev/null 2>&1 && gpu=yes
  echo "deps: CUDA $ver at $root (cuBLASLt $lt, NCCL $nccl, GPU $gpu)" >&2
}
if [ -z "${SHARDC_DEPS_QUIET:-}" ]; then cuda_report; fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
