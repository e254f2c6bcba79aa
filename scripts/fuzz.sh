#!/usr/bin/env bash
# Fuzzes the frontend with libFuzzer for a bounded time.
#   scripts/fuzz.sh [SECONDS] [JOBS]     (default 60 s, 1 job)
# Seeds: every .shard file under samples/, tests/ and bench/ (not bench/models/).  New crashes are written to
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
# every model file of the project (samples, tests, benchmarks), named by
# path; not the published giants of bench/models (GPT-3 on 1,024 GPUs: two
# seconds an input here, forty under the fuzzer's sanitizers)
while IFS= read -r f; do
  cp "$f" "$corpus/seed-$(printf '%s' "${f#"$root"/}" | tr '/' '_')"
done < <(find "$root/samples" "$root/tests" "$root/bench" -name '*.shard' -type f -not -path "$root/bench/models/*")
cp "$root"/tests/fuzz/crashes/* "$corpus"/ 2>/dev/null || true
echo "fuzz: running for ${secs}s with ${jobs} job(s)"
start=$(date +%s)
set +e
cd "$dir"
# Leaks are findings too (the target frees its arena after every input).
# Memory: 3 GB an input (the harness also generates both targets' code:
# Shampoo at block = 1 on a 512-wide model, 1.2 million blocks below the
# compiler's limit of 4 million, takes 0.84 GB in a release build and past
# 2 GB under the sanitizers).
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions="$root/tests/lsan.supp":print_suppressions=0 \
  "$dir/fuzz_frontend" "$corpus" \
  -max_total_time="$secs" -timeout=25 -rss_limit_mb=3072 -max_len=8192 \
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
