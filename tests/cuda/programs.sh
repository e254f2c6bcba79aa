#!/usr/bin/env bash
# The CUDA programs run on this CPU (issue 10): `shardc build --target
# cuda-host` builds the very program --target cuda writes, with the kernels
# through runtime/cuda/host/cuda_host.h, cuBLASLt as OpenBLAS and NCCL as
# MPI.  The tiny GPT and the classifier train 10 steps and must give the cpu
# target's per-step losses and final checkpoint within 1e-4; plans on 2 and
# 4 ranks (NCCL collectives and overlapped buckets; ZeRO; pipelines, whose
# messages are NCCL groups, captured, interleaved ones with Megatron's pairs;
# 2D tensor parallelism; ring attention on NCCL
# send/recv; tensor parallelism with --comm mpi; a padded vocabulary, whose
# cross-entropy takes the first `classes` columns) train 3 steps against the
# 1-rank cpu run.  Every run's planned memory equals the device arena's
# high-water mark and, on a mesh, the bytes sent equal the plan's (replayed
# steps counted too).  Runs use CUDA graphs (the default) where the plan
# allows them; the tiny GPT also runs with --no-graph and must give bitwise
# the same losses and checkpoint, and a run resumed from a checkpoint with
# graphs must end bitwise where the run without a break ends.
#   tests/cuda/programs.sh SHARDC
bin="$(realpath "$1")"
source "$(dirname "$0")/../codegen/lib.sh"
export SHARDC_STRICT_COMM=1
# the side streams' collectives (buckets, gathers ahead and early, trailing
# reduce-scatters, tensor-parallel dX reductions) run as late as their
# events allow (runtime/cuda/host/cuda_host.h): a missing wait changes the
# numbers these runs compare (RTCH_DEFER_STREAMS=0 to run them at once)
export RTCH_DEFER_STREAMS="${RTCH_DEFER_STREAMS:-1}"
fast_runs  # (lib.sh: -O1, a thread a rank, one Python; CI's time)
# CI's time: the tiny GPT, llama and gpt3 train batches of 4 sequences in
# microbatches of 2 (lib.sh's small_models): the host build runs the kernels one thread
# after another, and a step costs its rows.  Kernels, plans, collectives
# and graphs are the samples'.
small_models 4

# same NAME DIR STEPS REF [train flags...]: DIR's run (DIR.jsonl, DIR.st) against REF's
same() {
  local name="$1" d="$2" steps="$3" ref="$4"
  shift 4
  train "$d" --steps "$steps" --log "$d.jsonl" --save "$d.st" "$@"
  if [ $rc -ne 0 ]; then bad "$name: exit $rc: $(tail -5 <<<"$out")"; return; fi
  if grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out"; then
    bad "$name: memory or communication differ from the plan: $(grep -E '^(memory|comm):' <<<"$out")"
    return
  fi
  local cmp
  if cmp=$(py tests/dist/compare.py "$ref.jsonl" "$d.jsonl" "$ref.st" "$d.st" 1e-4); then
    ok
    printf '  %-36s %s\n' "$name" "$cmp"
  else
    bad "$name: $cmp"
  fi
}

# reference SAMPLE STEPS: the cpu target on one rank
reference() {
  build "$1" "$tmp/$1-cpu" --mesh 1 --strategy dp=1 || return 1
  train "$tmp/$1-cpu" --steps "$2" --quiet --log "$tmp/$1-cpu.jsonl" --save "$tmp/$1-cpu.st"
  [ $rc -eq 0 ] || { bad "$1 cpu reference: $out"; return 1; }
}

# host SAMPLE RANKS STRATEGY STEPS GRAPHS: GRAPHS is the start line's on/off
host() {
  local s="$1" n="$2" st="$3" steps="$4" g="$5"
  local d="$tmp/$s-cuda-${st//[=,:]/_}"
  build "$s" "$d" --target cuda-host --mesh "$n" --strategy "$st" || return
  same "$s cuda-host $st ($n rank$([ "$n" = 1 ] || echo s))" "$d" "$steps" "$tmp/$s-cpu"
  grep -q "^graphs:   $g" <<<"$out" && ok || bad "$s $st: expected graphs $g: $(grep '^graphs:' <<<"$out")"
}

# losses LOG: the per-step losses, as printed
losses() { grep -o '"loss":[^,]*' "$1"; }

# bitwise NAME A B: the runs A and B (A.jsonl, A.st) have the same losses and checkpoint
bitwise() {
  if [ "$(losses "$2.jsonl")" = "$(losses "$3.jsonl")" ] && cmp -s "$2.st" "$3.st"; then
    ok
    printf '  %-36s %s\n' "$1" "bitwise equal"
  else
    bad "$1: the losses or checkpoints differ: $(diff <(losses "$2.jsonl") <(losses "$3.jsonl") | head -4)"
  fi
}

