#!/usr/bin/env bash
# Every input the fuzzer ever crashed on stays here as a regression test:
# shardc must exit 0 or 1 on it, within 10 s, with no sanitizer report.
set -uo pipefail
bin="$1"
cd "$(dirname "$0")"
pass=0 fail=0
shopt -s nullglob
for f in fuzz/crashes/* fuzz/regress/*; do
  out=$(timeout 10 "$bin" check "$f" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -gt 1 ] || grep -qE "AddressSanitizer|runtime error|LeakSanitizer" <<<"$out"; then
    echo "FAIL: $f (exit $rc)"
    echo "$out" | tail -5
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
