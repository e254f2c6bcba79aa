#!/usr/bin/env bash
# diag.sh — the diagnostics corpus: every tests/diag/NAME.shard is a bad
# program whose exact stderr is kept in tests/diag/NAME.expected.
#
#   tests/diag.sh SHARDC            compare against the expected files
#   tests/diag.sh SHARDC --update   rewrite the expected files
#
# Directives in the leading comment lines of a .shard file:
#   # CMD: check|compile   subcommand to run (default check)
#   # ARGS: ...            extra command-line arguments (split on blanks)
#   # EXIT: N              expected exit status (default 1)
#
# A case fails when stderr differs byte for byte, the exit status is not the
# expected one, the run takes longer than 10 s (a hang), or it crashes (killed
# by a signal, or sanitizer output).  A crash is never written as expected.
set -u

if [ $# -lt 1 ] || [ $# -gt 2 ] || { [ $# -eq 2 ] && [ "$2" != --update ]; }; then
  echo "usage: $0 SHARDC [--update]" >&2
  exit 2
fi
bin=$1
update=0
[ $# -eq 2 ] && update=1
# The binary is named relative to where we were started; the cases relative
# to this script's directory.
case $bin in
  /*) ;;
  *) bin=$PWD/$bin ;;
esac
if [ ! -x "$bin" ]; then
  echo "$0: '$1' is not an executable" >&2
  exit 2
fi
cd "$(dirname "$0")" || exit 2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardc-diag.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
# Sanitizer builds: report leaks and UB as failures, never as noise (the
# suppressions name third-party allocations only).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$(pwd)/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

passed=0
failed=0
fail() {
  echo "FAIL $1: $2"
  [ $# -ge 3 ] && [ -n "$3" ] && printf '%s\n' "$3" | sed 's/^/    /'
  failed=$((failed + 1))
}

shopt -s nullglob
cases=(diag/*.shard)
if [ ${#cases[@]} -eq 0 ]; then
  echo "$0: no cases in $(pwd)/diag" >&2
  exit 2
fi

for src in "${cases[@]}"; do
  name=$(basename "$src" .shard)
  exp=diag/$name.expected
  cmd=check
  args=()
  want=1
  # Directives: only in the comment lines at the top of the file.
  while IFS= read -r line; do
    case $line in
      "# CMD:"*) read -r cmd <<<"${line#\# CMD:}" ;;
      "# ARGS:"*) read -r -a args <<<"${line#\# ARGS:}" ;;
      "# EXIT:"*) read -r want <<<"${line#\# EXIT:}" ;;
      "#"*) ;;
      *) break ;;
    esac
  done <"$src"

  out=$tmp/$name.err
  # The outer 2>/dev/null hides bash's own "Segmentation fault" line.
  { timeout -k 2 10 "$bin" "$cmd" "$src" ${args[@]+"${args[@]}"} >/dev/null 2>"$out" </dev/null; } \
    2>/dev/null
  rc=$?

  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    fail "$name" "hang (no exit within 10 s)"
    continue
  fi
  if [ $rc -ge 128 ] || grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$out"; then
    fail "$name" "crash (exit status $rc)" "$(head -n 30 "$out")"
    continue
  fi
  if [ $rc -ne "$want" ]; then
    fail "$name" "exit status $rc, expected $want" "$(head -n 30 "$out")"
    continue
  fi
  if [ $update -eq 1 ]; then
    cp "$out" "$exp"
    passed=$((passed + 1))
    continue
  fi
  if [ ! -f "$exp" ]; then
    fail "$name" "no $exp (run with --update to create it)" "$(cat "$out")"
    continue
  fi
  if ! cmp -s "$exp" "$out"; then
    fail "$name" "stderr differs from $exp" "$(diff -u "$exp" "$out" | tail -n +3)"
    continue
  fi
  passed=$((passed + 1))
done

if [ $update -eq 1 ]; then
  # Expected files whose case is gone are stale.
  for exp in diag/*.expected; do
    [ -f "${exp%.expected}.shard" ] || { echo "removing stale $exp"; rm -f "$exp"; }
  done
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
