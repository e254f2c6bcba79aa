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
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
