#!/usr/bin/env bash
# Kernel speed: libshardrt's f32 kernels against the same operations in
# PyTorch 1.13 (/usr/bin/python3, python3-torch) at the sizes of a GPT with
# d=512, 8 heads, seq 256, vocab 256, batch B, with the same thread count on
# both sides, in one run. Prints a table of milliseconds per call.
#
#   bench/kernels.sh [-t THREADS] [-b B] [-r REPS] [-s median|min]
#                    [--baseline DIR] [BUILD]
#
# BUILD is a shardc build tree (its runtime/libshardrt.a) or a standalone
# runtime build (libshardrt.a); default build/, configured and built if
# missing. --baseline DIR adds a column for another libshardrt build (say,
# the library before a change). THREADS defaults to the number of cores;
# -s min reports the fastest call instead of the median (on a busy machine);
# BENCH_CLOCK=cpu in the environment times CPU instead of wall time (with
# -t 1 on a machine others are using).
#
# Both sides run with OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = THREADS and
# torch.set_num_threads(THREADS). They load the same OpenBLAS, so both get
# the same OPENBLAS_CORETYPE: when unset and OpenBLAS falls back to Prescott
# (it does not know recent CPUs), the one generated programs pick
# (cg_blas_setup: SkylakeX with AVX-512, Haswell with AVX2).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cores=$(nproc)
threads=$cores
B=4
reps=10
stat=median
baseline=""
build=""
while [ $# -gt 0 ]; do
  case "$1" in
    -t) threads="$2"; shift 2 ;;
    -b) B="$2"; shift 2 ;;
    -r) reps="$2"; shift 2 ;;
    -s) stat="$2"; shift 2 ;;
    --baseline) baseline="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) build="$1"; shift ;;
  esac
done
build="${build:-$root/build}"
python=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The static library of a build tree, built if missing.
lib_of() {
  local dir="$1"
  for f in "$dir/runtime/libshardrt.a" "$dir/libshardrt.a"; do
    [ -f "$f" ] && { echo "$f"; return; }
  done
  echo "bench: building $dir" >&2
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$dir" -j"$(nproc)" --target shardrt >/dev/null
  echo "$dir/runtime/libshardrt.a"
}

# bench_kernels against one library: the BLAS it was configured with, and
# -fopenmp always (harmless when the library does not use OpenMP).
compile() {
  local lib="$1" out="$2" dir blas
  dir="$(dirname "$lib")"
  [ "$(basename "$dir")" = runtime ] && dir="$(dirname "$dir")"
  blas=$(sed -n 's/^SHARDRT_BLAS_LIB:FILEPATH=//p' "$dir/CMakeCache.txt" 2>/dev/null || true)
  cc -O2 -std=gnu11 -fopenmp -I"$root/runtime" "$root/bench/kernels.c" "$lib" \
     "${blas:--lopenblas}" -lm -o "$out"
}

lib=$(lib_of "$build")
compile "$lib" "$tmp/bench"
if [ -n "$baseline" ]; then
  compile "$(lib_of "$baseline")" "$tmp/bench_base"
fi

if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "$("$tmp/bench" --corename)" = Prescott ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"

"$tmp/bench" "$threads" "$B" "$reps" "$stat" >"$tmp/ours"
[ -n "$baseline" ] && "$tmp/bench_base" "$threads" "$B" "$reps" "$stat" >"$tmp/base"
if "$python" -c 'import torch' 2>/dev/null; then
  "$python" "$root/bench/kernels_torch.py" "$threads" "$B" "$reps" "$stat" >"$tmp/torch"
else
  echo "bench: $python cannot import torch; the torch column is empty" >&2
  : >"$tmp/torch"
fi

echo "GPT d=512 heads=8 T=256 V=256 B=$B, f32, $threads thread(s), $stat of $reps;" \
     "OpenBLAS $("$tmp/bench" --corename), $cores cores"
awk -F'\t' -v base="$baseline" '
  FILENAME == ARGV[1] { torch[$1] = $2; next }
  FILENAME == ARGV[2] && base != "" { before[$1] = $2; next }
  FILENAME == ARGV[3] { name[++n] = $1; ours[$1] = $2 }
  END {
    if (base != "") {
      printf "%-24s %12s %12s %12s %14s\n", "kernel", "before ms", "shardrt ms", "torch ms", "torch/shardrt"
    } else {
      printf "%-24s %12s %12s %14s\n", "kernel", "shardrt ms", "torch ms", "torch/shardrt"
    }
    for (i = 1; i <= n; i++) {
      k = name[i]; t = (k in torch) ? sprintf("%.3f", torch[k]) : "-"
      r = (k in torch && ours[k] > 0) ? sprintf("%.2fx", torch[k] / ours[k]) : "-"
      if (base != "") {
        b = (k in before) ? sprintf("%.3f", before[k]) : "-"
        printf "%-24s %12s %12.3f %12s %14s\n", k, b, ours[k], t, r
      } else {
        printf "%-24s %12.3f %12s %14s\n", k, ours[k], t, r
      }
    }
  }' "$tmp/torch" "$( [ -n "$baseline" ] && echo "$tmp/base" || echo /dev/null )" "$tmp/ours"
