#!/usr/bin/env bash
# The instruction mix of the CUDA kernels' inner loops, without a GPU: nvcc
# compiles a runtime/cuda source to a cubin for sm_90a (as libshardrt_cuda
# builds it), nvdisasm (not in the toolkit here: NVIDIA's wheel from PyPI,
# nvidia-cuda-nvdisasm, downloaded once into ~/.cache/shardc-nvdisasm)
# disassembles it, and for each kernel whose name matches PATTERN the
# script prints its largest loops (a backward branch's span) with the count
# of each opcode: tensor-core instructions (HMMA, HGMMA) against the rest,
# local-memory traffic (LDL/STL: spills), barriers.  The count of issue
# slots a loop needs beside its HMMAs bounds the rate an SM can sustain;
# a kernel measured far below that bound stalls (latency, barriers,
# memory), which only a GPU profile shows.
#   bench/sass_mix.sh [SOURCE.cu] [PATTERN] [LOOPS]
#   (default runtime/cuda/k_attention.cu, tc_kernel, 2)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="${1:-$root/runtime/cuda/k_attention.cu}"
pat="${2:-tc_kernel}"
nloops="${3:-2}"
command -v nvcc >/dev/null || { echo "sass_mix: no nvcc"; exit 77; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/shardc-nvdisasm"
dis=$(find "$cache" -name nvdisasm -type f 2>/dev/null | head -1 || true)
if [ -z "$dis" ]; then
  mkdir -p "$cache"
  (cd "$cache" && python3 -m pip download --no-deps -q nvidia-cuda-nvdisasm &&
     python3 -m zipfile -e nvidia_cuda_nvdisasm-*.whl .) ||
    { echo "sass_mix: could not fetch nvdisasm (pip download nvidia-cuda-nvdisasm)"; exit 77; }
  dis=$(find "$cache" -name nvdisasm -type f | head -1)
  chmod +x "$dis"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I"$root/runtime" \
  -I"$root/runtime/cuda" -cubin -o "$tmp/k.cubin" "$src"
"$dis" -c "$tmp/k.cubin" >"$tmp/k.sass"
python3 - "$tmp/k.sass" "$pat" "$nloops" <<'EOF'
import collections, re, sys
lines = open(sys.argv[1]).read().split("\n")
pat, nloops = sys.argv[2], int(sys.argv[3])
starts = [i for i, l in enumerate(lines) if l.startswith(".text.")]
for k, s in enumerate(starts):
    name = lines[s][len(".text."):].rstrip(":")
    if pat not in name:
        continue
    body = lines[s:starts[k + 1] if k + 1 < len(starts) else len(lines)]
    labels, ins = {}, []
    for l in body:
        m = re.match(r"^\s*(\.L_x_\d+):", l)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*);", l)
        if m:
            ins.append((m.group(2).split(".")[0], m.group(3)))
    loops = []
    for i, (op, rest) in enumerate(ins):
        m = re.search(r"(\.L_x_\d+)", rest) if op == "BRA" else None
        if m and labels.get(m.group(1), i + 1) <= i:
            loops.append((labels[m.group(1)], i))
    loops.sort(key=lambda x: x[0] - x[1])
    print(f"{name}: {len(ins)} instructions")
    for a, b in loops[:nloops]:
        c = collections.Counter(op for op, _ in ins[a:b + 1])
        mma = c["HMMA"] + c["HGMMA"]
        rest = b + 1 - a - mma
        print(f"  loop [{a}, {b}]: {b + 1 - a} instructions, HMMA/HGMMA {mma}, others {rest}"
              + (f" ({rest / mma:.1f} a tensor-core instruction)" if mma else "")
              + f", LDL/STL {c['LDL'] + c['STL']}, BAR {c['BAR']}, LDSM {c['LDSM']}")
        print("    " + " ".join(f"{op} {n}" for op, n in c.most_common(16)))
EOF
