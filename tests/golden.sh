#!/usr/bin/env bash
# Golden tests: the IR, plan and per-rank program text of every sample and
# tests/golden/*.shard must match the checked-in files byte for byte.  A
# file whose first line says "# golden: ir" (then anything) is checked for its IR only
# (tests/golden/ew_builtins.shard: a new builtin function records one file).
#   tests/golden.sh SHARDC [--update]
set -uo pipefail
bin="$1"
update="${2:-}"
cd "$(dirname "$0")/.."
pass=0 fail=0

check() {  # name, expected file, command...
  local name="$1" exp="$2"
  shift 2
  local out
  out=$(timeout 20 "$@" 2>&1)
  local rc=$?
  if [ "$update" = "--update" ]; then
    printf '%s\n' "$out" >"$exp"
  fi
  if [ $rc -ne 0 ]; then
    echo "FAIL: $name: exit $rc"
    echo "$out" | head -20
    fail=$((fail + 1))
  elif [ ! -f "$exp" ]; then
    echo "FAIL: $name: no expected file $exp (run with --update)"
    fail=$((fail + 1))
  elif ! diff -u "$exp" <(printf '%s\n' "$out") >/tmp/golden.diff.$$; then
    echo "FAIL: $name"
    head -40 /tmp/golden.diff.$$
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
  rm -f /tmp/golden.diff.$$
}

for f in samples/*.shard tests/golden/*.shard; do
  base=$(basename "$f" .shard)
  [ "$f" = "tests/golden/$base.shard" ] && pre="tests/golden/$base" || pre="tests/golden/sample-$base"
  if head -1 "$f" | grep -q '^# golden: ir\b'; then
    check "$f ir" "$pre.ir" "$bin" compile "$f" --emit=ir
    continue
  fi
  check "$f plan" "$pre.plan" "$bin" compile "$f" --emit=plan
  # The full IR and program of the 124M model are large and add nothing the tiny one lacks.
  [ "$base" = "gpt2-124m" ] && continue
  check "$f ir" "$pre.ir" "$bin" compile "$f" --emit=ir
  check "$f program" "$pre.program" "$bin" compile "$f" --emit=program
done
# --dump-after prints the IR after a named pass; the same text for every pass so far.
check "dump-after=lower" tests/golden/dump-after-lower.ir "$bin" compile samples/mlp.shard --dump-after=lower
# Every builtin elementwise function (an EW row of ir/ops.def) is used in
# tests/golden/ew_builtins.shard, so its IR is recorded and its gradient
# checked (tests/codegen/gradcheck.sh).
for fn in $(sed -n 's/^EW([A-Z0-9_]*, *"\([a-z0-9_]*\)".*/\1/p' ir/ops.def); do
  if grep -q "\b$fn\b" tests/golden/ew_builtins.shard; then
    pass=$((pass + 1))
  else
    echo "FAIL: builtin function $fn (ir/ops.def) is not used in tests/golden/ew_builtins.shard"
    fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
