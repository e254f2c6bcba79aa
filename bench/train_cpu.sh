#!/usr/bin/env bash
# Training step time and peak memory on the CPU: the program `shardc build`
# makes from bench/gpt_bench.shard (GPT d=512, 8 heads, 8 layers, seq 256,
# vocab 256, batch 4, fp32, AdamW) against the same model as a PyTorch 1.13
# training loop (tests/parity/torch_ref.py's GPT, from the same initial
# weights), same thread count, in the same run.  Prints one table.
#   bench/train_cpu.sh [THREADS]     (default: all cores)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
threads="${1:-$(nproc)}"
"$root/scripts/build.sh" "$root/build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$root/build/shardc" build "$root/bench/gpt_bench.shard" -o "$tmp/gpt" >/dev/null
# Same OpenBLAS kernels on both sides (Debian's OpenBLAS 0.3.21 may not
# recognise newer CPUs and fall back to slow generic kernels).
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
"$tmp/gpt/train" --steps 0 --save "$tmp/init.safetensors" --quiet
THREADS="$threads" /usr/bin/python3 "$root/bench/train_cpu.py" "$tmp/gpt/train" "$tmp/init.safetensors" "$tmp"
echo "(OpenBLAS core type: ${OPENBLAS_CORETYPE:-default})"