reference mlp 10 && host mlp 1 dp=1 10 on
# (the sanitizer pass, CUDA_PROGRAMS_QUICK, skips the --no-graph and resumed
# reruns for CI's time: the normal pass runs them)
reference gpt 10 && host gpt 1 dp=1 10 on && [ -z "${CUDA_PROGRAMS_QUICK:-}" ] && {
  # graphs off: bitwise the same run
  d="$tmp/gpt-cuda-dp_1"
  train "$d" --steps 10 --no-graph --log "$d-eager.jsonl" --save "$d-eager.st"
  if [ $rc -eq 0 ] && grep -q "^graphs:   off (--no-graph)" <<<"$out"; then
    bitwise "gpt cuda-host --no-graph" "$d" "$d-eager"
  else
    bad "gpt --no-graph: exit $rc: $(tail -3 <<<"$out")"
  fi
  # resumed with graphs from step 5's checkpoint: where the whole run ends
  train "$d" --steps 5 --quiet --save "$d-5.st" &&
    train "$d" --steps 10 --load "$d-5.st" --log "$d-resumed.jsonl" --save "$d-resumed.st"
  if [ $rc -eq 0 ] && cmp -s "$d.st" "$d-resumed.st" &&
     [ "$(losses "$d.jsonl" | tail -5)" = "$(losses "$d-resumed.jsonl")" ]; then
    ok
    printf '  %-36s %s\n' "gpt cuda-host resumed at step 5" "bitwise equal"
  else
    bad "gpt resumed with graphs: exit $rc: the losses or checkpoint differ from the whole run"
  fi
  # --gemm-algos: a file that is not one is refused and kept; a stale one
  # (another device) is timed again (the host build times nothing: one
  # algorithm) and the run is the same; the flags' misuse is a usage error
  printf 'step,loss\n1,4.2\n' >"$d-not-algos.csv"
  train "$d" --steps 1 --gemm-algos "$d-not-algos.csv"
  if [ $rc -eq 1 ] && grep -q "is not a shardc GEMM algorithm file" <<<"$out" &&
     [ "$(cat "$d-not-algos.csv")" = "$(printf 'step,loss\n1,4.2')" ]; then ok
  else bad "--gemm-algos on another file: exit $rc: $(tail -2 <<<"$out")"; fi
  # a FIFO (no writer) is refused, not waited on
  mkfifo "$d-algos.fifo"
  TRAIN_TIMEOUT=20 train "$d" --steps 1 --gemm-algos "$d-algos.fifo"
  [ $rc -eq 1 ] && grep -q "algos.fifo: cannot read the GEMM algorithms: not a regular file" <<<"$out" && ok ||
    bad "--gemm-algos on a FIFO: exit $rc: $(tail -2 <<<"$out")"
  printf '# shardc GEMM algorithms (train --gemm-algos)\ndevice "NVIDIA H200" cublaslt 130000\n' \
    >"$d-stale.algos"
  train "$d" --steps 10 --gemm-algos "$d-stale.algos" --log "$d-algos.jsonl" --save "$d-algos.st"
  if [ $rc -eq 0 ] && grep -q "^gemms:    .*stale.algos: it was timed on NVIDIA H200" <<<"$out"; then
    bitwise "gpt cuda-host with a stale --gemm-algos" "$d" "$d-algos"
  else bad "--gemm-algos stale: exit $rc: $(grep gemms <<<"$out") $(tail -2 <<<"$out")"; fi
  train "$d" --steps 1 --gemm-algos "$d-stale.algos" --no-gemm-tune
  [ $rc -eq 2 ] && grep -q "give one of them" <<<"$out" && ok ||
    bad "--gemm-algos with --no-gemm-tune: exit $rc: $out"
  train "$tmp/gpt-cpu" --steps 1 --no-gemm-tune
  [ $rc -eq 2 ] && grep -q "no-gemm-tune is for programs built with --target cuda" <<<"$out" && ok ||
    bad "a cpu program with --no-gemm-tune: exit $rc: $out"
}
if [ -n "${CUDA_PROGRAMS_QUICK:-}" ]; then
  # the sanitizer build (CI time): one mesh plan, NCCL as MPI with graphs
  command -v mpirun >/dev/null && command -v mpicxx >/dev/null &&
    reference gpt 3 && host gpt 2 tp=2,dp=1 3 on
