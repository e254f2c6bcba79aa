#!/usr/bin/env bash
# The GPU check of the cuda target (issue 10), in two halves:
#
#   bench/gpu_check.sh pack   on this (CPU) machine: builds shardc and the
#                             CUDA runtime (nvcc, sm_90a), the kernel checks
#                             (tests/cuda/test_k_*.cu built by nvcc), the
#                             CUDA programs of the checks and their cpu
#                             references, into bench/gpu-pack.tar.xz
#   bench/gpu_check.sh run    on a machine with one NVIDIA H100/H200 and no
#                             network: unpacks it and runs, in about 6 or 7
#                             minutes, printing one table:
#     1. the kernel checks on the GPU against the cpu kernels (fp32 < 1e-5);
#     2. the tiny GPT 20 steps on the GPU (fp32: losses within 1e-4 of the cpu
#        target's; bf16, 16-bit activations and fp32 masters: the first 10
#        within 2e-2, all within 5e-2), and the memory check (planned
#        peak = the device arena's high-water mark);
#     3. GPT-2 124M (samples/gpt2-124m.shard, precision bf16, seq 1024, the
#        largest microbatch the plan fits in the H200's memory) for G2_STEPS
#        (12) steps on the built-in text: tokens/s and MFU over the steps
#        after G2_WARM (2) warm-up steps, MFU = (6N + 12·L·T·d) FLOPs per token × tokens/s ÷
#        989 TFLOP/s (dense bf16 peak of the H100 SXM and H200); the
#        compiler pads its LM head's bf16 weight copy to 50304 rows
#        (passes/precision.c); 3b: again built with SHARDC_HEAD_PAD=0,
#        the head's rows of 50257 unaligned, as the 2026-12-04 run ran it;
#        3c: again with --no-gemm-tune (cuBLASLt's heuristic's first
#        algorithm for every GEMM; 3 runs the fastest of its candidates,
#        timed in step 1, the "gemms:" line);
#     4. GPT-2's device time by kernel family (SHARDC_PROFILE);
#     5. the tiny GPT with --no-graph against the graph run, and run again
#        with the GEMM algorithms the first run timed and kept: bitwise;
#     6. `shardc calibrate --target cuda` on one rank (its one-rank build
#        without MPI, shardc-calib-cuda-serial: cuBLASLt fp32 and bf16 GEMMs,
#        axpy bandwidth, launch cost; capped at 60 s), the profile written to
#        $OUT/profile-h200.json, and the measured step of the three programs
#        above beside the cost model's prediction from the H200's catalog
#        figures (made when packing: shardc needs libclang, which the GPU
#        machine lacks);
#     7. GPT-2's bf16 GEMMs (bench/gemm_cuda.cu): the runtime's cuBLASLt
#        configuration against the best of 8 heuristic algorithms and
#        cublasGemmEx, the LM head at the vocabulary as given and padded,
#        and the epilogues the runtime asks for (GELU_AUX_BIAS, DGELU,
#        BGRADB) against the plain GEMM of their shapes; then the overlap
#        the cost model assumes for work beside a GEMM (a tensor-parallel
#        dX all-reduce beside the dW GEMM): the qkv dW GEMM with a copy
#        kernel of 8, 16, 32 blocks on a second stream, the share hidden;
#     (4b. the profile's attention again with SHARDC_ATT_MT=1: the forward
#        and dq kernels' one m-tile a warp against the default two)
#     8. two ranks on the one GPU under the packed Open MPI, collectives
#        staged through the host (--comm mpi): the tiny GPT at dp=2, tp=2,
#        pp=2 and sp=ring:2 (fp32) and dp=2 (bf16), 20 steps against the
#        cpu target.
#     9. issue 13's pipeline check on this machine's CPU cores (a core a
#        rank, so a stage's bubble is idle time, which the 2-core CI machine
#        lacks): bench/shampoo.sh's section 3, GPT d=512 x 8 layers, pp=4
#        (1f1b, mb=4), Shampoo roots every 10 steps, 24 steps, stagger =
#        false against stagger = true (the roots spread over the bubbles),
#        twice each: the slowest step of the staggered runs against the
#        unstaggered runs' median ordinary step (target: < 10%); reported,
#        not counted as a failure (a measurement, not a correctness check).
#    10. issue 13 on the GPU: Shampoo with root = eigh (LAPACK on the host)
#        on the GPT d=512 x 8 layers, batch 16, one GPU, fp32, 24 steps:
#        the roots at the optimizer step (SHARDC_ROOT_WORKER=0), on one host
#        thread from the step's start beside the GPU's forward and backward
#        (the default), and on 8 (SHARDC_ROOT_THREADS=8): the losses bitwise
#        the same (counted), and the mean step of each (reported).
#    11. the attention kernels alone at GPT-2's and a grouped-query shape
#        (bench/att_cuda.cu) against PyTorch's scaled_dot_product_attention
#        with each of its GPU backends (bench/att_torch.py), then ncu's
#        speed of light, occupancy and warp stalls of each of ours (last:
#        a diagnosis, after the checks and issue 13's measurements)
#   bench/gpu_check.sh predict PROFILE.json [GPU_CHECK.txt]
#                             back here: the predictions from the profile the
#                             run wrote, beside the run's measured steps.
#     Results go to $OUT/gpu_check.txt (the device tool brings them back)
#     or bench/results/gpu_check-DATE.txt.
#
# Why the pack is built here: the GPU machine has nvcc 13 (the same as
# here) but no flex/bison/libclang to build shardc, no OpenBLAS for the cpu
# reference kernels, no MPI and no network.  The CUDA code is compiled by
# nvcc for sm_90a; the pack carries OpenBLAS's shared library, and Open
# MPI as Debian's packages (apt-get download here, dpkg -x there into the
# check's directory, relocated by OPAL_PREFIX and PMIX_PREFIX) for step 8's
# two ranks on the one GPU (NCCL refuses two ranks a GPU: --comm mpi).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cmd="${1:-}"
tarball="$root/bench/gpu-pack.tar.xz"
# Step 8's Open MPI: Debian 12's packages of mpirun, libmpi and what they
# load (the fabric plugins' libraries are left out: those plugins fail to
# load, silently, and shared memory carries the messages)
MPI_DEBS="openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libnuma1 libmunge2 libudev1"
# Step 8's programs: name/strategy/model/tolerance[/first steps held to 2e-2]
MPI_RUNS="gpt_dp2/dp=2/gpt/1e-4 gpt_tp2/tp=2/gpt/1e-4 gpt_pp2/pp=2/gpt/1e-4 gpt_ring2/sp=ring:2/gpt/1e-4 gpt_bf16_dp2/dp=2/gpt_bf16/5e-2/10"

