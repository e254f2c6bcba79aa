#!/usr/bin/env bash
# Activation recompute under a memory budget: the GEMM-bound GPT of
# bench/gpt_bench.shard (d 512, 8 layers, seq 256) on 4 MPI ranks (dp=4,
# one thread each) with devices of BUDGET MiB.  Per policy (recompute=none,
# selective, full, auto): the largest microbatch whose plan fits the device
# (shardc's memory check, exact), then that plan built and trained STEPS
# steps: planned and measured peak bytes per rank, the recompute FLOPs the
# plan adds, the median step time of steps 3..STEPS and tokens/s.  auto is
# asked for the largest microbatch that fits at all, and again at full's
# (auto@full) when that is smaller, and prints what it recomputes per tensor
# and what its per-layer choice would add.  Then pipeline cuts:
# tests/dist/bigvocab.shard (vocabulary 8192, untied head) on pp=4 (1F1B),
# cuts balanced for FLOPs (pp=4) and for memory (pp=4:memory): each stage's
# planned and measured peak, and the median step time.  Prints the tables
# and saves them to bench/results/memory-DATE.txt.
#   bench/memory.sh [BUDGET_MIB [STEPS]]      (default 512 MiB, 8 steps)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
budget="${1:-512}"
steps="${2:-8}"
case "$budget$steps" in ''|*[!0-9]*) echo "bench: BUDGET_MIB and STEPS must be numbers" >&2; exit 2 ;; esac
[ "$steps" -ge 3 ] || { echo "bench: STEPS must be at least 3" >&2; exit 2; }
np=4
cores=$(nproc)   # before OMP_NUM_THREADS=1, which GNU nproc obeys
unset OPENBLAS_CORETYPE
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$root/scripts/build.sh" "$root/build" >/dev/null
bin="$root/build/shardc"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardc-bench-mem.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# model MB: gpt_bench with microbatch MB per rank (batch = 4 x MB), on a mesh
# of 4 devices of BUDGET MiB
model() {
  sed -e "s/batch = 4, seq = ctx/batch = $((np * $1)), microbatch = $1, seq = ctx/" \
      -e "s/model = gpt$/model = gpt, mesh = bench/" "$root/bench/gpt_bench.shard" >"$tmp/m$1.shard"
  printf 'mesh bench { devices = %d, device = cpu, memory = %d MiB }\n' "$np" "$budget" >>"$tmp/m$1.shard"
  echo "$tmp/m$1.shard"
}
fits() { "$bin" check "$(model "$1")" --strategy "dp=$np,recompute=$2" >/dev/null 2>&1; }

# the largest microbatch in 1..64 that fits (0: none)
largest() {
  local lo=0 hi=65 mid
  while [ $((hi - lo)) -gt 1 ]; do
    mid=$(((lo + hi) / 2))
    if fits "$mid" "$1"; then lo=$mid; else hi=$mid; fi
  done
  echo "$lo"
}