elif command -v mpirun >/dev/null && command -v mpicxx >/dev/null; then
  reference gpt 3 && {
    host gpt 2 dp=2 3 on
    host gpt 2 tp=2,sp=megatron 3 on  # vocab-parallel cross-entropy on NCCL, captured
    host gpt 4 tp=2,dp=2,zero=1 3 on
    # --comm mpi: every collective (the vocab-parallel cross-entropy's too)
    # through host copies and MPI, eagerly
    build gpt "$tmp/gpt-cuda-mpi" --target cuda-host --mesh 2 --strategy tp=2 &&
      same "gpt cuda-host tp=2 --comm mpi" "$tmp/gpt-cuda-mpi" 3 "$tmp/gpt-cpu" --comm mpi &&
      { grep -q "^graphs:   off (--comm mpi" <<<"$out" && ok || bad "--comm mpi: $(grep '^graphs:' <<<"$out")"; }
    host gpt 2 dp=2,zero=3 3 on
    # pipelines: with tp here, alone on gpt3 below (CI's time)
    host gpt 4 tp=2,pp=2,schedule=1f1b 3 on  # the cross-entropy on stashed buffers
    # interleaved over 2 microbatches: its NCCL groups are proven, captured
    host gpt 2 pp=2,schedule=interleaved:2 3 on
    host gpt 4 tp2d=2x2 3 on  # SUMMA and split norms on NCCL, captured
    host gpt 2 sp=ring:2 3 on  # ring attention's K, V on NCCL send/recv, captured
    host gpt 8 tp2d=2x2,sp=ring:2 3 on  # both on one program
    # what bench/gpu_check.sh's step 8 runs on one GPU (two ranks, --comm
    # mpi: collectives staged through the host), here first: data
    # parallelism and ring attention staged (its cpu ring on host copies)
    same "gpt cuda-host dp=2 --comm mpi" "$tmp/gpt-cuda-dp_2" 3 "$tmp/gpt-cpu" --comm mpi
    same "gpt cuda-host sp=ring:2 --comm mpi" "$tmp/gpt-cuda-sp_ring_2" 3 "$tmp/gpt-cpu" --comm mpi
    build gpt "$tmp/gpt-cuda-pp2" --target cuda-host --mesh 2 --strategy pp=2 &&
      same "gpt cuda-host pp=2 --comm mpi" "$tmp/gpt-cuda-pp2" 3 "$tmp/gpt-cpu" --comm mpi
  }
  # interleaved over 4 microbatches: each action's receives posted with the
  # sends before them could hang, so a forward's post takes the next
  # backward's receives too (passes/commpass.c's pairs), captured; bitwise
  # the run whose messages go through MPI
  sed 's/batch = 4, seq = ctx, microbatch = 2/batch = 8, seq = ctx, microbatch = 2/' \
    "$MODELS_DIR/gpt.shard" >"$MODELS_DIR/gpt8.shard"
  reference gpt8 3 && host gpt8 2 pp=2,schedule=interleaved:2 3 on && {
    d="$tmp/gpt8-cuda-pp_2_schedule_interleaved_2"
    if grep -q "backward_in" "$d/model.cu"; then ok; else bad "gpt8 interleaved: no pairs"; fi
    train "$d" --steps 3 --comm mpi --log "$d-x.jsonl" --save "$d-x.st"
    [ $rc -eq 0 ] && bitwise "gpt8 interleaved pairs vs --comm mpi" "$d" "$d-x" ||
      bad "gpt8 interleaved --comm mpi: exit $rc: $(tail -3 <<<"$out")"
  }
  reference llama 3 && host llama 2 tp=2 3 on
  # a padded vocabulary (cross_entropy's classes): rows ld apart on one rank,
  # vocab-parallel shards with unused columns on two
  reference gptpad 3 && {
    host gptpad 1 dp=1 3 on
    host gptpad 2 tp=2 3 on
  }
  # a pipeline cut that two tensors cross (tests/dist/gpt3.shard's pp=2 cuts
  # blocks.1 after its fc matmul: two messages each way per microbatch)
  reference gpt3 3 && host gpt3 2 pp=2,schedule=1f1b 3 on && {
    # the messages as NCCL groups (captured) and staged through MPI: the same run
    d="$tmp/gpt3-cuda-pp_2_schedule_1f1b"
    for f in "--comm mpi" --no-graph; do
      train "$d" --steps 3 $f --log "$d-x.jsonl" --save "$d-x.st"
      if [ $rc -eq 0 ] && grep -q "^graphs:   off" <<<"$out"; then
        bitwise "gpt3 pp=2 $f vs NCCL groups" "$d" "$d-x"
      else
        bad "gpt3 pp=2 $f: exit $rc: $(grep '^graphs:' <<<"$out") $(tail -3 <<<"$out")"
      fi
    done
  }
else
  echo "SKIP: the mesh runs need MPI (mpirun, libshardrt_cuda_dist_host)"
fi

