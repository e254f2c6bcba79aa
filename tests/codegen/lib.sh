# Shared by the tests/codegen/*.sh scripts: build samples with `shardc build`,
# run the training programs, count passes and failures.
#   source "$(dirname "$0")/lib.sh"  (after setting bin=SHARDC)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
pass=0 fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardc-cg.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Generated code must compile without a single warning.
export SHARDC_CFLAGS="${SHARDC_CFLAGS:--Wextra -Werror}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# shared memory alone, as ctest sets it (CMakeLists.txt, shardc_test_environment)
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}" OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

ok() { pass=$((pass + 1)); }
bad() {
  echo "FAIL: $*"
  fail=$((fail + 1))
}
finish() {
  echo "$pass passed, $fail failed"
  [ $fail -eq 0 ]
  exit $?
}
need_mpi() {
  if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    echo "SKIP: needs mpirun and mpicc (Open MPI)"
    exit 77
  fi
}

source tests/pyserve.sh  # pyserve_start, py

# fast_runs: for the scripts that build and run dozens of plans (CI's
# time): their programs compile at -O1, the host builds of CUDA programs
# too (about half the compile time; the samples' programs compile at the
# programs' own -O3 with warnings as errors in tests/codegen, and nvcc's in
# cuda/build-all), each rank runs one OpenMP and one OpenBLAS thread (what
# a rank gets anyway where ranks outnumber the cores; OpenBLAS's pool
# would spin at every start), and the Python checkers run in one
# interpreter (pyserve_start).
fast_runs() {
  export SHARDC_CFLAGS="$SHARDC_CFLAGS -O1" SHARDC_CXXFLAGS="${SHARDC_CXXFLAGS:-} -O1"
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  pyserve_start
}

# model_of SAMPLE: the model file of SAMPLE: a script's own variant
# $MODELS_DIR/SAMPLE.shard where it has one, else samples/SAMPLE.shard, else
# tests/dist/SAMPLE.shard (a test model no sample covers), else SAMPLE (a path)
model_of() {
  local src="${MODELS_DIR:-samples}/$1.shard"
  [ -f "$src" ] || src="samples/$1.shard"
  [ -f "$src" ] || src="tests/dist/$1.shard"
  [ -f "$src" ] || src="$1"
  echo "$src"
}

# build SAMPLE DIR [shardc flags...]: shardc build SAMPLE's model_of -o DIR
build() {
  local s="$1" dir="$2"
  shift 2
  local out src
  src=$(model_of "$s")
  if ! out=$("$bin" build "$src" -o "$dir" "$@" 2>&1); then
    bad "build $s $*: $out"
    return 1
  fi
  if grep -q "warning" <<<"$out"; then
    bad "build $s: the C compiler warned: $out"
    return 1
  fi
}

# small_models [BATCH]: MODELS_DIR=$tmp/models holds the tiny GPT, the
# tiny llama and tests/dist/gpt3.shard training batches of BATCH sequences
# (default 8) in microbatches of 2 (theirs are 16 or 8 in 4s), for the
# scripts whose runs check what does not depend on the batch (CI's time: a
# step costs its rows); the other samples as they are.
small_models() {
  local b="${1:-8}" f
  export MODELS_DIR="$tmp/models"
  mkdir -p "$MODELS_DIR"
  for f in samples/gpt.shard samples/llama.shard tests/dist/gpt3.shard tests/dist/gptpad.shard; do
    sed "s/batch = \(16\|8\), seq = ctx, microbatch = 4/batch = $b, seq = ctx, microbatch = 2/" \
      "$f" >"$MODELS_DIR/$(basename "$f")"
    grep -q "batch = $b, seq = ctx, microbatch = 2" "$MODELS_DIR/$(basename "$f")" ||
      bad "small_models: no batch line to shrink in $f"
  done
}

# ranks DIR: the mesh size the program in DIR is planned for
ranks() {
  local f="$1/model.c"
  [ -f "$f" ] || f="$1/model.cu"
  sed -n 's/^#define RANKS *\([0-9]*\).*/\1/p' "$f" | head -1
}

# train DIR args...: runs DIR/train under mpirun with its planned rank count
# (directly when it has one rank); output in $out, status in $rc.
train() {
  local dir="$1"
  shift
  local n
  n=$(ranks "$dir")
  if [ "$n" = 1 ]; then
    out=$(timeout "${TRAIN_TIMEOUT:-300}" "$dir/train" "$@" 2>&1)
  else
    out=$(timeout "${TRAIN_TIMEOUT:-300}" "${MPIRUN[@]}" -np "$n" "$dir/train" "$@" 2>&1)
  fi
  rc=$?
  if grep -qE "AddressSanitizer|LeakSanitizer|runtime error:" <<<"$out"; then
    bad "$dir/train $*: sanitizer report"
    echo "$out" | head -30
  fi
}

# losses FILE.jsonl: "step loss" per line
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

# expect_fail NAME PATTERN: the last train run failed (exit != 0) saying PATTERN
expect_fail() {
  local name="$1" pat="$2"
  if [ "$rc" = 0 ]; then
    bad "$name: exit 0, expected a failure"
    echo "$out" | tail -5
  elif ! grep -qE -- "$pat" <<<"$out"; then
    bad "$name: output does not match /$pat/ (exit $rc)"
    echo "$out" | tail -8
  else
    ok
  fi
}
