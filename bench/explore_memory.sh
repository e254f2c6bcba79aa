#!/usr/bin/env bash
# The search's memory estimate against the memory plan, on models too large
# for explore to compile each plan of (it then prints the estimate): for each
# plan, explore --json's peak bytes per rank (the plan's keys fixed with
# --strategy, its entry of the same keys taken) beside the largest rank arena
# of the compiled plan (compile --emit=plan, the same strategy string,
# stage sizes included).  Default: GPT-3 175B (bench/models/gpt3-175b.shard)
# on its 1,024 A100s, plans of every kind (tp, Megatron-SP, selective and
# full recompute, ZeRO-1, 1F1B, interleaved, GPipe).  Prints the table and
# saves it to bench/results/explore_memory-DATE.txt.
#   bench/explore_memory.sh [MODEL MESH SPEC...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ -x "$root/build/shardc" ] || { cmake -S "$root" -B "$root/build" >/dev/null && cmake --build "$root/build" -j2 >/dev/null; }
bin="$root/build/shardc"
py=/usr/bin/python3
model="${1:-$root/bench/models/gpt3-175b.shard}"
mesh="${2:-a100}"
if [ $# -gt 2 ]; then
  shift 2
  specs=("$@")
else
  specs=("dp=8,tp=8,pp=16,schedule=1f1b,mb=192"
         "dp=8,tp=8,pp=16,schedule=1f1b,mb=192,recompute=selective"
         "dp=8,tp=8,pp=16,schedule=1f1b,mb=192,recompute=full"
         "dp=8,tp=8,sp=megatron,pp=16,schedule=1f1b,mb=192"
         "dp=8,tp=8,sp=megatron,pp=16,schedule=1f1b,mb=192,recompute=selective"
         "dp=8,tp=8,sp=megatron,pp=16,schedule=1f1b,mb=192,recompute=full"
         "dp=8,tp=8,sp=megatron,pp=16,schedule=1f1b,mb=192,zero=1"
         "dp=16,tp=8,pp=8,schedule=1f1b,mb=96,zero=1"
         "dp=8,tp=8,pp=16,schedule=interleaved:2,mb=192"
         "dp=8,tp=8,sp=megatron,pp=16,schedule=interleaved:2,mb=192"
         "dp=32,tp=4,sp=megatron,pp=8,schedule=interleaved:4,mb=48,zero=1"
         "dp=16,tp=4,sp=megatron,pp=16,schedule=interleaved:4,mb=96,zero=1"
         "dp=8,tp=8,pp=16,schedule=gpipe,mb=192,recompute=full"
         "dp=128,tp=8,mb=12,zero=3,recompute=full"
         "dp=128,tp=8,sp=megatron,mb=12,zero=3,recompute=selective")
fi
day=$(date -u +%Y-%m-%d)
out="$root/bench/results/explore_memory-$day.txt"
mkdir -p "$root/bench/results"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
  echo "explore's memory estimate vs the memory plan, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD)"
  echo "model: ${model#"$root"/}, mesh $mesh"
  printf "%-66s %12s %12s %8s\n" "plan" "estimate" "planned" "error"
  errs=()
  for spec in "${specs[@]}"; do
    # explore's entry with exactly these keys (pp's stage sizes aside)
    line=$("$bin" explore "$model" --mesh "$mesh" --strategy "$spec" --top 400 --json 2>/dev/null | "$py" -c '
import json, sys
def keys(s):
    d = dict(kv.split("=", 1) for kv in s.split(","))
    if "pp" in d: d["pp"] = d["pp"].split(":")[0]
    return d
want = keys(sys.argv[1])
for p in json.load(sys.stdin):
    if keys(p["strategy"]) == want:
        print(p["peak_mem_bytes"], p["strategy"]); break
' "$spec" || true)
    if [ -z "$line" ]; then
      printf "%-66s %12s\n" "$spec" "(not among explore's plans)"
      continue
    fi
    est=${line%% *} full=${line#* }
    planned=$("$bin" compile "$model" --mesh "$mesh" --strategy "$full" --emit=plan --no-memory-check 2>&1 |
              grep -oE "memory:? +[0-9,]+ bytes per rank" | grep -oE "[0-9,]+" | tr -d , | sort -n | tail -1 || true)
    if [ -z "$planned" ]; then
      printf "%-66s %9.2f GB %12s\n" "$spec" "$("$py" -c "print($est/1e9)")" "(not compiled)"
      continue
    fi
    e=$("$py" -c "print('%+.1f' % (100 * ($est / $planned - 1)))")
    errs+=("$e")
    printf "%-66s %9.2f GB %9.2f GB %7s%%\n" "$spec" "$("$py" -c "print($est/1e9)")" "$("$py" -c "print($planned/1e9)")" "$e"
  done
  "$py" -c "
import sys
e = [abs(float(x)) for x in sys.argv[1:]]
print('%d plans: mean absolute error %.1f%%, largest %.1f%%' % (len(e), sum(e) / len(e), max(e)) if e else 'no plan compared')
" "${errs[@]}"
} | tee "$tmp"
if [ -s "$out" ]; then printf '\n--- a later run:\n\n' >>"$out"; fi
cat "$tmp" >>"$out"
