#!/usr/bin/env bash
# The test suite: build (warnings are errors) and run every test, then again
# under AddressSanitizer + UndefinedBehaviorSanitizer, then fuzz the frontend
# for a bounded time (FUZZ_SECONDS, default 30, on every core; 0 skips).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="$(nproc)"
"$root/scripts/build.sh" "$root/build"
echo "== tests (RelWithDebInfo)"
(cd "$root/build" && ctest -j"$jobs" --output-on-failure)

echo "== tests (ASan + UBSan)"
"$root/scripts/build.sh" "$root/build-asan" -DSHARDC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
# The distributed equivalence matrix runs once, in the build above (its
# programs are the same code; under the sanitizers it would double CI time),
# and so do the optimizers' PyTorch parity and the CUDA host-build programs
# (parity/optimizers, cuda/optim2, cuda/programs: CI's time; codegen/optim
# and the cuda/k_* kernel tests run the same code under the sanitizers), and
# the samples' PyTorch parity (parity/torch: its programs are the samples'
# that codegen/train and codegen/resume build and train under the
# sanitizers; its other half is PyTorch), and the gradient checks
# (codegen/gradcheck: the fp64 twins of the programs codegen/train and
# codegen/resume run under the sanitizers) and the driver's own mesh test
# (runtime/mpi/test_train: train.c, which the programs of codegen/train,
# codegen/resume and codegen/bad_input link and run under them).
# Leaks are errors: LeakSanitizer with tests/lsan.supp, which suppresses
# only Open MPI's own allocations.  (The sanitizer build sets the same for
# every test, tests/tests.cmake and runtime/CMakeLists.txt, so a plain ctest
# in build-asan checks leaks too, in the programs the tests run as well.)
(cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 \
  LSAN_OPTIONS=suppressions="$root/tests/lsan.supp":print_suppressions=0 \
  ctest -j"$jobs" --output-on-failure -E "^dist/|^parity/optimizers$|^parity/torch$|^cuda/optim2$|^cuda/programs$|^codegen/gradcheck$|^runtime/mpi/test_train$")

secs="${FUZZ_SECONDS:-30}"
if [ "$secs" != 0 ]; then
  echo "== fuzz (${secs}s x $jobs workers)"
  "$root/scripts/fuzz.sh" "$secs" "$jobs"
fi
echo "== all tests passed"
