#!/usr/bin/env bash
# Training speed end to end: the program `shardc build` makes from
# bench/gpt.shard (GPT d=512, 8 heads, 8 layers, seq 256, vocab 256, batch 4)
# against the same model as a PyTorch 1.13 CPU training loop
# (bench/train_torch.py), same thread count. Prints the median step time.
#
#   bench/train.sh [-t THREADS] [-n STEPS] [BUILD]
#
# BUILD is a shardc build tree (default build/, built if missing). Both
# sides run with OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = THREADS (default:
# the cores) and the same OPENBLAS_CORETYPE (see bench/kernels.sh). The first
# step of each is left out (page faults, thread start-up).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cores=$(nproc)
threads=$cores
steps=6
build=""
while [ $# -gt 0 ]; do
  case "$1" in
    -t) threads="$2"; shift 2 ;;
    -n) steps="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) build="$1"; shift ;;
  esac
done
build="${build:-$root/build}"
[ -x "$build/shardc" ] || "$root/scripts/build.sh" "$build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$build/shardc" build "$root/bench/gpt.shard" -o "$tmp/gpt" >/dev/null
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"

median() { sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

"$tmp/gpt/train" --steps $((steps + 1)) --quiet --log "$tmp/log.jsonl" >/dev/null
ours=$(tail -n +2 "$tmp/log.jsonl" | sed 's/.*"step_ms":\([0-9.e+-]*\).*/\1/' | median)
torch=$(/usr/bin/python3 "$root/bench/train_torch.py" "$threads" "$steps" | cut -f2 | median)
echo "GPT d=512 heads=8 layers=8 T=256 V=256 B=4, f32, $threads thread(s), $cores cores;" \
     "median of $steps steps; OpenBLAS ${OPENBLAS_CORETYPE:-default}"
printf "%-22s %10s\n" "" "ms/step"
printf "%-22s %10.1f\n" "shardc program" "$ours" "pytorch 1.13" "$torch"
awk -v a="$ours" -v b="$torch" 'BEGIN { printf "%-22s %9.2fx\n", "torch/shardc", b / a }'