# mpi_env DIR: the environment that runs Open MPI unpacked (dpkg -x) into
# DIR; sets MPIRUN.  Relocated by OPAL_PREFIX (Open MPI's plugins and help
# files) and PMIX_PREFIX (PMIx's); the launch as root allowed, shared
# memory without single-copy (containers forbid it), plugin load errors
# quiet.
mpi_env() {
  local d="$1/usr" l="$1/usr/lib/x86_64-linux-gnu"
  export OPAL_PREFIX="$d" PMIX_PREFIX="$l/pmix2" PMIX_MCA_mca_base_component_path="$l/pmix2/lib/pmix"
  export PATH="$d/bin:$PATH" LD_LIBRARY_PATH="$l:$l/openmpi/lib:${LD_LIBRARY_PATH:-}"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 \
    OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_rmaps_base_oversubscribe=1
  MPIRUN="$d/bin/orterun"
}

pack() {
  local b="$root/build-gpupack" p
  p=$(mktemp -d "${TMPDIR:-/tmp}/gpu-pack.XXXXXX")
  trap 'rm -rf "$p"' RETURN
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
    { echo "gpu_check pack: needs nvcc (the CUDA toolkit)"; return 1; }
  echo "building shardc and the runtime (portable x86-64, nvcc sm_90a) in $b ..."
  bash "$root/scripts/build.sh" "$b" -DSHARDRT_NATIVE=OFF -DSHARDC_CUDA_ARCHS=90a || return 1
  local bin="$b/shardc"
  mkdir -p "$p/bin" "$p/lib" "$p/models" "$p/ref"
  local t
  for t in "$b"/runtime/cuda/cuda_gpu_test_k_*; do
    [ -x "$t" ] && cp "$t" "$p/bin/" && strip "$p/bin/$(basename "$t")"
  done
  [ -n "$(ls "$p/bin")" ] || { echo "gpu_check pack: no kernel checks were built by nvcc"; return 1; }
  # the calibrator: one rank, no MPI or NCCL (the GPU machine has neither)
  cp "$b/shardc-calib-cuda-serial" "$p/bin/" && strip "$p/bin/shardc-calib-cuda-serial" ||
    echo "gpu_check pack: no shardc-calib-cuda-serial (step 6 will say so)"
  # the GEMM check (step 7): GPT-2's bf16 GEMMs as the runtime calls cuBLASLt and two other ways
  local nvcc_bin
  nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  "$nvcc_bin" -O2 -std=c++17 -arch=sm_90a -o "$p/bin/gemm_cuda" "$root/bench/gemm_cuda.cu" \
    -lcublasLt -lcublas || echo "gpu_check pack: bench/gemm_cuda.cu did not build (step 7 will say so)"
  # the attention check (step 11): the runtime's attention kernels timed alone
  if [ -x "$b/runtime/cuda/att_cuda" ]; then
    cp "$b/runtime/cuda/att_cuda" "$p/bin/" && strip "$p/bin/att_cuda"
  else
    echo "gpu_check pack: no att_cuda (step 11 will say so)"
  fi
  # the programs: the tiny GPT in fp32 and in bf16 (16-bit activations), and GPT-2 124M
  local g="$p/src"
  mkdir -p "$g"
  cp "$root/samples/gpt.shard" "$g/gpt.shard"
  sed 's/precision = fp32/precision = bf16/' "$root/samples/gpt.shard" >"$g/gpt_bf16.shard"
  local mesh=(--mesh 1:H200_SXM --strategy dp=1)
  for m in gpt gpt_bf16; do
    SHARDC_CUDA_ARCH=sm_90a "$bin" build "$g/$m.shard" --target cuda "${mesh[@]}" \
      -o "$p/models/$m" >"$p/models/$m.build" 2>&1 || { cat "$p/models/$m.build"; return 1; }
  done
  # GPT-2: the largest microbatch (of the batch of 512) whose plan fits 141 GB
  local mb chosen=
  for mb in 128 64 32 16 8; do
    sed "s/microbatch = [0-9]*/microbatch = $mb/" "$root/samples/gpt2-124m.shard" >"$g/gpt2.shard"
    if "$bin" check "$g/gpt2.shard" --target cuda "${mesh[@]}" >/dev/null 2>&1; then
      chosen=$mb
      break
    fi
  done
  [ -n "$chosen" ] || { echo "gpu_check pack: GPT-2 fits no microbatch"; return 1; }
  SHARDC_CUDA_ARCH=sm_90a "$bin" build "$g/gpt2.shard" --target cuda "${mesh[@]}" \
    -o "$p/models/gpt2" >"$p/models/gpt2.build" 2>&1 || { cat "$p/models/gpt2.build"; return 1; }
  "$bin" compile "$g/gpt2.shard" --target cuda "${mesh[@]}" --emit=plan >"$p/models/gpt2.plan" 2>&1
  echo "$chosen" >"$p/models/gpt2.microbatch"
  # the same with the LM head unpadded (its bf16 rows of 50257 unaligned)
  cp "$g/gpt2.shard" "$g/gpt2u.shard"
  SHARDC_HEAD_PAD=0 SHARDC_CUDA_ARCH=sm_90a "$bin" build "$g/gpt2u.shard" --target cuda "${mesh[@]}" \
    -o "$p/models/gpt2u" >"$p/models/gpt2u.build" 2>&1 || { cat "$p/models/gpt2u.build"; return 1; }
  # the cost model's predicted step from the H200's catalog figures (step 6)
  for m in gpt gpt_bf16 gpt2 gpt2u; do
    SHARDC_HEAD_PAD=$([ $m = gpt2u ] && echo 0 || echo 1) \
      "$bin" compile "$g/$m.shard" --target cuda "${mesh[@]}" --emit=plan 2>&1 |
      grep -o 'predicted step [^,(]*' | head -1 >"$p/models/$m.predicted"
  done
  # step 8: the 2-rank programs, and Open MPI's packages
  local r name strat
  for r in $MPI_RUNS; do
    IFS=/ read -r name strat m _ <<<"$r"
    SHARDC_CUDA_ARCH=sm_90a "$bin" build "$g/$m.shard" --target cuda --mesh 2:H200_SXM \
      --strategy "$strat" -o "$p/models/$name" >"$p/models/$name.build" 2>&1 ||
      { cat "$p/models/$name.build"; return 1; }
    strip "$p/models/$name/train"
  done
  # step 9: bench/shampoo.sh's section 3 as cpu programs (portable: this
  # pack's runtime is built without -march=native)
  local sh="shampoo(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1, block = 256, precondition_every = 10, start_preconditioning = 2"
  local v
  for v in "pp_off:, stagger = false)" "pp_on:)"; do
    sed -e "s/optimizer = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)/optimizer = $sh${v#*:}/" \
      -e "s/steps = 8/steps = 1000/" "$root/bench/gpt_bench.shard" >"$g/${v%%:*}.shard"
    grep -q "optimizer = shampoo" "$g/${v%%:*}.shard" ||
      { echo "gpu_check pack: cannot set Shampoo in bench/gpt_bench.shard"; return 1; }
    "$bin" build "$g/${v%%:*}.shard" --mesh 4 --strategy pp=4,schedule=1f1b,mb=4 \
      -o "$p/models/${v%%:*}" >"$p/models/${v%%:*}.build" 2>&1 || { cat "$p/models/${v%%:*}.build"; return 1; }
    strip "$p/models/${v%%:*}/train"
  done
  # step 10: Shampoo with root = eigh on the GPU, its roots on host threads
  sed -e "s/optimizer = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)/optimizer = $sh)/" \
    -e "s/steps = 8/steps = 1000/" -e "s/batch = 4,/batch = 16,/" "$root/bench/gpt_bench.shard" >"$g/sh_eigh.shard"
  grep -q "optimizer = shampoo" "$g/sh_eigh.shard" && grep -q "batch = 16," "$g/sh_eigh.shard" ||
    { echo "gpu_check pack: cannot set Shampoo and batch 16 in bench/gpt_bench.shard"; return 1; }
  SHARDC_CUDA_ARCH=sm_90a "$bin" build "$g/sh_eigh.shard" --target cuda "${mesh[@]}" \
    -o "$p/models/sh_eigh" >"$p/models/sh_eigh.build" 2>&1 || { cat "$p/models/sh_eigh.build"; return 1; }
  strip "$p/models/sh_eigh/train"
  mkdir -p "$p/mpi-debs"
  # shellcheck disable=SC2086
  (cd "$p/mpi-debs" && apt-get download $MPI_DEBS >/dev/null 2>&1) ||
    { echo "gpu_check pack: apt-get download of Open MPI failed (step 8 will say so)"; rm -rf "$p/mpi-debs"; }
  for m in gpt gpt_bf16 gpt2 gpt2u; do strip "$p/models/$m/train"; done
  # the cpu target's tiny GPT, 20 steps: the reference losses
  "$bin" build "$g/gpt.shard" --mesh 1 --strategy dp=1 -o "$p/ref/gpt-cpu" >/dev/null || return 1
  "$p/ref/gpt-cpu/train" --steps 20 --quiet --data "$root/samples/data/tales.txt" \
    --log "$p/ref/gpt-cpu.jsonl" || return 1
  rm -rf "$p/ref/gpt-cpu" "$g"
  # OpenBLAS (the cpu kernels the checks compare with) and its runtime
  local l
  for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
    cp -L "$(ldconfig -p | sed -n "s/.*$l (libc6,x86-64) => //p" | head -1)" "$p/lib/" || return 1
  done
  tar -cJf "$tarball" -C "$p" . || return 1
  echo "packed $(du -h "$tarball" | cut -f1) into $tarball: run 'bench/gpu_check.sh run' on the GPU"
}

