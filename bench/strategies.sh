#!/usr/bin/env bash
# Parallel strategies side by side: samples/gpt.shard (GPT d=128, 4 heads,
# 4 layers, seq 64, vocab 256, batch 16, microbatch 4, fp32, AdamW) built by
# `shardc build --mesh 4 --strategy SPEC` and trained STEPS steps on 4 MPI
# ranks with one thread each, ROUNDS times in turn (so that other load on a
# shared machine falls on all strategies alike). Per strategy: median step
# time of steps 6..STEPS over all rounds (after warm-up), bytes sent per rank
# per step as counted on rank 0 against the plan, planned and measured peak
# arena bytes per rank, and the final loss. Prints one table and saves it to
# bench/results/strategies-DATE.txt.
#   bench/strategies.sh [STEPS [ROUNDS]]     (default 30 steps, 3 rounds)
#
# A pipeline's stages differ in memory and bytes sent: its row shows the
# largest stage's numbers (each stage is checked against its own plan) and
# the per-stage numbers follow the table.  Strategies the code generator
# refuses are listed under the table with shardc's message; any other build
# or run failure stops the script with a nonzero status.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
steps="${1:-30}"
rounds="${2:-3}"
np=4
first=6
cores=$(nproc)   # before OMP_NUM_THREADS=1, which GNU nproc obeys
case "$steps$rounds" in ''|*[!0-9]*) echo "bench: STEPS and ROUNDS must be numbers" >&2; exit 2 ;; esac
[ "$rounds" -ge 1 ] || { echo "bench: ROUNDS must be at least 1" >&2; exit 2; }
[ "$steps" -ge "$first" ] || { echo "bench: STEPS must be at least $first" >&2; exit 2; }

# Run in the order given; the dp=2,tp=2 and sp aliases (explicit mb=2, dp=1)
# resolve to the same plan as their plain form and must give the same loss.
strategies=(
  dp=4
  tp=4
  dp=1,tp=4
  tp=2,dp=2
  tp=2,dp=2,mb=2
  tp=4,sp=megatron
  tp=2,sp=megatron,dp=2
  tp=2,sp=megatron,dp=2,mb=2
  dp=4,zero=1
  pp=4,schedule=gpipe
  pp=4,schedule=1f1b
  pp=2,dp=2,schedule=interleaved:2
  pp=2,dp=2
  pp=2,tp=2
  sp=ring:4
  sp=ring:2,dp=2
  sp=ring:2,dp=2,zero=1
  dp=4,zero=2
  dp=4,zero=3
  tp2d=2x2
)
# Kept in the table when shardc builds them, listed as refused otherwise.
optional=(dp=4,recompute=selective)

if [ -x "$root/build/shardc" ]; then
  cmake --build "$root/build" -j"$cores" >/dev/null
else
  "$root/scripts/build.sh" "$root/build"
