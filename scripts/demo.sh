#!/usr/bin/env bash
# The main job on a built-in default: build shardc, then compile every sample
# and show its plan, parameter count and IR summary.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh" "$root/build"
shardc="$root/build/shardc"
cd "$root"
for f in samples/*.shard; do
  echo "=== shardc compile $f"
  "$shardc" compile "$f" --emit=plan
  "$shardc" compile "$f" --emit=ir | awk '
    /^  param /  { params++ }
    /^  %[0-9]+ = / { ops[$3]++; nodes++ }
    END {
      printf "ir:       %d parameter tensors, %d ops:", params, nodes
      n = asorti(ops, keys)
      for (i = 1; i <= n; i++) printf " %s=%d", keys[i], ops[keys[i]]
      printf "\n\n"
    }'
done
