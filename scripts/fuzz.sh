#!/usr/bin/env bash
# Fuzzes the frontend with libFuzzer for a bounded time.
#   scripts/fuzz.sh [SECONDS] [JOBS]     (default 60 s, 1 job)
# Seeds: samples/*.shard and tests/diag/*.shard.  New crashes are written to
# tests/fuzz/crashes/ and must be kept there as regression inputs
# (tests/fuzz_regress.sh runs every file in it through shardc).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-60}"
jobs="${2:-1}"
"$root/scripts/deps.sh"
dir="$root/build-fuzz"
CC=clang cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDC_FUZZ=ON \
  -DSHARDC_SANITIZE=ON >/dev/null
cmake --build "$dir" -j"$(nproc)" --target fuzz_frontend >/dev/null
corpus="$dir/corpus"
mkdir -p "$corpus" "$root/tests/fuzz/crashes"
cp "$root"/samples/*.shard "$corpus"/ 2>/dev/null || true
cp "$root"/tests/diag/*.shard "$corpus"/ 2>/dev/null || true
cp "$root"/tests/fuzz/crashes/* "$corpus"/ 2>/dev/null || true
echo "fuzz: running for ${secs}s with ${jobs} job(s)"
start=$(date +%s)
set +e
cd "$dir"
# Leaks are findings too (the target frees its arena after every input).
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions="$root/tests/lsan.supp":print_suppressions=0 \
  "$dir/fuzz_frontend" "$corpus" \
  -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 -max_len=8192 \
  -dict="$root/tests/fuzz/shard.dict" -close_fd_mask=2 \
  -artifact_prefix="$root/tests/fuzz/crashes/" -jobs="$jobs" -workers="$jobs" \
  -print_final_stats=1 2>"$dir/fuzz.log"
rc=$?
set -e
end=$(date +%s)
grep -E "stat::number_of_executed_units|stat::peak_rss|SUMMARY|ERROR" "$dir/fuzz.log" "$dir"/fuzz-*.log 2>/dev/null | head -20 || true
echo "fuzz: ran $((end - start))s, exit $rc"
if [ $rc -ne 0 ]; then
  echo "fuzz: FAILED: a crash, hang or sanitizer report was found; the input is in tests/fuzz/crashes/" >&2
  tail -40 "$dir/fuzz.log" >&2
  exit 1
fi