# precision = bf16 (passes/precision.c: 16-bit activations and their
# gradients, fp32 masters, gradients, optimizer state, statistics): the
# tiny GPT's 10 losses within 2e-2 of the cpu target's fp32 run and not
# bitwise its (the 16-bit path ran), the arena smaller than the fp32 build's
# and planned = measured; on 4 ranks (tp=2, sp=megatron, dp=2: bf16
# collectives and the vocab-parallel cross-entropy) and tp2d=2x2 (bf16
# SUMMA) against the same reference, and a pipeline (bf16 messages, gpt3's
# cut) against gpt3's.
sed 's/precision = fp32/precision = bf16/' "$MODELS_DIR/gpt.shard" >"$tmp/gpt_bf16.shard"
# near NAME DIR STEPS: DIR's losses against the gpt cpu reference (or
# $NEAR_REF's), 2e-2
near() {
  local name="$1" d="$2" steps="$3" ref="${NEAR_REF:-$tmp/gpt-cpu$3}"
  shift 3
  train "$d" --steps "$steps" --log "$d.jsonl" --save "$d.st" "$@"
  if [ $rc -ne 0 ]; then bad "$name: exit $rc: $(tail -5 <<<"$out")"; return; fi
  if grep -q MISMATCH <<<"$out" || ! grep -q "^memory:   planned" <<<"$out"; then
    bad "$name: memory or communication differ from the plan: $(grep -E '^(memory|comm):' <<<"$out")"
    return
  fi
  local cmp
  if cmp=$(py tests/dist/compare.py "$ref.jsonl" "$d.jsonl" "$ref.st" "$d.st" 2e-2 1e9) &&
     [ "$(losses "$d.jsonl")" != "$(losses "$ref.jsonl")" ]; then
    ok
    printf '  %-36s %s\n' "$name" "$cmp"
  else
    bad "$name: $cmp (or bitwise the fp32 losses)"
  fi
}
build gpt "$tmp/gpt-cpu10" --mesh 1 --strategy dp=1 &&
  train "$tmp/gpt-cpu10" --steps 10 --quiet --log "$tmp/gpt-cpu10.jsonl" --save "$tmp/gpt-cpu10.st" &&
  build "$tmp/gpt_bf16.shard" "$tmp/gpt-bf16" --target cuda-host --mesh 1 --strategy dp=1 && {
    # each MLP's fc and GELU one call (GELU_AUX_BIAS), proj's backward and
    # the GELU's one call (DGELU): codegen/cuda.c pair(), for all 4 layers
    nf=$(grep -c 'rt_matmul_forward_gelu_cu(' "$tmp/gpt-bf16/model.cu")
    nb=$(grep -c 'rt_matmul_backward_dgelu_cu(' "$tmp/gpt-bf16/model.cu")
    [ "$nf" = 4 ] && [ "$nb" = 4 ] && ! grep -q 'rt_gelu_\(forward\|backward\)_cu(' "$tmp/gpt-bf16/model.cu" &&
      ok || bad "gpt bf16: GELU calls not paired with their GEMMs ($nf forward, $nb backward of 4)"
    near "gpt bf16 cuda-host (1 rank)" "$tmp/gpt-bf16" 10
    # SHARDC_PROFILE (gpu_check's step 4): the table of kernel families and
    # the heaviest kernels, after the warm-up step, graphs off
    SHARDC_PROFILE=1 train "$tmp/gpt-bf16" --steps 2
    if [ $rc -eq 0 ] && grep -q "^graphs:   off (SHARDC_PROFILE" <<<"$out" &&
       grep -qE "^profile:  device time per step by kernel family over 1 step" <<<"$out" &&
       grep -qE "^  attention +[0-9.]+ ms" <<<"$out" && grep -qE "^  matmul +[0-9.]+ ms" <<<"$out" &&
       grep -q "^  the heaviest kernels:" <<<"$out"; then ok
    else bad "SHARDC_PROFILE: exit $rc: $(grep -E '^(graphs|profile)' <<<"$out" | head -3)"; fi
    # 3 steps with a checkpoint, for the bitwise comparisons below
    train "$tmp/gpt-bf16" --steps 3 --quiet --log "$tmp/gpt-bf16-3.jsonl" --save "$tmp/gpt-bf16-3.st"
    [ $rc -eq 0 ] || bad "gpt bf16 3 steps: exit $rc: $(tail -3 <<<"$out")"
    # the fused loops 8 elements a thread (16-byte vectors; codegen/cuda.c
    # loop8) compute bit for bit what the one-element form does
    if grep -q 'rtc_ld8(' "$tmp/gpt-bf16/model.cu" &&
       SHARDC_LOOP8=0 build "$tmp/gpt_bf16.shard" "$tmp/gpt-bf16-l1" --target cuda-host --mesh 1 --strategy dp=1; then
      if grep -q 'rtc_ld8(' "$tmp/gpt-bf16-l1/model.cu"; then bad "SHARDC_LOOP8=0: still vector loops"
      else
        # 3 steps (CI's time), against the 3-step run above
        train "$tmp/gpt-bf16-l1" --steps 3 --quiet --log "$tmp/gpt-bf16-l1.jsonl" --save "$tmp/gpt-bf16-l1.st"
        bitwise "gpt bf16 loops 8 a thread vs 1" "$tmp/gpt-bf16-3" "$tmp/gpt-bf16-l1"
      fi
    else bad "gpt bf16: no vector loops (rtc_ld8) in model.cu"; fi
    # every launch's blocks and threads run last first (cuda_host.cc
    # RTCH_REVERSE): the same losses bit for bit, or a kernel reads what
    # another thread writes without the barrier that orders them
    if [ -z "${CUDA_PROGRAMS_QUICK:-}" ]; then
      RTCH_REVERSE=1 train "$tmp/gpt-bf16" --steps 3 --quiet --log "$tmp/gpt-bf16-rev.jsonl" --save "$tmp/gpt-bf16-rev.st"
      [ $rc -eq 0 ] && bitwise "gpt bf16 threads in reverse order (3 steps)" "$tmp/gpt-bf16-3" "$tmp/gpt-bf16-rev" ||
        bad "gpt bf16 with RTCH_REVERSE=1: exit $rc: $(tail -3 <<<"$out")"
    fi
    a16=$(sed -n 's/.*\.arena_bytes = \([0-9]*\).*/\1/p' "$tmp/gpt-bf16/model.cu")
    a32=$(sed -n 's/.*\.arena_bytes = \([0-9]*\).*/\1/p' "$tmp/gpt-cuda-dp_1/model.cu" 2>/dev/null)
    if [ -n "$a16" ] && [ -n "$a32" ] && [ "$a16" -lt "$a32" ]; then ok
    else bad "bf16 arena ${a16:-?} bytes is not below fp32's ${a32:-?}"; fi
  }
