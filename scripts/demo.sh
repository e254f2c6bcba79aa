#!/usr/bin/env bash
# The main job on a built-in default: build shardc, show the plan of every
# sample in a few lines, then compile the tiny GPT (samples/gpt.shard) into a
# training program with `shardc build` and train it under mpirun, one rank
# per mesh device, on the built-in text (samples/data/tales.txt): it prints
# its plan, a progress line and a falling loss.
#   scripts/demo.sh [STEPS]     (default 300, the train block's steps)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
steps="${1:-300}"
"$root/scripts/build.sh" "$root/build"
shardc="$root/build/shardc"
cd "$root"

echo "=== the samples' plans"
for f in samples/*.shard; do
  "$shardc" compile "$f" --emit=plan | awk -v f="$f" '
    /^model:/    { model = $2 }
    /^strategy:/ { strategy = $2 }
    /^mesh:/     { mesh = $2 " (" $4 " x " $6 ")" }
    /^params:/   { params = $2 }
    /^memory:/   { mem = $2 " bytes/rank" }
    END { printf "%-24s %-9s %-12s params %-12s mesh %-20s memory %s\n", f, model, strategy, params, mesh, mem }'
done

echo
echo "=== shardc build samples/gpt.shard"
"$shardc" build samples/gpt.shard -o out/gpt
ranks=$(sed -n 's/^#define RANKS *\([0-9]*\).*/\1/p' out/gpt/model.c)

echo
echo "=== mpirun -np $ranks out/gpt/train --steps $steps"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
time mpirun --allow-run-as-root --oversubscribe -np "$ranks" out/gpt/train --steps "$steps" \
  --log out/gpt/train.jsonl 2>&1
echo "(metrics: out/gpt/train.jsonl; generated program: out/gpt/model.c)"