# losses_close REF RUN TOL [FIRST FIRST_TOL]: per-step relative loss
# difference, printed; 1 above TOL (or, over the first FIRST steps, above
# FIRST_TOL)
losses_close() {
  python3 - "$@" <<'EOF'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if l.strip()]
tol = float(sys.argv[3])
first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
ftol = float(sys.argv[5]) if len(sys.argv) > 5 else tol
if len(a) != len(b) or not a:
    print(f"{len(a)} and {len(b)} steps"); sys.exit(1)
d = [abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b)]
rel = max(d)
msg = f"max relative loss difference {rel:.2e} over {len(a)} steps (tolerance {tol:g})"
ok = rel <= tol
if first:
    msg += f", {max(d[:first]):.2e} over the first {first} (tolerance {ftol:g})"
    ok = ok and max(d[:first]) <= ftol
print(f"{msg}; loss {b[0]:.4f} -> {b[-1]:.4f}")
sys.exit(0 if ok else 1)
EOF
}

# att_rates PROFILE_OUT MICROBATCH: GPT-2's attention kernels in a profile's
# heaviest-kernel lines (ms a step) as TFLOP/s of the products they run:
# per call 2·B·H·T²·D a product over the causal tiles' (nt+1)/2nt share,
# 2 products forward, 3 in dq, 4 in dk/dv; 12 layers x 512/B microbatches
att_rates() {
  python3 - "$@" <<'PYEOF'
import re, sys
B = int(sys.argv[2]); H, T, D, L = 12, 1024, 64, 12
nt = T // 64
prod = 2.0 * B * H * T * T * D * (nt + 1) / (2 * nt)
calls = L * 512 // B
kern = (("forward", "attention_forward_tc_kernel", 2), ("dq", "attention_backward_dq_tc_kernel", 3),
        ("dk/dv", "attention_backward_dkdv_tc_kernel", 4))
out = []
for name, pat, n in kern:
    for line in open(sys.argv[1]):
        if pat in line:
            ms = float(re.search(r"([0-9.]+) ms", line.split(")")[-1]).group(1))
            out.append(f"{name} {n * prod * calls / (ms / 1e3) / 1e12:.0f} ({ms:.0f} ms)")
            break
print("  attention as run, TFLOP/s of its products: " + (", ".join(out) if out else "not in the profile"))
PYEOF
}