if [ -z "${CUDA_PROGRAMS_QUICK:-}" ] && command -v mpirun >/dev/null && command -v mpicxx >/dev/null; then
  train "$tmp/gpt-cpu10" --steps 3 --quiet --log "$tmp/gpt-cpu3.jsonl" --save "$tmp/gpt-cpu3.st"
  build "$tmp/gpt_bf16.shard" "$tmp/gpt-bf16-4" --target cuda-host --mesh 4 --strategy tp=2,sp=megatron,dp=2 &&
    near "gpt bf16 cuda-host tp=2,sp=megatron,dp=2" "$tmp/gpt-bf16-4" 3
  # tp2d: bf16 SUMMA blocks, fp32 partial sums; 3 steps, so steps 2 and 3
  # replay the captured graph (a launch there once read its element count
  # through a pointer into a stack frame long gone)
  build "$tmp/gpt_bf16.shard" "$tmp/gpt-bf16-2d" --target cuda-host --mesh 4 --strategy tp2d=2x2 &&
    near "gpt bf16 cuda-host tp2d=2x2" "$tmp/gpt-bf16-2d" 3
  build "$tmp/gpt_bf16.shard" "$tmp/gpt-bf16-ring" --target cuda-host --mesh 2 --strategy sp=ring:2 &&
    near "gpt bf16 cuda-host sp=ring:2" "$tmp/gpt-bf16-ring" 3 &&
    near "gpt bf16 cuda-host sp=ring:2 --comm mpi" "$tmp/gpt-bf16-ring" 3 --comm mpi
  # gpu_check step 8's bf16 run: dp=2, its buckets staged through the host
  build "$tmp/gpt_bf16.shard" "$tmp/gpt-bf16-dp2" --target cuda-host --mesh 2 --strategy dp=2 &&
    near "gpt bf16 cuda-host dp=2 --comm mpi" "$tmp/gpt-bf16-dp2" 3 --comm mpi
  # scatter/gather (stages on two nodes): each tp rank sends half of a bf16
  # boundary message, the receiver all-gathers the halves over tp on NCCL
  build "$tmp/gpt_bf16.shard" "$tmp/gpt-bf16-pptp" --target cuda-host --mesh 2x2 --strategy pp=2,tp=2 && {
    if grep -q "rt_pipe_recv_gather" "$tmp/gpt-bf16-pptp/model.cu"; then
      near "gpt bf16 cuda-host pp=2,tp=2 (scatter/gather)" "$tmp/gpt-bf16-pptp" 3
    else bad "gpt bf16 pp=2,tp=2: its messages are not scattered (no rt_pipe_recv_gather)"; fi
  }
  # ZeRO-1/2 under bf16 (passes/zero.c masters_sharded): the fp32 masters
  # are the ranks' shards, the matmul weights gathered once a step as 16-bit
  # copies (the rest in fp32); against the cpu reference, and bitwise the
  # run with whole masters and an fp32 all-gather after the update
  # (SHARDC_ZERO_MASTERS=whole, as before), losses and checkpoint; one of
  # them resumed from step 2 ends bitwise where the whole run does.
  # tp=2 (tp-partial buckets) and an interleaved pipeline (its chunks share
  # one layout and one shard array) on 4 ranks.
  zm() {  # zm NAME SRC MESH STRATEGY
    local d="$tmp/$1-masters"
    build "$2" "$d" --target cuda-host --mesh "$3" --strategy "$4" &&
      SHARDC_ZERO_MASTERS=whole build "$2" "$d-whole" --target cuda-host --mesh "$3" --strategy "$4" || return 1
    NEAR_REF="${ZM_REF:-$tmp/gpt-cpu3}" near "$1 bf16 cuda-host $4 (sharded masters)" "$d" 3
    grep -q "memory: .*gathered weight copies" <<<"$out" && ok ||
      bad "$1 $4: no gathered weight copies: $(grep -m1 '^memory:' <<<"$out")"
    train "$d-whole" --steps 3 --quiet --log "$d-whole.jsonl" --save "$d-whole.st"
    [ $rc -eq 0 ] && bitwise "$1 $4 sharded vs whole masters" "$d" "$d-whole" ||
      bad "$1 $4 whole masters: exit $rc: $(tail -3 <<<"$out")"
  }
  zm gpt "$tmp/gpt_bf16.shard" 2 dp=2,zero=2 && {
    d="$tmp/gpt-masters"
    train "$d" --steps 2 --quiet --save "$d-2.st" &&
      train "$d" --steps 3 --load "$d-2.st" --log "$d-resumed.jsonl" --save "$d-resumed.st"
    if [ $rc -eq 0 ] && cmp -s "$d.st" "$d-resumed.st" &&
       [ "$(losses "$d.jsonl" | tail -1)" = "$(losses "$d-resumed.jsonl")" ]; then ok
    else bad "gpt dp=2,zero=2 sharded masters resumed at step 2: exit $rc: differs from the whole run"; fi
    # the sharded run's checkpoint (full tensors under the model's names)
    # resumed by the whole-masters program: the same trajectory, bit for bit
    train "$d-whole" --steps 3 --load "$d-2.st" --log "$d-crossed.jsonl" --save "$d-crossed.st"
    if [ $rc -eq 0 ] && cmp -s "$d.st" "$d-crossed.st" &&
       [ "$(losses "$d.jsonl" | tail -1)" = "$(losses "$d-crossed.jsonl")" ]; then ok
    else bad "gpt dp=2,zero=2 sharded masters' step-2 checkpoint resumed with whole masters: exit $rc: differs"; fi
  }
  zm gpt "$tmp/gpt_bf16.shard" 2x2 tp=2,dp=2,zero=1
  sed 's/precision = fp32/precision = bf16/' "$MODELS_DIR/gpt8.shard" >"$tmp/gpt8_bf16.shard"
  [ -f "$tmp/gpt8-cpu.jsonl" ] &&
    ZM_REF="$tmp/gpt8-cpu" zm gpt8 "$tmp/gpt8_bf16.shard" 2x2 dp=2,pp=2,zero=2,schedule=interleaved:2
  # ZeRO-3 under bf16: the buckets of weights read only through 16-bit
  # casts are gathered in 16 bits (their shards cast once a step), one
  # layer ahead as the fp32 ones; against the cpu reference, and fewer
  # bytes sent than the fp32 gathers of SHARDC_ZERO_MASTERS=whole
  d="$tmp/gpt-z3-16"
  build "$tmp/gpt_bf16.shard" "$d" --target cuda-host --mesh 2 --strategy dp=2,zero=3 && {
    near "gpt bf16 cuda-host dp=2,zero=3 (16-bit gathers)" "$d" 3
    c16=$("$bin" compile "$tmp/gpt_bf16.shard" --target cuda --mesh 2 --strategy dp=2,zero=3 2>&1 |
          sed -n 's/^comm:     \([0-9,]*\) bytes sent.*/\1/p' | tr -d ,)
    c32=$(SHARDC_ZERO_MASTERS=whole "$bin" compile "$tmp/gpt_bf16.shard" --target cuda --mesh 2 --strategy dp=2,zero=3 2>&1 |
          sed -n 's/^comm:     \([0-9,]*\) bytes sent.*/\1/p' | tr -d ,)
    if grep -q 'rtc_allgather_ahead(p->mesh, RT_AX_DP, (float \*)BF(' "$d/model.cu" && [ -n "$c16" ] &&
       [ -n "$c32" ] && [ "$c16" -lt "$c32" ]; then ok
    else bad "zero=3 bf16: no 16-bit gathers ahead, or ${c16:-?} bytes sent not below ${c32:-?}"; fi
  }
  # ZeRO-2/3 under bf16: each microbatch's bucket reduce-scatters trail
  # (rtc_reduce_scatter_trail, beside the next layer's backward): the same
  # run as with them blocking (SHARDC_ZERO_RS=blocking), bitwise under
  # ZeRO-2; under ZeRO-3 the buffers the trailing ones keep move the
  # gathered weights to addresses of other alignments, on which the host
  # build's GEMMs (OpenBLAS) round differently: within 1e-4 there (the
  # runtime finishing each at once gives the trailing build's losses)
  for st in dp=2,zero=2 dp=2,zero=3; do
    d="$tmp/gpt-trail-${st//[=,]/_}"
    if build "$tmp/gpt_bf16.shard" "$d" --target cuda-host --mesh 2 --strategy "$st" &&
       SHARDC_ZERO_RS=blocking build "$tmp/gpt_bf16.shard" "$d-b" --target cuda-host --mesh 2 --strategy "$st"; then
      if grep -q 'rtc_reduce_scatter_trail(' "$d/model.cu" && grep -q 'rtc_reduce_scatter_finish();' "$d/model.cu" &&
         ! grep -q 'rtc_reduce_scatter_trail(' "$d-b/model.cu"; then
        train "$d" --steps 3 --quiet --log "$d.jsonl" --save "$d.st"
        [ $rc -eq 0 ] && train "$d-b" --steps 3 --quiet --log "$d-b.jsonl" --save "$d-b.st"
        if [ $rc -ne 0 ]; then
          bad "gpt bf16 $st trailing reduce-scatters: exit $rc: $(tail -3 <<<"$out")"
        elif [ "$st" = dp=2,zero=2 ]; then
          bitwise "gpt bf16 $st trailing vs blocking reduce-scatters" "$d" "$d-b"
        elif cmp=$(py tests/dist/compare.py "$d-b.jsonl" "$d.jsonl" "$d-b.st" "$d.st" 1e-4 1e9); then
          ok
          printf '  %-36s %s\n' "gpt bf16 $st trailing vs blocking" "$cmp"
        else
          bad "gpt bf16 $st trailing vs blocking reduce-scatters: $cmp"
        fi
      else
        bad "gpt bf16 $st: no trailing reduce-scatters, or SHARDC_ZERO_RS=blocking still trails"
      fi
    fi
  done
  # bf16 messages of a cut that two tensors cross (16-bit each), against
  # gpt3's fp32 cpu run (from the mesh runs above)
  sed 's/precision = fp32/precision = bf16/' "$MODELS_DIR/gpt3.shard" >"$tmp/gpt3_bf16.shard"
  [ -f "$tmp/gpt3-cpu.jsonl" ] &&
    build "$tmp/gpt3_bf16.shard" "$tmp/gpt3-bf16-pp" --target cuda-host --mesh 2 --strategy pp=2,schedule=1f1b &&
    NEAR_REF="$tmp/gpt3-cpu" near "gpt3 bf16 cuda-host pp=2 (2-tensor cut)" "$tmp/gpt3-bf16-pp" 3
