#!/usr/bin/env bash
# Every CUDA, cuBLASLt and NCCL call of the CUDA runtime (runtime/cuda/, but
# the host shim that implements them) and of generated CUDA programs (the
# golden .cu files, and a fresh program of each sample) is error-checked
# (tests/cuda/checked_calls.py); and the check finds the three unchecked
# calls planted in tests/cuda/unchecked_sample.cu.txt.
#   tests/cuda/checked.sh SHARDC
bin="$(realpath "$1")"
source "$(dirname "$0")/../codegen/lib.sh"
for s in samples/*.shard; do
  n=$(basename "$s" .shard)
  "$bin" compile "$s" --target cuda --emit=c >"$tmp/$n.cu" 2>"$tmp/$n.err" ||
    bad "$s: --target cuda --emit=c failed: $(head -3 "$tmp/$n.err")"
done
if out=$(python3 tests/cuda/checked_calls.py runtime/cuda/*.cu runtime/cuda/*.cuh \
         tests/golden-c/*.cu "$tmp"/*.cu); then
  ok
  echo "  $out"
else
  bad "unchecked calls: $out"
fi
out=$(python3 tests/cuda/checked_calls.py tests/cuda/unchecked_sample.cu.txt)
if [ $? -ne 0 ] && [ "$(grep -c 'is not checked' <<<"$out")" = 3 ]; then ok; else
  bad "the planted unchecked calls were not all found: $out"
fi
finish
