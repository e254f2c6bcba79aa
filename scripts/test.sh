#!/usr/bin/env bash
# The test suite: build (warnings are errors) and run every test, then again
# under AddressSanitizer + UndefinedBehaviorSanitizer, then fuzz the frontend
# for a bounded time (FUZZ_SECONDS, default 60; 0 skips).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="$(nproc)"
"$root/scripts/build.sh" "$root/build"
echo "== tests (RelWithDebInfo)"
(cd "$root/build" && ctest -j"$jobs" --output-on-failure)

echo "== tests (ASan + UBSan)"
"$root/scripts/build.sh" "$root/build-asan" -DSHARDC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
# The distributed equivalence matrix runs once, in the build above (its
# programs are the same code; under the sanitizers it would double CI time).
(cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=0 ctest -j"$jobs" --output-on-failure -E "^dist/")

secs="${FUZZ_SECONDS:-60}"
if [ "$secs" != 0 ]; then
  echo "== fuzz (${secs}s)"
  "$root/scripts/fuzz.sh" "$secs"
fi
echo "== all tests passed"
