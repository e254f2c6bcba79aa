#!/usr/bin/env bash
# Speed of the full strategy search (shardc explore, no keys fixed): GPT-3
# 175B (96 layers, h 12288, s 2048, batch 1536) on 1,024 A100s and a 1T GPT
# (128 layers, h 25600, 160 heads) on 3,072 A100s.  Prints the wall time of
# the whole command (parse, lower, autodiff of the single-device graph,
# search) and the number of plans evaluated; each must stay under 1 s.
#   bench/explore_speed.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build}/shardc"
printf '%-32s %10s %12s %10s  %s\n' model devices plans wall best
rc=0
for m in gpt3-175b gpt-1t; do
  f=bench/models/$m.shard
  s=$(date +%s.%N)
  out=$("$bin" explore "$f" --top 1)
  e=$(date +%s.%N)
  wall=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.3f", b - a }')
  plans=$(sed -n 's/^\([0-9]*\) plans evaluated.*/\1/p' <<<"$out")
  devs=$(sed -n 's/^model .* on mesh [^:]*: \([0-9]*\) x .*/\1/p' <<<"$out")
  best=$(awk '$1 == "1" { print $2, $4, $5 }' <<<"$out")
  printf '%-32s %10s %12s %9ss  %s\n' "$m" "$devs" "$plans" "$wall" "$best"
  awk -v w="$wall" 'BEGIN { exit !(w < 1.0) }' || { echo "  SLOW: over 1 s"; rc=1; }
done
exit $rc