fi

# An LM head with 16-bit rows that are not 16-byte aligned (the tiny GPT
# with a vocabulary of 260: 520-byte rows): the precision pass pads its
# weight copy to 320 rows (passes/precision.c), the logits and dlogits to
# 320 columns, the cross-entropy over the first 260 and dW from them
# (rt_matmul_backward_rows_cu).  Five steps against the cpu target's fp32
# run of the same model (2e-2, as bf16 above; planned = measured memory),
# and against the unpadded bf16 program (SHARDC_HEAD_PAD=0) within 1e-3:
# the padding adds zero products, and only changes how bf16 roundings fall.
sed 's/vocab = 256/vocab = 260/' "$MODELS_DIR/gpt.shard" >"$tmp/gpt260.shard"
sed 's/precision = fp32/precision = bf16/' "$tmp/gpt260.shard" >"$tmp/gpt260_bf16.shard"
build "$tmp/gpt260.shard" "$tmp/gpt260-cpu" --mesh 1 --strategy dp=1 &&
  train "$tmp/gpt260-cpu" --steps 5 --quiet --log "$tmp/gpt260-cpu.jsonl" --save "$tmp/gpt260-cpu.st" &&
  build "$tmp/gpt260_bf16.shard" "$tmp/gpt260-pad" --target cuda-host --mesh 1 --strategy dp=1 && {
    if grep -q 'rt_matmul_backward_rows_cu(.*, 128, 320, 260);' "$tmp/gpt260-pad/model.cu" &&
       grep -q 'rt_crossentropy_forward_site_ld_cu(.*, 260, 320));' "$tmp/gpt260-pad/model.cu"; then
      NEAR_REF="$tmp/gpt260-cpu" near "gpt vocab 260 bf16 cuda-host, padded head" "$tmp/gpt260-pad" 5
      SHARDC_HEAD_PAD=0 build "$tmp/gpt260_bf16.shard" "$tmp/gpt260-unpad" --target cuda-host --mesh 1 --strategy dp=1 &&
        train "$tmp/gpt260-unpad" --steps 5 --quiet --log "$tmp/gpt260-unpad.jsonl" --save "$tmp/gpt260-unpad.st" &&
        if grep -q rt_matmul_backward_rows_cu "$tmp/gpt260-unpad/model.cu"; then
          bad "SHARDC_HEAD_PAD=0: the head is still padded"
        elif cmp=$(py tests/dist/compare.py "$tmp/gpt260-unpad.jsonl" "$tmp/gpt260-pad.jsonl" \
                     "$tmp/gpt260-unpad.st" "$tmp/gpt260-pad.st" 1e-3 1e9); then
          ok
          printf '  %-36s %s\n' "padded vs unpadded head (bf16)" "$cmp"
        else
          bad "padded vs unpadded head: $cmp"
        fi
    else
      bad "gpt vocab 260 bf16: the head is not padded: $(grep -E 'matmul_backward|crossentropy_forward' "$tmp/gpt260-pad/model.cu" | tail -2)"
    fi
  }

