#!/usr/bin/env bash
# Golden generated C: `shardc compile --emit=c` of every sample that the cpu
# code generator handles must match tests/golden-c/NAME.c byte for byte
# (deterministic output: no timestamps, stable names and order).
#   tests/codegen/golden_c.sh SHARDC [--update]
bin="$1"
update="${2:-}"
source "$(dirname "$0")/lib.sh"

check() {  # name, expected file, shardc args...
  local name="$1" exp="$2"
  shift 2
  local got rc
  got=$(timeout 30 "$bin" compile "$@" --emit=c 2>&1)
  rc=$?
  [ "$update" = "--update" ] && [ $rc -eq 0 ] && printf '%s\n' "$got" >"$exp"
  if [ $rc -ne 0 ]; then
    bad "$name: exit $rc"
    echo "$got" | head -10
  elif [ ! -f "$exp" ]; then
    bad "$name: no expected file $exp (run with --update)"
  elif ! diff -u "$exp" <(printf '%s\n' "$got") >"$tmp/diff"; then
    bad "$name: generated C differs from $exp"
    head -40 "$tmp/diff"
  else
    ok
  fi
}

for s in gpt llama mish mlp; do
  check "$s" "tests/golden-c/$s.c" "samples/$s.shard"
done
# The f64 variant used by the gradient checks: double types, _f64 kernels,
# every arena offset doubled.
check "mish fp64" tests/golden-c/mish-f64.c samples/mish.shard --precision=fp64
# The cuda target: one rank with fused elementwise chains as device
# functors, each distinct chain once (an imported C function), a mesh with NCCL collectives and overlapped
# gradient buckets, and a 2D grid whose SUMMA matmuls are rtc_summa.cu's
# NCCL launchers.
check "mish cuda" tests/golden-c/mish.cu samples/mish.shard --target cuda
check "gpt cuda tp=2,dp=2" tests/golden-c/gpt-tp2-dp2.cu samples/gpt.shard --target cuda \
  --mesh 4 --strategy tp=2,dp=2
check "gpt cuda tp2d=2x2" tests/golden-c/gpt-tp2d.cu samples/gpt.shard --target cuda \
  --mesh 4 --strategy tp2d=2x2
# The generated program stays readable: the MLP in at most 200 lines.
n=$("$bin" compile samples/mlp.shard --emit=c | wc -l)
[ "$n" -le 200 ] && ok || bad "samples/mlp.shard gives $n lines of C (at most 200)"
# Twice the same input, twice the same text.
a=$("$bin" compile samples/gpt.shard --emit=c | md5sum)
b=$("$bin" compile samples/gpt.shard --emit=c | md5sum)
[ "$a" = "$b" ] && ok || bad "two compilations of gpt differ"
finish