run() {
  [ -f "$tarball" ] || { echo "gpu_check run: no $tarball (run 'bench/gpu_check.sh pack' first)"; return 1; }
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check run: no NVIDIA GPU here (nvidia-smi -L failed): nothing to check"
    return 77
  fi
  local w res logs pass=0 fail=0
  # GPT-2's steps and the warm-up steps left out of its timing (a 15-minute
  # device lease: a slow step must not eat the rest of the check)
  local G2_STEPS="${G2_STEPS:-12}" G2_WARM="${G2_WARM:-2}"
  w=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
  res="${OUT:-$root/bench/results}/gpu_check.txt"
  [ -n "${OUT:-}" ] || res="$root/bench/results/gpu_check-$(date +%F).txt"
  mkdir -p "$(dirname "$res")"
  tar -xJf "$tarball" -C "$w" || return 1
  export LD_LIBRARY_PATH="$w/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  local data="$root/samples/data/tales.txt" bigdata="$w/tales-x3.txt"
  # GPT-2's batch (512 windows of 1024) needs more tokens than the sample text holds
  cat "$data" "$data" "$data" >"$bigdata"
  logs="$(dirname "$res")/gpu_check_logs.txt"
  say() { echo "$*" | tee -a "$res"; }
  # every run's output beside the table as it comes (the device tool brings
  # back what is there even when the lease's timeout stops the check)
  keep() { local f; for f in "$@"; do [ -f "$f" ] && { echo "==> $f <=="; cat "$f"; } >>"$logs"; done; }
  : >"$res"
  : >"$logs"
  say "# bench/gpu_check.sh run, $(date -u +%FT%TZ)"
  say "# $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  say ""
  say "## 1. kernel checks (tests/cuda/test_k_*.cu by nvcc) against the cpu kernels"
  local t
  for t in "$w"/bin/cuda_gpu_test_k_*; do
    local name log
    name=$(basename "$t")
    log="$w/$name.log"
    if (cd "$root/tests/cuda" && timeout 90 "$t") >"$log" 2>&1; then
      pass=$((pass + 1))
      say "PASS $name ($(grep -c PASS "$log") checks passed)"
    else
      fail=$((fail + 1))
      say "FAIL $name:"
      grep -E "FAIL|error" "$log" | head -20 | tee -a "$res"
    fi
    keep "$log"
  done
  say ""
  say "## 2. the tiny GPT, 20 steps on the GPU against the cpu target"
  # bf16: the first 10 steps within tests/cuda/programs.sh's 2e-2 of the
  # cpu's fp32 run (cuda-host: the same 10 steps), all 20 within 5e-2 (16-bit
  # rounding grows with the steps: 2e-4 at step 10, 3.4e-2 at step 19 on the
  # H200 on 2026-12-04)
  local m tol first
  for m in gpt:1e-4: gpt_bf16:5e-2:10; do
    first=${m##*:}
    m=${m%:*}
    tol=${m#*:}
    m=${m%%:*}
    local out
    out=$(timeout 90 "$w/models/$m/train" --steps 20 --data "$data" --log "$w/$m.jsonl" 2>&1)
    local rc=$?
    echo "$out" >"$w/$m.out"
    keep "$w/$m.out"
    grep -E "^(device|memory|gemms):" <<<"$out" | tee -a "$res"
    if [ $rc -ne 0 ]; then
      fail=$((fail + 1))
      say "FAIL $m: exit $rc: $(tail -5 <<<"$out")"
    elif grep -q MISMATCH <<<"$out"; then
      fail=$((fail + 1))
      say "FAIL $m: planned and measured memory differ"
    elif cmp=$(losses_close "$w/ref/gpt-cpu.jsonl" "$w/$m.jsonl" "$tol" ${first:+$first 2e-2}); then
      pass=$((pass + 1))
      say "PASS $m: $cmp"
    else
      fail=$((fail + 1))
      say "FAIL $m: $cmp"
    fi
  done
  say ""
  # gpt2: the sample as given (vocabulary 50257: the compiler pads the LM
  # head's bf16 copy to 50304 rows); gpt2u: built with SHARDC_HEAD_PAD=0
  local out rc g2 bin flags
  # 3c: gpt2 again with --no-gemm-tune (cuBLASLt's heuristic's first for
  # every GEMM, as before the runtime timed its candidates)
  for g2 in gpt2 gpt2u gpt2h; do
    bin=$g2 flags=
    [ $g2 = gpt2h ] && bin=gpt2 flags=--no-gemm-tune
    say "## 3$([ $g2 = gpt2u ] && echo b)$([ $g2 = gpt2h ] && echo c). GPT-2 124M, bf16$([ $g2 = gpt2u ] && echo ", the LM head unpadded (SHARDC_HEAD_PAD=0: rows of 50257)")$([ $g2 = gpt2h ] && echo ", --no-gemm-tune (the heuristic's first algorithm for every GEMM)"), microbatch $(cat "$w/models/gpt2.microbatch") x seq 1024, $G2_STEPS steps"
    if [ ! -x "$w/models/$bin/train" ]; then
      say "(no $bin in the pack)"
      continue
    fi
    out=$(timeout 150 "$w/models/$bin/train" --steps $G2_STEPS --data "$bigdata" --log "$w/$g2.jsonl" $flags 2>&1)
    rc=$?
    echo "$out" >"$w/$g2.out"
    keep "$w/$g2.out" "$w/$g2.jsonl"
    grep -E "^(device|memory|params|batch|gemms):" <<<"$out" | tee -a "$res"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
      fail=$((fail + 1))
      say "FAIL $g2: exit $rc: $(tail -5 <<<"$out")"
    fi
    python3 - "$w/$g2.jsonl" "$G2_WARM" "$g2" <<'EOF' | tee -a "$res"
import json, os, sys
g2 = sys.argv[3]
if not os.path.exists(sys.argv[1]):
    print(f"{g2}: no steps logged"); sys.exit(0)
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
warm = int(sys.argv[2])
timed = rows[warm:]
if not timed:
    print(f"{g2}: only {len(rows)} steps logged"); sys.exit(0)
tps = sum(r["tokens_per_s"] for r in timed) / len(timed)
ms = sum(r["step_ms"] for r in timed) / len(timed)
mfu = [r["mfu"] for r in timed if r.get("mfu") is not None]
print(f"{g2}: {len(timed)} steps after {min(warm, len(rows))} warm-up: {ms:.1f} ms/step, "
      f"{tps:,.0f} tokens/s, MFU {100 * sum(mfu) / len(mfu):.1f}% (model FLOPs per token from the "
      f"plan, the H200's 989 TFLOP/s bf16 peak); loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}")
EOF
    say ""
  done
  g2=gpt2
  say "## 4. where $g2's step goes: device time by kernel family (SHARDC_PROFILE, steps 3-4, no graphs)"
  out=$(SHARDC_PROFILE=2 timeout 90 "$w/models/$g2/train" --steps 4 --data "$bigdata" 2>&1)
  echo "$out" >"$w/$g2-profile.out"
  keep "$w/$g2-profile.out"
  sed -n '/^profile:/,/^done:/p' <<<"$out" | grep -v '^done:' | tee -a "$res"
  att_rates "$w/$g2-profile.out" "$(cat "$w/models/gpt2.microbatch")" | tee -a "$res"
  say ""
  say "## 4b. the same with the attention forward and dq on one m-tile (16 rows) a warp (SHARDC_ATT_MT=1) instead of two"
  out=$(SHARDC_ATT_MT=1 SHARDC_PROFILE=2 timeout 90 "$w/models/$g2/train" --steps 4 --data "$bigdata" 2>&1)
  echo "$out" >"$w/$g2-profile-mt1.out"
  keep "$w/$g2-profile-mt1.out"
  sed -n '/^profile:/,/^done:/p' <<<"$out" | grep -E '^profile:|attention' | tee -a "$res"
  att_rates "$w/$g2-profile-mt1.out" "$(cat "$w/models/gpt2.microbatch")" | tee -a "$res"
  say ""
  say "## 5. the tiny GPT without CUDA graphs (--no-graph): the same losses; run again with the"
  say "##    GEMM algorithms its first run timed and kept (gpt/train.gemm-algos): bitwise the same"
  out=$(timeout 90 "$w/models/gpt/train" --steps 20 --data "$data" --no-graph --log "$w/gpt-nograph.jsonl" 2>&1)
  if [ $? -eq 0 ] && cmp=$(losses_close "$w/gpt.jsonl" "$w/gpt-nograph.jsonl" 1e-6); then
    pass=$((pass + 1))
    say "PASS gpt --no-graph: $cmp"
  else
    fail=$((fail + 1))
    say "FAIL gpt --no-graph: ${cmp:-$(tail -3 <<<"$out")}"
  fi
  out=$(timeout 90 "$w/models/gpt/train" --steps 20 --data "$data" --log "$w/gpt-again.jsonl" 2>&1)
  grep -E "^gemms:" "$w/gpt.out" | sed 's/^/first run: /' | tee -a "$res"
  grep -E "^gemms:" <<<"$out" | sed 's/^/again:     /' | tee -a "$res"
  if [ "$(grep -o '"loss":[^,]*' "$w/gpt.jsonl")" = "$(grep -o '"loss":[^,]*' "$w/gpt-again.jsonl")" ]; then
    pass=$((pass + 1))
    say "PASS gpt again with the kept GEMM algorithms: bitwise the same losses"
  else
    fail=$((fail + 1))
    say "FAIL gpt again with the kept GEMM algorithms: $(diff <(grep -o '"loss":[^,]*' "$w/gpt.jsonl") <(grep -o '"loss":[^,]*' "$w/gpt-again.jsonl") | head -4) $(tail -3 <<<"$out")"
  fi
  say ""
  say "## 6. calibration (cuBLASLt, axpy, launch on one GPU) and the predicted step against the measured"
  local prof
  prof="$(dirname "$res")/profile-h200.json"
  if [ ! -x "$w/bin/shardc-calib-cuda-serial" ]; then
    fail=$((fail + 1))
    say "FAIL calibrate: the pack has no shardc-calib-cuda-serial"
    prof=
  elif timeout 60 "$w/bin/shardc-calib-cuda-serial" "$prof" >"$w/calib.out" 2>&1; then
    python3 - "$prof" <<'EOF' | tee -a "$res"
import json, sys
p = json.load(open(sys.argv[1]))
top = lambda k: max(y for x, y in p[k]) if p.get(k) else 0
print(f"profile {sys.argv[1]}: {p['device']}: fp32 GEMM up to {top('gemm') / 1e12:.1f} TFLOP/s, "
      f"bf16 GEMM up to {top('gemm_bf16') / 1e12:.1f} TFLOP/s, axpy up to {top('bw') / 1e9:.0f} GB/s, "
      f"launch {p['launch_s'] * 1e6:.2f} us, {p.get('launch_graph_s', 0) * 1e6:.2f} us a kernel of a replayed graph")
# the fused attention kernels (seconds a (batch, head) row at D = 64, causal):
# TFLOP/s counting the causal half of 4·T²·D forward and 2.5x that backward
for k, mult in (("attention_bf16", 1.0), ("attention_bwd_bf16", 2.5)):
    pts = ", ".join(f"T={int(t)} {mult * 2 * t * t * 64 / s / 1e12:.0f}" for t, s in p.get(k, []))
    if pts:
        print(f"  {k}: {pts} TFLOP/s")
EOF
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    say "FAIL calibrate (exit $?): $(tail -3 "$w/calib.out")"
    prof=
  fi
  local measured
  for m in gpt gpt_bf16 gpt2 gpt2u; do
    measured=$(python3 - "$w/$m.jsonl" <<'EOF'
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
except OSError:
    rows = []
t = [r["step_ms"] for r in rows[5:] if "step_ms" in r]
print(f"{sum(t) / len(t):.2f} ms (mean of {len(t)} steps after 5)" if t else "none logged")
EOF
)
    say "$m: measured $measured; catalog's $(cat "$w/models/$m.predicted" 2>/dev/null)"
  done
  [ -z "$prof" ] || say "(predictions from the profile: bench/gpu_check.sh predict profile-h200.json gpu_check.txt, where shardc runs)"
  say ""
  say "## 7. GPT-2's bf16 GEMMs (M = 131072 tokens): the runtime's cuBLASLt call, the best of 8 algorithms, cublasGemmEx; the epilogues' GEMMs against the plain ones; the share of a GEMM and a copy beside it that overlaps"
  if [ -x "$w/bin/gemm_cuda" ]; then
    timeout 120 "$w/bin/gemm_cuda" 2>&1 | tee -a "$res"
  else
    say "(no bench/gemm_cuda in the pack)"
  fi
  say ""
  say "## 8. two ranks on the one GPU (--comm mpi: the collectives staged through the host; Open MPI from the pack), 20 steps against the cpu target"
  if [ ! -d "$w/mpi-debs" ] || ! command -v dpkg >/dev/null; then
    fail=$((fail + 1))
    say "FAIL: $([ -d "$w/mpi-debs" ] && echo "no dpkg here to unpack Open MPI" || echo "no Open MPI in the pack")"
  else
    local f r name strat
    mkdir -p "$w/mpi"
    for f in "$w"/mpi-debs/*.deb; do dpkg -x "$f" "$w/mpi"; done
    : >"$w/mpi-verdicts.txt"
    (
      mpi_env "$w/mpi"
      for r in $MPI_RUNS; do
        IFS=/ read -r name strat m tol first <<<"$r"
        out=$(timeout 120 "$MPIRUN" -np 2 "$w/models/$name/train" --steps 20 --comm mpi \
          --data "$data" --log "$w/$name.jsonl" 2>&1)
        rc=$?
        echo "$out" >"$w/$name.out"
        keep "$w/$name.out"
        grep -E "^(device|memory):" <<<"$out" | sort -u | tee -a "$res"
        if [ $rc -ne 0 ]; then
          echo "FAIL $name ($strat): exit $rc: $(tail -5 <<<"$out")"
        elif grep -q MISMATCH <<<"$out"; then
          echo "FAIL $name ($strat): planned and measured memory differ"
        elif cmp=$(losses_close "$w/ref/gpt-cpu.jsonl" "$w/$name.jsonl" "$tol" ${first:+$first 2e-2}); then
          echo "PASS $name ($strat, 2 ranks): $cmp"
        else
          echo "FAIL $name ($strat, 2 ranks): $cmp"
        fi | tee -a "$res" "$w/mpi-verdicts.txt"
      done
    )
    pass=$((pass + $(grep -c "^PASS" "$w/mpi-verdicts.txt")))
    fail=$((fail + $(grep -c "^FAIL" "$w/mpi-verdicts.txt")))
  fi
  say ""
  say "## 9. Shampoo's roots in pp=4's bubbles on this machine's CPU cores (4 ranks, a core each; $(nproc --all) cores), 24 steps, twice each, once without the root worker (reported, not counted)"
  if [ ! -d "$w/mpi" ] || [ ! -x "$w/models/pp_on/train" ]; then
    say "(not run: $([ -d "$w/mpi" ] && echo "no Shampoo programs in the pack" || echo "no Open MPI unpacked (step 8)"))"
  else
    (
      mpi_env "$w/mpi"
      export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
      # a core a rank (--bind-to core): a rank's root worker gets its own
      # core's idle time only, the pipeline's bubbles, as with a GPU a rank;
      # pp_main: the root worker off (SHARDC_ROOT_WORKER=0), once
      for rep in 1 2; do
        for v in pp_off pp_on pp_main; do
          [ $v = pp_main ] && [ $rep = 2 ] && continue
          SHARDC_ROOT_WORKER=$([ $v = pp_main ] && echo 0 || echo 1) timeout 150 "$MPIRUN" -np 4 \
            --bind-to core:overload-allowed -x SHARDC_ROOT_WORKER "$w/models/${v/pp_main/pp_on}/train" --steps 24 \
            --data "$data" --log "$w/$v$rep.jsonl" >"$w/$v$rep.out" 2>&1 ||
            echo "  $v (run $rep): exit $?: $(tail -3 "$w/$v$rep.out")"
          grep "^roots:" "$w/$v$rep.out" | sed "s/^/  $v (run $rep): /"
          keep "$w/$v$rep.out"
        done
      done
      python3 - "$w" <<'PYEOF' 2>&1
import json, statistics, sys
w = sys.argv[1]
def steps(name):
    try:
        return {r["step"]: r["step_ms"] for r in map(json.loads, open(f"{w}/{name}.jsonl")) if r["step"] >= 4}
    except OSError:
        return {}
root = lambda s: s - 1 >= 2 and (s - 1 - 2) % 10 == 0   # 0-based steps 2, 12, 22
off = [steps(f"pp_off{k}") for k in (1, 2)]
on = [steps(f"pp_on{k}") for k in (1, 2)]
if not all(off + on):
    print("  (a run did not finish: no figures)"); sys.exit(0)
ordn = statistics.median(v for r in off for s, v in r.items() if not root(s))
rmax = max(v for r in off for s, v in r.items() if root(s))
onv = [v for r in on for v in r.values()]
print(f"  stagger = false: ordinary step (median) {ordn:.1f} ms, slowest root step {rmax:.1f} ms: spike {100 * (rmax / ordn - 1):+.1f}%")
print(f"  stagger = true:  median {statistics.median(onv):.1f} ms ({100 * (statistics.median(onv) / ordn - 1):+.1f}%), "
      f"slowest {max(onv):.1f} ms: spike {100 * (max(onv) / ordn - 1):+.1f}% over stagger = false's ordinary step (target < 10%)")
main = list(steps("pp_main1").values())
if main:
    print(f"  stagger = true, no root worker (SHARDC_ROOT_WORKER=0: the roots on the main thread while its receives wait): "
          f"median {statistics.median(main):.1f} ms ({100 * (statistics.median(main) / ordn - 1):+.1f}%), "
          f"slowest {max(main):.1f} ms ({100 * (max(main) / ordn - 1):+.1f}%)")
PYEOF
    ) | tee -a "$res"
  fi
  say ""
  say "## 10. Shampoo, root = eigh, on the GPU (GPT d=512 x 8, batch 16, fp32, 24 steps): the roots at the optimizer step, on 1 host thread from the step's start, on 8"
  if [ ! -x "$w/models/sh_eigh/train" ]; then
    say "(not run: no Shampoo program in the pack)"
  else
    local v
    for v in sync:0:1 thread1:1:1 thread8:1:8; do
      IFS=: read -r name on nth <<<"$v"
      SHARDC_ROOT_WORKER=$on SHARDC_ROOT_THREADS=$nth timeout 150 "$w/models/sh_eigh/train" --steps 24 \
        --data "$data" --log "$w/sh_$name.jsonl" >"$w/sh_$name.out" 2>&1 ||
        say "  $name: exit $?: $(tail -3 "$w/sh_$name.out")"
      grep "^roots:" "$w/sh_$name.out" | sed "s/^/  $name: /" | tee -a "$res"
      keep "$w/sh_$name.out"
    done
    if [ -s "$w/sh_sync.jsonl" ] &&
       [ "$(grep -o '"loss":[^,]*' "$w/sh_sync.jsonl")" = "$(grep -o '"loss":[^,]*' "$w/sh_thread1.jsonl")" ] &&
       [ "$(grep -o '"loss":[^,]*' "$w/sh_sync.jsonl")" = "$(grep -o '"loss":[^,]*' "$w/sh_thread8.jsonl")" ]; then
      pass=$((pass + 1))
      say "PASS shampoo eigh: the host threads' roots give bitwise the optimizer step's losses (1 and 8 threads)"
    else
      fail=$((fail + 1))
      say "FAIL shampoo eigh: the losses differ between the roots at the optimizer step and on host threads"
    fi
    python3 - "$w" <<'PYEOF' 2>&1 | tee -a "$res"
import json, statistics, sys
w = sys.argv[1]
for name in ("sync", "thread1", "thread8"):
    try:
        ms = [r["step_ms"] for r in map(json.loads, open(f"{w}/sh_{name}.jsonl")) if r["step"] >= 4]
    except OSError:
        ms = []
    if ms:
        print(f"  {name:8s} mean step {statistics.mean(ms):8.1f} ms, median {statistics.median(ms):8.1f} ms, slowest {max(ms):8.1f} ms (steps 4..24)")
PYEOF
  fi
  say ""
  say "## 11. attention alone: ours (bench/att_cuda.cu) against PyTorch's scaled_dot_product_attention"
  say "##     (bench/att_torch.py: FlashAttention-2, cuDNN, memory-efficient), same shapes and layout; then ncu on ours"
  if [ -x "$w/bin/att_cuda" ]; then
    timeout 60 "$w/bin/att_cuda" 2>&1 | tee -a "$res"
  else
    say "(no att_cuda in the pack)"
  fi
  timeout 120 python3 "$root/bench/att_torch.py" 2>&1 | tee -a "$res"
  local ncu_bin
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$ncu_bin" ] && [ -x "$w/bin/att_cuda" ]; then
    # each kernel of one forward and one backward (GPT-2's shape at B = 4):
    # speed of light, occupancy, launch figures and where warps stall
    timeout 150 "$ncu_bin" --clock-control none --kernel-name regex:attention_ \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      "$w/bin/att_cuda" --ncu >"$w/att-ncu.txt" 2>&1
    say "ncu (rc $?; the whole report in the logs):"
    keep "$w/att-ncu.txt"
    grep -E '^  [A-Za-z_]*attention|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Dynamic Shared Memory Per Block|Block Limit (Registers|Shared Mem)|Theoretical Occupancy|Achieved Occupancy|Warp Cycles Per Issued|being stalled' \
      "$w/att-ncu.txt" | cut -c1-220 | tee -a "$res"
  else
    say "(no ncu here: the kernels' counters not read)"
  fi
  say ""
  say "$pass passed, $fail failed"
  keep "$w/gpt-nograph.jsonl" "$w/calib.out"
  rm -rf "$w"
  [ $fail -eq 0 ]
}

# predict PROFILE [RESULTS]: the predicted step of the three programs of step
# 6 from the GPU's profile (this tree's shardc), beside the measured steps
# that RESULTS (the run's gpu_check.txt) recorded.
predict() {
  local prof="${1:-}" res="${2:-}" bin="$root/build/shardc" g m mb
  [ -f "$prof" ] || { echo "usage: bench/gpu_check.sh predict PROFILE.json [GPU_CHECK.txt]"; return 2; }
  [ -x "$bin" ] || { echo "gpu_check predict: no $bin (scripts/build.sh)"; return 1; }
  g=$(mktemp -d "${TMPDIR:-/tmp}/gpu-predict.XXXXXX")
  trap 'rm -rf "$g"' RETURN
  mb=16
  [ -n "$res" ] && mb=$(sed -n 's/^## 3\. GPT-2 124M, bf16[ A-Za-z]*, microbatch \([0-9]*\) .*/\1/p' "$res" | head -1)
  cp "$root/samples/gpt.shard" "$g/gpt.shard"
  sed 's/precision = fp32/precision = bf16/' "$root/samples/gpt.shard" >"$g/gpt_bf16.shard"
  sed "s/microbatch = [0-9]*/microbatch = ${mb:-16}/" "$root/samples/gpt2-124m.shard" >"$g/gpt2.shard"
  cp "$g/gpt2.shard" "$g/gpt2u.shard"
  for m in gpt gpt_bf16 gpt2 gpt2u; do
    echo "$m: $([ -n "$res" ] && grep -o "^$m: measured [^;]*" "$res" | head -1 | sed "s/^$m: //")" \
      "predicted from the profile: $(SHARDC_HEAD_PAD=$([ $m = gpt2u ] && echo 0 || echo 1) "$bin" compile "$g/$m.shard" --target cuda --mesh 1:H200_SXM \
        --strategy dp=1 --emit=plan --profile "$prof" 2>&1 | grep -o 'predicted step [^,(]*' | head -1)"
  done
}

case "$cmd" in
pack) pack ;;
run) run ;;
predict) predict "${@:2}" ;;
*)
  echo "usage: bench/gpu_check.sh pack|run|predict   (pack here; run on the GPU machine; predict here)"
  exit 2
  ;;
esac