# Under ZeRO-3 (parameters gathered per use: no step copy) each cast of the
# gathered table before a use of the head writes the padded copy alike:
# five steps against the cpu target's fp32 run, planned = measured memory.
[ -f "$tmp/gpt260-cpu.jsonl" ] &&
  build "$tmp/gpt260_bf16.shard" "$tmp/gpt260-z3" --target cuda-host --mesh 2 --strategy dp=2,zero=3 && {
    if grep -q 'rt_matmul_backward_rows_cu(.*, 320, 260);' "$tmp/gpt260-z3/model.cu"; then
      NEAR_REF="$tmp/gpt260-cpu" near "gpt vocab 260 bf16 cuda-host dp=2,zero=3, padded head" "$tmp/gpt260-z3" 5
    else
      bad "gpt vocab 260 bf16 dp=2,zero=3: the head is not padded"
    fi
  }

# A plan larger than the device's free memory is refused before the first
# step, with the numbers (a 1 GiB emulated device: RTCH_DEVICE_MEMORY).
build gpt "$tmp/gpt-oom" --target cuda-host --mesh 1 --strategy dp=1 && {
  out=$(RTCH_DEVICE_MEMORY=1000000 "$tmp/gpt-oom/train" --steps 1 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -q "the plan needs [0-9]* bytes .* of device memory per rank (.*), the GPU has 1000000 .* free" <<<"$out" &&
     ! grep -q "^step" <<<"$out"; then ok; else bad "out of device memory: exit $rc: $out"; fi
  # room for the arena but not for the kernels' workspace (cuBLASLt's 32
  # MiB, taken with the arena): refused before the first step too, not by
  # a failed allocation in the middle of it
  arena=$(sed -n 's/.*\.arena_bytes = \([0-9]*\).*/\1/p' "$tmp/gpt-oom/model.cu")
  ws=$(sed -n 's/.*\.kernel_ws = \([0-9]*\).*/\1/p' "$tmp/gpt-oom/model.cu")
  out=$(RTCH_DEVICE_MEMORY=$((arena + 1048576)) "$tmp/gpt-oom/train" --steps 1 2>&1)
  rc=$?
  if [ "${ws:-0}" -ge 33554432 ] && [ $rc -eq 1 ] &&
     grep -q "([0-9]* arena + $ws kernel workspace), the GPU has $((arena + 1048576))" <<<"$out" && ! grep -q "^step" <<<"$out"; then ok
  else bad "workspace over the device memory: ws ${ws:-none}, exit $rc: $out"; fi
}

# Two ranks on one GPU: NCCL refuses the communicator (ncclInvalidUsage,
# "Duplicate GPU detected"; played by RTCH_SHARED_GPU): the error says why
# and what to do, before any step
if [ -x "$tmp/gpt-cuda-dp_2/train" ]; then
  RTCH_SHARED_GPU=1 train "$tmp/gpt-cuda-dp_2" --steps 1
  if [ $rc -ne 0 ] && grep -q "hint: two ranks on one GPU? NCCL needs a GPU per rank" <<<"$out" &&
     ! grep -q "^step" <<<"$out"; then ok
  else bad "two ranks on one GPU: exit $rc: $(grep -E 'error|hint' <<<"$out" | head -3)"; fi
fi

# A non-finite update is never saved (the device's parameters and state
# are checked on the host mirror before the write): the test hook
# SHARDC_TEST_NAN_AFTER=1 leaves a NaN in the device's first parameter after
# a first step with a finite loss; --save refuses it (nothing written),
# --save-every keeps the good file byte for byte.
sed 's/sgd(lr = 0.05, momentum = 0.9)/shampoo(lr = 0.05, start_preconditioning = 0)/' \
  samples/mlp.shard >"$tmp/mlp_blowup.shard"
build "$tmp/mlp_blowup.shard" "$tmp/mlp-blowup" --target cuda-host --mesh 1 --strategy dp=1 && {
  d="$tmp/mlp-blowup"
  export SHARDC_TEST_NAN_AFTER=1
  train "$d" --steps 1 --save "$d/x.st"
  if [ $rc -eq 1 ] && grep -qE "^train: error: after step 1, tensor '[a-z0-9_.]+' holds (NaN|[+-]inf) at element [0-9]+: not saving .*x.st \(nothing was saved\)" <<<"$out" &&
     [ ! -e "$d/x.st" ]; then ok
  else bad "cuda-host: a non-finite update saved, or not said: exit $rc: $(tail -3 <<<"$out")"; fi
  train "$d" --steps 0 --save "$d/g.st" --quiet
  cp "$d/g.st" "$d/g0.st"
  train "$d" --load "$d/g.st" --steps 3 --save "$d/g.st" --save-every 1
  [ $rc -eq 1 ] && grep -q "not saving .*g.st (it keeps its last good state)" <<<"$out" &&
    cmp -s "$d/g.st" "$d/g0.st" && ok ||
    bad "cuda-host: --save-every wrote a non-finite checkpoint: exit $rc: $(tail -3 <<<"$out")"
  unset SHARDC_TEST_NAN_AFTER
}

# The CUDA-only flags on a cpu program are usage errors, not ignored.
build mlp "$tmp/mlp-flag" --mesh 1 --strategy dp=1 && {
  for f in "--comm mpi" --no-graph; do
    train "$tmp/mlp-flag" --steps 1 $f
    [ $rc -eq 2 ] && grep -q "for programs built with --target cuda" <<<"$out" && ok ||
      bad "$f on a cpu program: exit $rc: $out"
  done
}
finish