rows=()
# auto@full: auto at full's microbatch, to compare their FLOPs (when auto fits more)
fullmb=0 automb=0
for row in none selective full auto auto@full; do
  pol=${row%@full}
  case $row in
    auto@full) mb=$fullmb; [ "$mb" != 0 ] && [ "$mb" != "$automb" ] || continue ;;
    *) mb=$(largest "$pol") ;;
  esac
  [ "$row" = full ] && fullmb=$mb
  [ "$row" = auto ] && automb=$mb
  if [ "$mb" = 0 ]; then rows+=("$(printf '%-10s %5s  %s' "$row" - 'no microbatch fits')"); continue; fi
  f=$(model "$mb") d="$tmp/$row"
  plan=$("$bin" compile "$f" --strategy "dp=$np,recompute=$pol")
  planned=$(sed -n 's/^memory:   \([0-9,]*\) bytes per rank.*/\1/p' <<<"$plan")
  extra=$(sed -n 's/^recompute: .* +\([0-9.e+]*\) FLOPs per step.*/\1/p' <<<"$plan" | head -1)
  # auto: what it recomputes per tensor, and what the per-layer choice would add
  choice=$(sed -n 's/^ *auto: \(.*\): [0-9,]* bytes (.*(per layer, \(.*\); [0-9]* plans tried)$/\1 [per layer, \2 per microbatch]/p' <<<"$plan")
  "$bin" build "$f" -o "$d" --strategy "dp=$np,recompute=$pol" >/dev/null
  out=$(mpirun -np $np "$d/train" --steps "$steps" --log "$d/log.jsonl" 2>&1) || {
    echo "$out" | tail -5; echo "bench: $pol: the run failed" >&2; exit 1; }
  measured=$(sed -n 's/^memory:   planned peak [0-9,]* bytes per rank, measured \([0-9,]*\).*/\1/p' <<<"$out" | head -1)
  grep -q MISMATCH <<<"$out" && { echo "bench: $pol: memory differs from the plan" >&2; exit 1; }
  ms=$(sed -n 's/.*"step":\([0-9]*\),.*"step_ms":\([0-9.]*\).*/\1 \2/p' "$d/log.jsonl" |
       awk '$1 >= 3 { print $2 }' | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
  tps=$(awk -v ms="$ms" -v mb="$mb" -v np=$np 'BEGIN { printf "%.0f", np * mb * 256 / (ms / 1000) }')
  rows+=("$(printf '%-10s %5d  %15s  %15s  %12s  %9.1f  %9s  %s' "$row" "$mb" "$planned" "$measured" \
            "${extra:-0}" "$ms" "$tps" "$choice")")
done

# pipeline cuts
crows=()
for st in pp=4 pp=4:memory; do
  d="$tmp/cuts-${st//:/_}"
  plan=$("$bin" compile "$root/tests/dist/bigvocab.shard" --strategy "$st,schedule=1f1b")
  stages=$(sed -n 's/^stage [0-9]*:  \(.*\); [0-9.]*% of the FLOPs.*/\1/p' <<<"$plan" | paste -sd'|' | sed 's/|/ | /g')
  flops=$(sed -n 's/^stage [0-9]*:  .*; \([0-9.]*%\) of the FLOPs.*/\1/p' <<<"$plan" | paste -sd/)
  "$bin" build "$root/tests/dist/bigvocab.shard" -o "$d" --strategy "$st,schedule=1f1b" >/dev/null
  out=$(mpirun -np $np "$d/train" --steps "$steps" --log "$d/log.jsonl" 2>&1) || {
    echo "$out" | tail -5; echo "bench: $st: the run failed" >&2; exit 1; }
  grep -q MISMATCH <<<"$out" && { echo "bench: $st: memory differs from the plan" >&2; exit 1; }
  line=$(grep '^memory:   planned peak per rank by stage' <<<"$out")
  planned=$(sed -n 's/.*by stage \([0-9, /]*\) bytes, measured.*/\1/p' <<<"$line")
  measured=$(sed -n 's/.*measured \([0-9, /]*\) (highest.*/\1/p' <<<"$line")
  ms=$(sed -n 's/.*"step":\([0-9]*\),.*"step_ms":\([0-9.]*\).*/\1 \2/p' "$d/log.jsonl" |
       awk '$1 >= 3 { print $2 }' | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
  crows+=("$(printf '%-12s  planned %s\n%-12s  measured %s\n%-12s  FLOPs %s; step %.1f ms; stages: %s' \
            "$st" "$planned" "" "$measured" "" "$flops" "$ms" "$stages")")
done

res="$root/bench/results/memory-$(date +%F).txt"
{
  echo "# bench/memory.sh: bench/gpt_bench.shard on $np ranks (dp=$np, one thread each, $cores cores),"
  echo "# devices of $budget MiB; the largest microbatch per recompute policy that fits, and its step"
  echo "# (median of steps 3..$steps; tokens/s over all ranks); $(date -u +%FT%TZ)"
  printf '%-10s %5s  %15s  %15s  %12s  %9s  %9s  %s\n' recompute mb "planned B/rank" "measured B/rank" \
    "+FLOPs/step" "step ms" "tokens/s" "auto's choice"
  printf '%s\n' "${rows[@]}"
  echo
  echo "# pipeline cuts: tests/dist/bigvocab.shard on pp=4 (1F1B, 8 microbatches), bytes per rank"
  echo "# by stage, planned and measured in step 1"
  printf '%s\n' "${crows[@]}"
} | tee "$tmp/tables.txt"
# a day's later runs are appended, below a line, not written over the first
if [ -s "$res" ]; then
  { echo; echo "--- a later run:"; echo; cat "$tmp/tables.txt"; } >>"$res"
else
  cp "$tmp/tables.txt" "$res"
fi