fi
shardc="$root/build/shardc"
command -v mpirun >/dev/null || { echo "bench: mpirun not found" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$root/bench/results"
out="$root/bench/results/strategies-$(date +%F).txt"

# 4 ranks on however many cores: one thread per rank so that they share fairly.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

fail() { echo "bench: $*" >&2; exit 1; }

# build SPEC DIR: 0 when built, 3 when the code generator refuses the
# strategy (message in DIR.err), exits on any other failure.
build() {
  local spec="$1" dir="$2"
  if timeout -k 5 180 "$shardc" build "$root/samples/gpt.shard" --mesh "$np" \
       --strategy "$spec" -o "$dir" >"$dir.err" 2>&1; then
    return 0
  fi
  grep -q 'not implemented yet' "$dir.err" && return 3
  cat "$dir.err" >&2
  fail "shardc build --strategy $spec failed"
}

# The largest of "A / B / ..." (numbers with commas).
stage_max() { tr -d ' ,' <<<"$1" | tr '/' '\n' | sort -n | tail -n 1; }

# run SPEC DIR: trains once; appends steps first..STEPS' times to DIR/ms and
# the final loss to DIR/loss, and after the first round writes DIR/row (the
# plan, comm and memory lines' numbers, tab-separated).
run() {
  local spec="$1" dir="$2" log="$2/log.jsonl" txt="$2/run.txt"
  rm -f "$log"
  if ! (cd "$tmp" && timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np "$np" \
          "$dir/train" --steps "$steps" --log "$log" >"$txt" 2>&1); then
    tail -n 20 "$txt" >&2
    fail "training with --strategy $spec failed or timed out"
  fi
  local plan mem comm n
  plan=$(sed -n 's/^strategy: *\([^ ]*\).*/\1/p' "$txt" | head -n 1)
  # memory:   planned peak A bytes per rank, measured B (...)
  mem=$(sed -n 's/^memory: *planned peak \([0-9,]*\) bytes per rank, measured \([0-9,]*\) .*/\1 \2/p' "$txt" | tr -d ,)
  # comm:     planned A bytes sent per rank per step, counted B on rank 0 (C over all ranks)
  comm=$(sed -n 's/^comm: *planned \([0-9,]*\) bytes sent .*, counted \([0-9,]*\) on rank 0 (\([0-9]*\) over all ranks).*/\1 \2 \3/p' "$txt" | tr -d ,)
  # a pipeline: "memory:   planned peak per rank by stage A / B bytes, measured A / B (...)"
  # and "comm:     planned A / B bytes sent per rank per step by stage, counted A / B"
  local pmem pcomm
  pmem=$(sed -n 's/^memory: *planned peak per rank by stage \([0-9, /]*\) bytes, measured \([0-9, /]*\) (.*/\1|\2/p' "$txt")
  pcomm=$(sed -n 's/^comm: *planned \([0-9, /]*\) bytes sent per rank per step by stage, counted \([0-9, /]*\).*/\1|\2/p' "$txt")
  if [ -n "$pmem" ] && [ -n "$pcomm" ]; then
    mem="$(stage_max "${pmem%%|*}") $(stage_max "${pmem#*|}")"
    [ "$(tr -d ' ,' <<<"${pmem%%|*}")" = "$(tr -d ' ,' <<<"${pmem#*|}")" ] || mem="${mem% *} -1"
    comm="$(stage_max "${pcomm%%|*}") $(stage_max "${pcomm#*|}") -"
    [ "$(tr -d ' ,' <<<"${pcomm%%|*}")" = "$(tr -d ' ,' <<<"${pcomm#*|}")" ] || comm="${comm%% *} -1 -"
    [ -f "$dir/stages" ] || echo "  $spec: per stage peak ${pmem#*|} bytes; sent ${pcomm#*|} bytes per rank per step" >"$dir/stages"
  fi
  [ -n "$plan" ] && [ -n "$mem" ] && [ -n "$comm" ] || { cat "$txt" >&2; fail "$spec: no strategy/memory/comm line in the output"; }
  n=$(grep -c '"step"' "$log" || true)
  [ "$n" -eq "$steps" ] || fail "$spec: $log has $n steps, expected $steps"
  sed -n 's/.*"step":\([0-9]*\),.*"step_ms":\([0-9.eE+-]*\).*/\1 \2/p' "$log" |
    awk -v f="$first" '$1 >= f { print $2 }' >>"$dir/ms"
  tail -n 1 "$log" | sed -n 's/.*"loss":\([0-9.eE+-]*\).*/\1/p' >>"$dir/loss"
  [ -f "$dir/row" ] || printf '%s\t%s\t%s %s %s\n' "$spec" "$plan" "$comm" "$np" "$mem" >"$dir/row"
}

: >"$tmp/refused"
load=$(cut -d' ' -f1-3 /proc/loadavg)
built=()
i=0
for spec in "${strategies[@]}" "${optional[@]}"; do
  i=$((i + 1))
  dir="$tmp/s$i"
  mkdir -p "$dir"
  rc=0; build "$spec" "$dir" || rc=$?
  if [ "$rc" -eq 3 ]; then
    is_optional=0
    for o in "${optional[@]}"; do [ "$o" = "$spec" ] && is_optional=1; done
    [ "$is_optional" -eq 1 ] || { cat "$dir.err" >&2; fail "shardc refused --strategy $spec"; }
    printf '  %-28s %s\n' "$spec" "$(sed -n 's/^shardc: error: //p' "$dir.err" | head -n 1)" >>"$tmp/refused"
    continue
  fi
  built+=("$spec|$dir")
done
for r in $(seq "$rounds"); do
  for b in "${built[@]}"; do run "${b%%|*}" "${b#*|}"; done
done

# One row per strategy: spec, plan, median ms, comm/memory numbers, final
# loss (and "differs" when the rounds disagree).
: >"$tmp/rows"
for b in "${built[@]}"; do
  dir="${b#*|}"
  ms=$(sort -g "$dir/ms" | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  loss=$(head -n 1 "$dir/loss")
  [ "$(sort -u "$dir/loss" | wc -l)" -eq 1 ] || loss="$loss differs"
  printf '%s\t%s\t%s\n' "$(cat "$dir/row")" "$ms" "$loss" >>"$tmp/rows"
done

cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
{
  echo "bench/strategies.sh, $(date +%F), commit $commit$([ "$dirty" -gt 0 ] && echo " + $dirty modified files"), $cores cores, $cpu, load $load at start"
  echo "samples/gpt.shard (d=128 L=4 H=4 T=64 vocab=256, batch 16 = dp x microbatch 4 x mb), fp32, AdamW;"
  echo "$np MPI ranks (--oversubscribe) on $cores cores, OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1 per rank, $steps steps;"
  echo "step ms = median of steps $first..$steps over $rounds rounds run in turn; comm = bytes sent per rank per step, counted on rank 0 in step 1"
  echo "(ok: = plan, and all ranks together = $np x plan); peak = arena bytes per rank, planned / measured in step 1"
  echo
  awk -F'\t' '
    BEGIN {
      printf "%-28s %-36s %8s %12s %-8s %12s %12s %-8s %s\n",
             "--strategy", "plan", "step ms", "comm B/step", "", "peak plan", "peak meas", "", "final loss"
    }
    {
      split($3, c, " ")   # comm planned, counted, all ranks; np; peak planned, measured
      # a pipeline ("-"): every stage against its own plan, no all-ranks sum
      cok = c[1] != c[2] ? "MISMATCH" : (c[3] != "-" && c[3] != c[4] * c[1] ? "RANKS?" : "ok")
      mok = c[5] == c[6] ? "ok" : "MISMATCH"
      printf "%-28s %-36s %8.1f %12s %-8s %12s %12s %-8s %s\n",
             $1, $2, $4, commas(c[2]), cok, commas(c[5]), commas(c[6]), mok, $5
    }
    function commas(x,   s) {
      s = ""
      while (length(x) > 3) { s = "," substr(x, length(x) - 2) s; x = substr(x, 1, length(x) - 3) }
      return x s
    }' "$tmp/rows"
  if cat "$tmp"/s*/stages >/dev/null 2>&1; then
    echo
    echo "pipelines (the row shows the largest stage; stage 0 / 1 / ...):"
    for b in "${built[@]}"; do if [ -f "${b#*|}/stages" ]; then cat "${b#*|}/stages"; fi; done
  fi
  if [ -s "$tmp/refused" ]; then
    echo
    echo "refused by shardc build (left out):"
    cat "$tmp/refused"
  fi
} | tee "$out"
echo "(saved to ${out#"$root"/})" >&2
