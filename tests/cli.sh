#!/usr/bin/env bash
# Driver tests: subcommands, flags, exit codes and messages.
#   tests/cli.sh SHARDC
set -uo pipefail
bin="$1"
cd "$(dirname "$0")/.."
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NAME EXIT PATTERN -- command...   (PATTERN is an extended regex on stdout+stderr;
# the command gets EXPECT_TIMEOUT seconds, default 20)
expect() {
  local name="$1" want="$2" pat="$3"
  shift 4
  local out rc
  out=$(timeout "${EXPECT_TIMEOUT:-20}" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: $name: exit $rc, expected $want"
    echo "$out" | head -10
    fail=$((fail + 1))
  elif ! grep -qE -- "$pat" <<<"$out"; then
    echo "FAIL: $name: output does not match /$pat/"
    echo "$out" | head -10
    fail=$((fail + 1))
  elif grep -qE "AddressSanitizer|runtime error" <<<"$out"; then
    echo "FAIL: $name: sanitizer report"
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
}

expect version 0 '^shardc [0-9]+\.[0-9]+\.[0-9]+' -- "$bin" --version
expect help 0 'usage: shardc <command>' -- "$bin" --help
expect no-args 1 'usage: shardc' -- "$bin"
expect unknown-command 1 "unknown command 'frobnicate'" -- "$bin" frobnicate
expect check-help 0 'usage: shardc check' -- "$bin" check --help
expect compile-help 0 'dump-after' -- "$bin" compile --help
expect no-input 1 'no input file' -- "$bin" check
expect unknown-flag 1 "unknown option '--frob'" -- "$bin" check samples/gpt.shard --frob
expect two-files 1 'more than one input file' -- "$bin" check samples/gpt.shard samples/mlp.shard
expect missing-file 1 "cannot open 'nope.shard': No such file or directory" -- "$bin" check nope.shard
expect directory 1 "^shardc: error: cannot open 'samples': Is a directory$" -- "$bin" check samples
# Input limits (base/diag.c src_load): only regular files of at most 4 MiB
# are read, refused before the first byte (a FIFO would block, /dev/zero
# never ends); the same for imported C headers, before libclang sees them.
expect dev-zero 1 "^shardc: error: cannot open '/dev/zero': not a regular file \(a character device\)$" -- "$bin" check /dev/zero
mkfifo "$tmp/fifo.shard"
expect fifo 1 "cannot open '.*/fifo.shard': not a regular file \(a pipe\)$" -- "$bin" check "$tmp/fifo.shard"
head -c 4194305 /dev/zero | tr '\0' ' ' >"$tmp/big.shard"
expect too-large 1 "cannot open '.*/big.shard': too large: 4194305 bytes \(limit is 4 MiB\)$" -- "$bin" check "$tmp/big.shard"
# (the mlp sample padded with blanks to exactly the limit)
{ cat samples/mlp.shard; head -c $((4194304 - $(wc -c <samples/mlp.shard))) /dev/zero | tr '\0' ' '; } >"$tmp/limit.shard"
expect at-limit 0 '' -- "$bin" check "$tmp/limit.shard"
cp "$tmp/big.shard" "$tmp/big.h"
printf 'use mish from "big.h"\n' >"$tmp/use-big.shard"
expect header-too-large 1 "use-big.shard:1:15: error: cannot open header 'big.h': too large: 4194305 bytes \(limit is 4 MiB\)$" -- "$bin" check "$tmp/use-big.shard"
printf 'const a = 1\0junk' >"$tmp/nul.shard"
expect nul-byte 1 'contains a NUL byte' -- "$bin" check "$tmp/nul.shard"
: >"$tmp/empty.shard"
# check reports every error build would (but the C compiler's): no model,
# strategy auto, a precision the target does not generate.
expect empty-check 1 "^shardc: error: '.*/empty.shard' declares no model to check$" -- "$bin" check "$tmp/empty.shard"
expect check-auto 0 '' -- "$bin" check samples/gpt.shard --strategy auto
expect check-bf16 1 'gpt2-124m.shard:26:15: error: precision bf16 is not implemented yet by the cpu code generator' -- "$bin" check samples/gpt2-124m.shard
expect build-bf16 1 'gpt2-124m.shard:26:15: error: precision bf16 is not implemented yet by the cpu code generator' -- "$bin" build samples/gpt2-124m.shard -o "$tmp/bf16"
expect empty-compile 1 'declares no model' -- "$bin" compile "$tmp/empty.shard"
expect emit-bad 1 '--emit must be ir, program, plan or c' -- "$bin" compile samples/gpt.shard --emit=asm
expect emit-c 0 '^/\* model.c — training program for model .gpt.' -- "$bin" compile samples/gpt.shard --emit=c
expect emit-c-cuda 0 '^/\* model.cu — training program for model .gpt.' -- "$bin" compile samples/gpt.shard --emit=c --target cuda
expect plan-cuda 0 '^strategy: dp=4' -- "$bin" compile samples/gpt.shard --target cuda
expect check-cuda 0 '' -- "$bin" check samples/gpt.shard --target cuda
expect check-cuda-bf16 0 '' -- "$bin" check samples/gpt2-124m.shard --target cuda
# Adafactor with bf16 and with tp is generated for the cuda target (tests/cuda/optim2.sh trains them).
printf 'model m(x: f32[B, 8], y: i32[B]) { return cross_entropy(linear(x, 4), y) }\ntrain { model = m, batch = 4, optimizer = adafactor(lr = 0.01), precision = bf16 }\n' >"$tmp/adafactor.shard"
expect check-cuda-adafactor-bf16 0 '' -- "$bin" check "$tmp/adafactor.shard" --target cuda
expect check-cuda-adafactor-tp 0 '' -- "$bin" check tests/dist/gpt_adafactor.shard --target cuda --mesh 2 --strategy tp=2
sed -i 's/, precision = bf16//' "$tmp/adafactor.shard"
expect check-cuda-adafactor 0 '' -- "$bin" check "$tmp/adafactor.shard" --target cuda
expect check-cpu 0 '' -- "$bin" check samples/gpt.shard --target cpu
expect target-bad 1 "--target must be cpu, cuda or cuda-host, got 'tpu'" -- "$bin" check samples/gpt.shard --target tpu
# The communication check (passes/commpass.c): a broken per-rank program
# (SHARDC_DEBUG_BREAK_COMM) is a compile error naming ranks and ops.
expect commcheck-ok 0 '^comm: ' -- "$bin" compile samples/gpt.shard --strategy tp=2,dp=2 --emit=plan
expect commcheck-drop 1 'communication check failed .*communicator 1 \(ranks 2,3\): rank 2 issues all_reduce .* but rank 3 issues' -- env SHARDC_DEBUG_BREAK_COMM=drop:3:0 "$bin" compile samples/gpt.shard --strategy tp=2,dp=2 --emit=plan
expect commcheck-bytes 1 'communication check failed .*rank 2 issues all_reduce of 262144 bytes .* but rank 3 issues all_reduce of 131072 bytes' -- env SHARDC_DEBUG_BREAK_COMM=bytes:2:5 "$bin" compile samples/gpt.shard --strategy tp=2,dp=2 --emit=plan
# (event 7 of dp=4: the loss sum, after the 7 gradient buckets' all-reduces)
expect commcheck-hang 1 'communication check failed .*(deadlock|blocked|waits)' -- env SHARDC_DEBUG_BREAK_COMM=drop:0:7 "$bin" compile samples/gpt.shard --strategy dp=4 --emit=plan
expect commcheck-spec 1 'SHARDC_DEBUG_BREAK_COMM' -- env SHARDC_DEBUG_BREAK_COMM=frob:1 "$bin" compile samples/gpt.shard --strategy dp=4 --emit=plan
# Megatron-SP in a model without biases (the tiny LLaMA): the residual stream
# is sequence shards, each row-parallel output reduce-scattered before its
# add, not a sum of partial sums whole on every rank: a pipeline message is
# the rank's shard of the sequence (T 32 of 64)
# ... and the reduction of the embedding's partial sums is the embedding's,
# so the first layer's input is the sequence shard: all that full recompute
# keeps of it (stage 0's slot: 133,120 bytes, 198,656 with the whole sums)
expect plan-sp-nobias-embed 0 'stash 2 slots x 133,120 bytes' -- "$bin" compile samples/llama.shard --mesh 4 --strategy pp=2:1+3,tp=2,sp=megatron,recompute=full --emit=plan
expect plan-sp-nobias-message 0 'between blocks.1 and blocks.2 .*the message per microbatch: %[0-9]+ f32\[B=4,T=32,128\] \(65,536 bytes\)' -- "$bin" compile samples/llama.shard --mesh 4 --strategy pp=2:2+2,tp=2,sp=megatron --emit=plan
# The check models at most 2 ranks on the dp axis and on a 1D tp axis
# (passes/commpass.c: their ranks run the same events in lockstep): what it
# lets through, and the NCCL pairs and staging it picks for the cuda target,
# are the whole job's (SHARDC_COMMCHECK_FULL=1 checks the whole job).
sed 's/batch = 16,/batch = 64,/' samples/gpt.shard >"$tmp/g64.shard"
for s in dp=4,pp=2,schedule=interleaved:2 dp=2,tp=4 dp=8,zero=3 dp=4,sp=ring:2 dp=2,tp2d=2x2 \
         dp=4,tp=2,pp=1,sp=megatron dp=2,tp=2,pp=2,schedule=1f1b; do
  for t in cpu cuda; do
    a=$("$bin" compile "$tmp/g64.shard" --mesh 8 --strategy $s --target $t --emit=c 2>&1)
    b=$(SHARDC_COMMCHECK_FULL=1 "$bin" compile "$tmp/g64.shard" --mesh 8 --strategy $s --target $t --emit=c 2>&1)
    if [ "$a" = "$b" ] && grep -q "^#include" <<<"$a"; then
      pass=$((pass + 1))
    else
      echo "FAIL: commcheck-model $s $t: the model's program differs from the whole job's, or neither compiled"
      head -3 <<<"$a"
      fail=$((fail + 1))
    fi
  done
done
expect commcheck-model-pairs 0 'r0_backward_in_c1' -- "$bin" compile "$tmp/g64.shard" --mesh 8 --strategy dp=4,pp=2,schedule=interleaved:2 --target cuda --emit=c
# GPT-3 175B on 8,192 GPUs (dp=64): the whole job's events and per-pair
# queues took 16 GB and 27 s; the model's 64 ranks well under a second and a
# few hundred MB (a 2 GB address space here, where the sanitizer allows it)
sed 's/nodes = 128/nodes = 1024/; s/dp=8,/dp=64,/; s/batch = 1536/batch = 12288/' bench/models/gpt3-175b.shard >"$tmp/g3big.shard"
if [[ "$(ldd "$bin" 2>/dev/null)" == *libasan* ]]; then  # (not ldd | grep -q: under pipefail ldd's SIGPIPE fails the test)
  expect commcheck-8192 0 'strategy: dp=64,tp=8,pp=16,schedule=interleaved:2' -- "$bin" compile "$tmp/g3big.shard" --emit=plan
else
  expect commcheck-8192 0 'strategy: dp=64,tp=8,pp=16,schedule=interleaved:2' -- bash -c 'ulimit -v 2000000; exec "$@"' sh "$bin" compile "$tmp/g3big.shard" --emit=plan
fi
# ZeRO-2/3 and dp gradient buckets (passes/zero.c): collectives in the backward's IR,
# shards in the plan, and in the communication check.
expect emit-c-zero2 0 'rt_reduce_scatter_acc\(p->mesh, RT_AX_DP' -- "$bin" compile samples/gpt.shard --emit=c --strategy dp=4,zero=2
expect emit-c-dp-overlap 0 'if \(p->last_mb\)  // bucket blocks.3: overlaps|rt_bucket_allreduce\(p, [0-9]+, RT_AX_DP' -- "$bin" compile samples/gpt.shard --emit=c --strategy dp=4
expect emit-c-zero1-overlap 0 'rt_bucket_reduce_scatter\(p, [0-9]+, RT_AX_DP' -- "$bin" compile samples/gpt.shard --emit=c --strategy dp=4,zero=1
expect emit-ir-zero1 0 '\+= grad_reduce_scatter %[0-9]+ \{dim=0, over=dp\(4\), bytes=[0-9]+, bucket=blocks\.0, last microbatch, non-blocking\}' -- "$bin" compile samples/gpt.shard --emit=ir --strategy dp=4,zero=1
expect emit-ir-zero2 0 '\+= grad_reduce_scatter %[0-9]+ \{dim=0, over=dp\(4\), bytes=[0-9]+, bucket=blocks\.3\}' -- "$bin" compile samples/gpt.shard --emit=ir --strategy dp=4,zero=2
expect emit-ir-zero3 0 '= all_gather %[0-9]+ \{dim=0, over=dp\(4\), bytes=[0-9]+, bucket=embed\}' -- "$bin" compile samples/gpt.shard --emit=ir --strategy dp=4,zero=3
expect plan-zero3 0 '^memory: .* params 814.75 KiB, grads 814.75 KiB, optimizer 1.59 MiB' -- "$bin" compile samples/gpt.shard --emit=plan --strategy dp=4,zero=3
expect commcheck-zero3 1 'communication check failed .*all_gather' -- env SHARDC_DEBUG_BREAK_COMM=drop:3:0 "$bin" compile samples/gpt.shard --strategy dp=4,zero=3 --emit=plan
expect commcheck-pp-hang 1 'communication check failed for strategy on 2 ranks: deadlock: 2 ranks can never finish: rank 0 waits at event 0 in recv of 131072 bytes with tag 1 from rank 1 \(gradient of microbatch 1 from stage 1: instruction bwd.0\)' -- env SHARDC_DEBUG_BREAK_COMM=swap:0:1,swap:0:0 "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2,schedule=1f1b
expect commcheck-pp-order 1 'send/recv mismatch in the 1st message from rank 1 to rank 0: rank 1 sends 131072 bytes with tag 5 \(gradient of microbatch 2 to stage 0: instruction bwd.31\) but rank 0 receives 131072 bytes with tag 1 \(gradient of microbatch 1 from stage 1: instruction bwd.0\)' -- env SHARDC_DEBUG_BREAK_COMM=drop:1:1 "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2,schedule=1f1b
expect commcheck-pp-bytes 1 'rank 0 sends 262144 bytes with tag 0 \(activation of microbatch 1 to stage 1: instruction fwd.30\) but rank 1 receives 131072 bytes' -- env SHARDC_DEBUG_BREAK_COMM=bytes:0:0 "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2
# The cuda target posts a pipeline's messages as NCCL groups (a send waits
# for its receive there): every block posts its receives with the previous
# action's sends; the check proves 1F1B's groups cannot hang, and finds that
# an interleaved schedule's over 4 microbatches could, which then posts a
# forward's receives with those of the backward after it (Megatron's pairs).
expect emit-c-pp-post 0 'rt_pipe_post\(p\);  // the queued messages posted' -- "$bin" compile samples/gpt.shard --emit=c --mesh 2 --strategy pp=2
expect emit-program-pp-nccl 0 'post the queued messages \(the sends before, the receives above; cuda: one NCCL group\)' -- "$bin" compile samples/gpt.shard --emit=program --mesh 2 --strategy pp=2,schedule=1f1b
expect plan-pp-nccl 0 'messages on cuda: NCCL groups on the compute stream, a stage.s sends with its next receives \(proven' -- "$bin" compile samples/gpt.shard --emit=plan --mesh 2 --strategy pp=2,schedule=1f1b
expect plan-il-pairs 0 'messages on cuda: NCCL groups .*Megatron.s pairs; proven not to hang' -- "$bin" compile samples/gpt.shard --emit=plan --mesh 2 --strategy pp=2,schedule=interleaved:2
expect emit-cuda-il-pairs 0 'static void r0_backward_in_c1\(RtPass \*p\)' -- "$bin" compile samples/gpt.shard --target cuda --emit=c --mesh 2 --strategy pp=2,schedule=interleaved:2
# Ring attention (sp=ring:N): the ring's messages are in the plan's volume and
# in the communication check (a receive whose tag the send does not carry);
# models without a sequence, and dropout, are refused.
expect emit-c-ring 0 'rt_ring_attention_forward_f32\(p->mesh->comm\[RT_AX_SP\]' -- "$bin" compile samples/gpt.shard --emit=c --strategy sp=ring:2,dp=2
expect plan-ring 0 '^comm: .*\(sp 4,194,304, data 5,005,824\)' -- "$bin" compile samples/gpt.shard --emit=plan --strategy sp=ring:2,dp=2
expect commcheck-ring 1 'communication check failed .*rank 0 sends 65536 bytes with tag 1 \(node 20 ring attention send of K .* but rank 1 receives 65536 bytes with tag 0' -- env SHARDC_DEBUG_BREAK_COMM=tag:0:0 "$bin" compile samples/gpt.shard --mesh 2 --strategy sp=ring:2 --emit=plan
expect ring-no-sequence 1 'ring attention \(sp=ring:2\): input x has no sequence dim to split' -- "$bin" compile samples/mlp.shard --mesh 2 --strategy sp=ring:2 --emit=c
# ... inside pipeline stages: the step sums the gradients over dp x sp and
# averages the last stage's loss over them; the ring's messages are in the
# check of the pipeline's programs.
expect ring-pp-step 0 'step.1 +all_reduce over data: .*\(gradient all-reduce over dp x sp\)' -- "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=2,sp=ring:2,schedule=interleaved:2 --emit=program
expect ring-pp-loss 0 "loss: the last stage's \(tp rank 0\) summed over world / 4" -- "$bin" compile samples/gpt.shard --mesh 8 --strategy pp=2,sp=ring:2,dp=2 --emit=program
expect commcheck-ring-pp 1 'communication check failed for strategy on 4 ranks: .*ring attention send of K of step 1 over sp \(blocks.0.attn\), forward of microbatch 1' -- env SHARDC_DEBUG_BREAK_COMM=tag:0:0 "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=2,sp=ring:2 --emit=plan
sed 's/causal = true)/causal = true, dropout = 0.1)/' samples/gpt.shard >"$tmp/dropout.shard"
expect ring-dropout 1 'ring attention \(sp=ring:2\): dropout is not implemented yet with ring attention' -- "$bin" compile "$tmp/dropout.shard" --mesh 2 --strategy sp=ring:2 --emit=c
# 2D tensor parallelism (tp2d=QxQ): SUMMA and split-norm calls, the grid's
# axes in the plan's volume and in the communication check; in pipeline
# stages and with ZeRO (grid-partial gradients in buckets of their own);
# refused with sp and dropout.
expect emit-c-tp2d 0 'rt_summa_forward_f32\(p->mesh->comm\[RT_AX_TPR\], p->mesh->comm\[RT_AX_TPC\]' -- "$bin" compile samples/gpt.shard --emit=c --strategy tp2d=2x2
expect emit-c-tp2d-norm 0 'rt_rmsnorm_split_backward_f32\(p->mesh->comm\[RT_AX_TPR\]' -- "$bin" compile samples/llama.shard --mesh 4 --emit=c --strategy tp2d=2x2
expect plan-tp2d 0 '^comm: .*\(dp 849,408, tp-row 5,971,976, tp-col 5,021,184\)' -- "$bin" compile samples/gpt.shard --mesh 8 --emit=plan --strategy tp2d=2x2,dp=2
expect commcheck-tp2d 1 'communication check failed .*communicator 15 \(ranks 2,3\): rank 2 issues broadcast of 32768 bytes \(node 11 summa 2x2 \(blocks.0.attn\), forward of microbatch 1: instruction fwd.5\) but rank 3 issues broadcast of 16384 bytes' -- env SHARDC_DEBUG_BREAK_COMM=bytes:2:2 "$bin" compile samples/gpt.shard --strategy tp2d=2x2 --emit=plan
expect tp2d-tied-bias 0 'param @linear.bias : f32\[128\] init=zeros split\(0 over tp-col\)' -- "$bin" compile tests/dist/tiedbias.shard --mesh 4 --strategy tp2d=2x2 --emit=ir
expect tp2d-pp 0 '^stage 1:  blocks.2 .. blocks.3, model ops' -- "$bin" compile samples/gpt.shard --mesh 8 --strategy tp2d=2x2,pp=2
# tp2d with ring attention: the grid splits the rows (the batch) and the
# channels, the ring the sequence (tests/dist/equiv.sh trains it)
expect tp2d-ring 0 'comm: +[0-9,]+ bytes sent per rank per step \(tp-row [0-9,]+, tp-col [0-9,]+, sp [0-9,]+' -- "$bin" compile samples/gpt.shard --mesh 8 --strategy tp2d=2x2,sp=ring:2
expect tp2d-dropout 1 '2D tensor parallelism \(tp2d=2x2\): dropout is not implemented yet' -- "$bin" compile "$tmp/dropout.shard" --mesh 4 --strategy tp2d=2x2 --emit=c
sed 's/batch = 16, seq = ctx, microbatch = 4/batch = 12, seq = ctx, microbatch = 3/' samples/gpt.shard >"$tmp/mb3.shard"
expect tp2d-microbatch 1 '2D tensor parallelism \(tp2d=2x2\): a microbatch of 3 rows cannot be split over the 2 grid rows' -- "$bin" compile "$tmp/mb3.shard" --mesh 4 --strategy tp2d=2x2 --emit=c
expect tp2d-kv-heads 1 'attention: key/value heads 2 cannot be split over tp2d=4' -- "$bin" compile samples/llama.shard --mesh 16 --strategy tp2d=4x4 --emit=c
expect emit-c-fp64-zero 1 'fp64 builds are for single-rank gradient checks; build with --mesh 1 --strategy dp=1' -- "$bin" compile samples/gpt.shard --emit=c --strategy dp=4,zero=2 --precision=fp64
expect tp2d-zero 0 '\{RT_STEP_ALLREDUCE, RT_AX_TPC, 0, [0-9]+, [0-9]+, 0.0\},  // gradient shard of bucket' -- "$bin" compile samples/gpt.shard --mesh 8 --emit=c --strategy tp2d=2x2,dp=2,zero=2
expect emit-c-fp64-tp 1 'fp64 builds are for single-rank gradient checks; build with --mesh 1 --strategy dp=1' -- "$bin" compile samples/gpt.shard --emit=c --strategy tp=4 --precision=fp64
expect emit-c-interleaved 0 'static void r1_backward_c1\(RtPass \*p\)' -- "$bin" compile samples/gpt.shard --emit=c --strategy pp=2,dp=2,schedule=interleaved:2
expect plan-interleaved 0 '^rank 0:   memory 22,659,072 bytes per rank .*persistent 7,000,064 \+ transient 1,179,648 \(the largest chunk.s\) \+ stash slots 14,479,360' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2,schedule=interleaved:2
expect commcheck-interleaved 1 'deadlock: 2 ranks can never finish: rank 0 waits at event 0 in recv of 131072 bytes with tag 2 from rank 1 \(activation of microbatch 1 from stage 1: instruction c1.fwd.1\)' -- env SHARDC_DEBUG_BREAK_COMM=swap:0:1,swap:0:0 "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2,schedule=interleaved:2
# interleaved chunks of given sizes: pp x V of them, in the schedule's
# order (rank 0's first chunk, rank 1's first, rank 0's second, ...)
expect interleaved-sizes 0 '^stage 1:  blocks.0 from layernorm .. blocks.1; 38.9% of the FLOPs; .*\(pipeline rank 1, chunk 0\)' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:0.5+1.5+1+1,schedule=interleaved:2
expect interleaved-sizes-count 1 "pp=2 with schedule=interleaved:2 has 4 chunks, but 2 stage sizes are given: give one for each chunk, in the schedule's order" -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:2+2,schedule=interleaved:2
expect interleaved-sizes-no-schedule 1 'pp=2 gives 4 stage sizes for 2 stages \(2 x 2 sizes are for schedule=interleaved:2, one a chunk\)' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:1+1+1+1
expect interleaved-too-deep 1 'pp=4 needs 64 pipeline stages but model gpt has only 61 places to cut it .*use fewer interleaved chunks or a smaller pp' -- "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=4,schedule=interleaved:16
# ZeRO with interleaved chunks: each chunk reduce-scatters its own buckets
# (ZeRO-1: in the last microbatch, requests numbered across the chunks)
expect interleaved-zero 0 'c1\.bwd\.[0-9]+ +bucket blocks\.2: .* \+= grad_reduce_scatter .*\(request 3\)' -- "$bin" compile samples/gpt.shard --mesh 4 --emit=program --strategy pp=2,dp=2,schedule=interleaved:2,zero=1
# ... and the deadlock check covers the chunks' ZeRO-3 gathers (one dropped)
expect commcheck-interleaved-zero 1 'rank 0 issues all_gather of 16384 bytes .*instruction c0\.fwd\.[0-9]+\) but rank 1 issues all_gather of 65536 bytes' -- env SHARDC_DEBUG_BREAK_COMM=drop:0:0 "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=2,dp=2,zero=3,schedule=interleaved:2
# (every op boundary that at most 4 activations cross is a place to cut)
expect pp-too-deep 1 'pp=64 needs 64 pipeline stages but model gpt has only 61 places to cut it \(between layers or inside one, where at most 4 activations cross\); use pp=62 or less' -- "$bin" compile samples/gpt.shard --mesh 64 --strategy pp=64
# 4 layers on 8 stages: blocks.0 .. blocks.2 cut between their attention and
# their MLP; blocks.3 after its fc matmul (the residual and the matmul's
# output cross), which leaves the last stage, with the head, 11.3% of the
# FLOPs instead of 18.6% (a cut at blocks.3's residual add)
expect pp-half-layers 0 '^stage 5:  blocks.2 from layernorm; 14.9% of the FLOPs' -- "$bin" compile samples/gpt.shard --mesh 8 --strategy pp=8
expect pp-half-layers-multi 0 '^stage 7:  blocks.3 from add, model ops; 11.3% of the FLOPs' -- "$bin" compile samples/gpt.shard --mesh 8 --strategy pp=8
expect plan-pp 0 '^stage 3:  blocks.3, model ops; 27.8% of the FLOPs' -- "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=4,schedule=1f1b
expect plan-pp-layers 0 '^stage 0:  model ops, blocks.0 .. blocks.2; 72.2% of the FLOPs' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:3+1
# The cost line's model FLOPs (matmuls and attention) are the model's under
# every split: SUMMA's matmuls run once per grid step, ring attention once
# per K/V block (both were counted once: tp2d 3.02e9, sp=ring:4 5.13e9)
mf=""
for st in dp=4 tp2d=2x2 sp=ring:4 dp=2,sp=ring:2 tp=2,sp=megatron,dp=2; do
  mf+="$("$bin" compile samples/gpt.shard --mesh 4 --strategy "$st" 2>&1 | grep -oE '[0-9.e+]+ model FLOPs/step') "
done
if [ "$(tr ' ' '\n' <<<"$mf" | grep -c '5.44e+09')" = 5 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: cost-model-flops: $mf"; fi
expect pp-layers-sum 1 'pp=2: the stage sizes add up to 5 layers, but model gpt has 4' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:2+3
expect pp-layers-count 1 'pp=2:4 gives 1 stage size for 2 stages \(sizes are joined by .\+., not .,.: e\.g\. pp=2:3\+1; under schedule=interleaved:V, one size for each of the 2 x V chunks\)' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:4
expect pp-layers-bad 1 'the layers per stage must be positive numbers joined by' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:0+4
sed 's/causal = true)/causal = true, dropout = 0.1)/' samples/gpt.shard >"$tmp/pp-dropout.shard"
expect pp-dropout 0 '\(1ull << 56 \| [0-9]+ull << 40\) \+ \(uint64_t\)p->row0' -- "$bin" compile "$tmp/pp-dropout.shard" --mesh 2 --strategy pp=2 --emit=c
expect interleaved-dropout 0 '\(3ull << 56 \| [0-9]+ull << 40\) \+ \(uint64_t\)p->row0' -- "$bin" compile "$tmp/pp-dropout.shard" --mesh 2 --strategy pp=2,schedule=interleaved:2 --emit=c
expect ir-pp-send 0 '^  send d%2 \{to stage 0, bytes=131072\}' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2 --emit=ir
expect ir-pp-recv 0 '^  %2 = recv \{from stage 0, bytes=131072\} : f32\[B=4,T=64,128\]' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2 --emit=ir
expect plan-pp-stash 0 'stash 4 slots x 2,369,536 bytes' -- "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=4,schedule=gpipe
sed 's/optimizer = adamw(.*)$/optimizer = shampoo(lr = 1e-3, block = 64)/' samples/gpt.shard >"$tmp/shampoo.shard"
expect shampoo-plan 0 '^optim:    shampoo lr=0.001 betas=\(0.9, 0.999\) epsilon=1e-06 weight_decay=0 block=64 precondition_every=10 start_preconditioning=20 graft=adam root=eigh' -- "$bin" compile "$tmp/shampoo.shard" --mesh 1 --strategy dp=1 --emit=plan
expect shampoo-emit 0 '\.opt = RT_OPT_SHAMPOO, .*' -- "$bin" compile "$tmp/shampoo.shard" --mesh 1 --strategy dp=1 --emit=c
expect shampoo-tp 1 "shampoo block 64 would straddle the shards of parameter 'blocks.0.attn.qkv.weight': tp cuts its dim 0 \(384\) into pieces of 32; .*\(e.g. block = 32\)" -- "$bin" compile "$tmp/shampoo.shard" --strategy tp=4 --emit=c
expect shampoo-tp-plan 0 '^shampoo:  tp=2: each tp rank runs the blocks of its own shards, no communication: 100 of the split parameters. 200 blocks per tp rank, and all 2 blocks of the replicated ones' -- "$bin" compile "$tmp/shampoo.shard" --mesh 2 --strategy tp=2 --emit=plan
expect shampoo-dp 0 'RT_STEP_OPT_GATHER, RT_AX_DP, 0, [0-9]+, [0-9]+, 0.0},  // Shampoo directions all-gathered over dp' -- "$bin" compile "$tmp/shampoo.shard" --strategy dp=4 --emit=c
expect shampoo-lpt 0 '^            data rank 3: [0-9]+ units, roots' -- "$bin" compile "$tmp/shampoo.shard" --strategy dp=4 --emit=plan
expect shampoo-pp-lpt 0 '^shampoo:  stage 1: [0-9]+ units .* over 2 data ranks' -- "$bin" compile "$tmp/shampoo.shard" --strategy pp=2,dp=2 --emit=plan
# --emit=plan's step tail by part: Shampoo's roots within the optimizer's
# time, a pipeline rank's root worker's share in idle time beside it
expect shampoo-step-tail 0 '^    step tail: gradient reductions [0-9.]+ [mu]?s, loss and norm sums [0-9.]+ [mu]?s, optimizer [0-9.]+ [mu]?s \(Shampoo.s roots [0-9.]+ [mu]?s of it\), gathers [0-9.]+ [mu]?s, directions applied [0-9.]+ [mu]?s$' -- "$bin" compile "$tmp/shampoo.shard" --strategy dp=4 --emit=plan
expect shampoo-step-tail-worker 0 '^    step tail: .*optimizer [0-9.]+ [mu]?s \(Shampoo.s roots [0-9.]+ [mu]?s of it, and [1-9][0-9.]* [mu]?s by the root worker in idle time\)$' -- "$bin" compile "$tmp/shampoo.shard" --mesh 2 --strategy pp=2 --emit=plan
expect adamw-step-tail 0 '^    step tail: gradient reductions [0-9.]+ [mu]?s, loss and norm sums [0-9.]+ [mu]?s, optimizer [0-9.]+ [mu]?s$' -- "$bin" compile samples/gpt.shard --strategy dp=4 --emit=plan
expect shampoo-gather 0 'step.[0-9]+ +all_gather over dp: [0-9]+ elements per rank at F\([0-9]+\)  \(Shampoo directions all-gathered over dp\)' -- "$bin" compile "$tmp/shampoo.shard" --strategy dp=4 --emit=program
# every documented option is accepted (clip, the last of shampoo's, was not);
# epsilon is bounded below (its -1/4 power is stored in fp32); lr defaults
for opt in "shampoo(lr = 1e-3, block = 64, clip = 0.5)" "adafactor(lr = 1e-3, clip = 0.5)" \
           "adamw(lr = 1e-3, clip = 0.5)" "sgd(lr = 1e-3, clip = 0.5)"; do
  sed "s/optimizer = adamw(.*)\$/optimizer = $opt/" samples/gpt.shard >"$tmp/opt_clip.shard"
  expect "optimizer-clip ${opt%%(*}" 0 '^optim: .* clip=0\.5' -- "$bin" compile "$tmp/opt_clip.shard" --mesh 1 --strategy dp=1 --emit=plan
done
sed 's/optimizer = adamw(.*)$/optimizer = shampoo(lr = 1e-3, epsilon = 1e-300)/' samples/gpt.shard >"$tmp/shampoo_eps.shard"
expect shampoo-epsilon-floor 1 'shampoo_eps.shard:[0-9]+:[0-9]+: error: shampoo: epsilon must be at least 1e-30 .*got 1e-300' -- "$bin" check "$tmp/shampoo_eps.shard"
sed 's/optimizer = adamw(.*)$/optimizer = shampoo()/' samples/gpt.shard >"$tmp/shampoo_nolr.shard"
expect shampoo-default-lr 0 '^optim:    shampoo lr=0.0003 ' -- "$bin" compile "$tmp/shampoo_nolr.shard" --mesh 1 --strategy dp=1 --emit=plan
# stagger = true (the default): every rank's root phases balanced within 1.5 x
# the mean on a model of many blocks (the GEMM-bound GPT, 256 x 256 blocks),
# under data parallelism, pipelines and a mix; stagger = false: no phases
sed 's/optimizer = adamw(.*)$/optimizer = shampoo(lr = 3e-4, block = 256, precondition_every = 10)/' \
  bench/gpt_bench.shard >"$tmp/shampoo_big.shard"
for st in dp=1 dp=4 pp=4,schedule=1f1b,mb=4 pp=2,dp=2; do
  out=$("$bin" compile "$tmp/shampoo_big.shard" --mesh $([ $st = dp=1 ] && echo 1 || echo 4) --strategy $st --emit=plan 2>&1)
  worst=$(grep -o 'most loaded phase [0-9.]* of the mean' <<<"$out" | awk '{ print $4 }' | sort -g | tail -1)
  lines=$(grep -c 'most loaded phase' <<<"$out")
  want=$(case $st in dp=1) echo 1 ;; *) echo 4 ;; esac)
  if [ "$lines" = "$want" ] && awk -v w="$worst" 'BEGIN { exit !(w > 0 && w <= 1.5) }'; then
    pass=$((pass + 1))
  else
    echo "FAIL: shampoo-stagger-balance $st: $lines phase lines (expected $want), most loaded phase $worst of the mean"
    fail=$((fail + 1))
  fi
done
expect shampoo-stagger-emit 0 'static const int root_phase\[[0-9]+\] = \{' -- "$bin" compile "$tmp/shampoo_big.shard" --mesh 1 --strategy dp=1 --emit=c
sed 's/precondition_every = 10)/precondition_every = 10, stagger = false)/' "$tmp/shampoo_big.shard" >"$tmp/shampoo_flat.shard"
if grep -q 'stagger=false' <<<"$("$bin" compile "$tmp/shampoo_flat.shard" --mesh 1 --strategy dp=1 --emit=plan 2>&1)" &&
   ! grep -q 'root_phase' <<<"$("$bin" compile "$tmp/shampoo_flat.shard" --mesh 1 --strategy dp=1 --emit=c 2>&1)"; then
  pass=$((pass + 1))
else
  echo "FAIL: shampoo-stagger-off: stagger = false still emits root phases"
  fail=$((fail + 1))
fi
# many blocks: blocks of 1 on the tiny GPT (about 200,000 of them) compile in
# under 2 s and a step takes under a second (a block's lookups were linear in
# the blocks: over 2 minutes each); precondition_every far beyond the blocks
# needs no table of its phases (2^30 of them took 8 GB, then ran out)
sed 's/optimizer = adamw(.*)$/optimizer = shampoo(lr = 1e-3, block = 1, start_preconditioning = 1, precondition_every = 2)/' \
  samples/gpt.shard >"$tmp/shampoo_fine.shard"
EXPECT_TIMEOUT=20 expect shampoo-fine-blocks 0 'data rank 3: blocks [0-9]+ [0-9]+; root GFLOP' -- "$bin" compile "$tmp/shampoo_fine.shard" --strategy dp=4 --emit=plan
EXPECT_TIMEOUT=120 expect shampoo-fine-blocks-build 0 '^built ' -- "$bin" build "$tmp/shampoo_fine.shard" --mesh 1 --strategy dp=1 -o "$tmp/fine"
EXPECT_TIMEOUT=45 expect shampoo-fine-blocks-train 0 '^step 3/3 \| loss' -- "$tmp/fine/train" --steps 3
sed 's/optimizer = adamw(.*)$/optimizer = shampoo(lr = 1e-3, block = 32, precondition_every = 1073741824)/' \
  samples/gpt.shard >"$tmp/shampoo_every.shard"
EXPECT_TIMEOUT=20 expect shampoo-every-huge 0 'j·1073741824 .*; phases [0-9]+\.\.1073741823 hold no block; over phases 0\.\.[0-9]+:$' -- "$bin" compile "$tmp/shampoo_every.shard" --strategy dp=4 --emit=plan
# root = eigh on the cuda target: the roots run on each rank's host CPU,
# which for GPT-2 on H100s costs most of the step: a warning at the root
# option (the default) and a line in the plan, each with root = newton's step
sed -e '/min_lr = 6e-5)/d' -e 's/optimizer = adamw(.*$/optimizer = shampoo(lr = 6e-4, block = 1024)/' \
  samples/gpt2-124m.shard >"$tmp/gpt2_shampoo.shard"
expect shampoo-eigh-gpu-warning 0 'gpt2_shampoo.shard:24:15: warning: shampoo root = eigh on the cuda target runs each root inverse on the host CPU \(LAPACK, fp64\): predicted [0-9.]+ ms of each [0-9.]+ m?s step beyond what host threads hide beside the GPU.s forward and backward; root = newton runs them on the GPU \(fp64 GEMMs\): predicted step [0-9.]+ ms$' -- "$bin" check "$tmp/gpt2_shampoo.shard" --target cuda
expect shampoo-eigh-gpu-plan 0 "^          roots: Shampoo's root = eigh runs each root on the host CPU \(LAPACK, fp64\), [0-9.]+ ms of the step beyond what host threads hide beside the GPU's forward and backward; root = newton runs them on the GPU \(fp64 GEMMs\): predicted step [0-9.]+ ms$" -- "$bin" compile "$tmp/gpt2_shampoo.shard" --target cuda --emit=plan
sed 's/block = 1024)/block = 1024, root = newton)/' "$tmp/gpt2_shampoo.shard" >"$tmp/gpt2_newton.shard"
for f in gpt2_newton:cuda gpt2_shampoo:cpu; do
  out=$("$bin" compile "$tmp/${f%:*}.shard" --target "${f#*:}" --emit=plan 2>&1)
  if [ $? = 0 ] && ! grep -q "warning" <<<"$out" &&
     { [ "${f#*:}" = cpu ] || ! grep -q "roots: Shampoo's root = eigh" <<<"$out"; }; then pass=$((pass + 1)); else
    echo "FAIL: shampoo-eigh-gpu-none ${f}: a warning (or with newton the roots line)"; echo "$out" | head -5; fail=$((fail + 1)); fi
done
expect shampoo-zero-tp2d 0 "^shampoo:  zero=1: each tensor lies whole in one data rank's chunk" -- "$bin" compile "$tmp/shampoo.shard" --mesh 8 --strategy dp=2,tp2d=2x2,zero=1 --emit=plan
sed 's/optimizer = adamw(.*)$/optimizer = adafactor(lr = 1e-3)/' samples/gpt.shard >"$tmp/adafactor-gpt.shard"
expect adafactor-zero-tp 0 'all_reduce over tp: [0-9]+ elements at F\([0-9]+\)  \(Adafactor.s row and column sums of split tensors over tp\)' -- "$bin" compile "$tmp/adafactor-gpt.shard" --mesh 4 --strategy dp=2,tp=2,zero=2 --emit=program
expect adafactor-tp-interleaved 0 'all_reduce over tp: [0-9]+ elements at F\([0-9]+\)  \(Adafactor.s sums of squares of split tensors over tp\)' -- "$bin" compile "$tmp/adafactor-gpt.shard" --mesh 4 --strategy pp=2,tp=2,schedule=interleaved:2 --emit=program
# Deep models: compile time about linear in the layers (the stage cuts'
# search, ZeRO's bucket scans and the rank's parameter tables were
# quadratic: 2048 layers took 24-32 s to compile, now under 1.5 s)
sed -e 's/layers = 4/layers = 2048/' -e 's/d = 128, heads = 4/d = 64, heads = 2/' \
  -e 's/microbatch = 4, //' samples/gpt.shard >"$tmp/deep.shard"
EXPECT_TIMEOUT=20 expect deep-interleaved 0 '^stage 7:  blocks\.1792 \.\. blocks\.2047, model ops; 12\.5% of the FLOPs' -- "$bin" compile "$tmp/deep.shard" --strategy pp=4,schedule=interleaved:2,mb=8 --emit=plan
EXPECT_TIMEOUT=20 expect deep-1f1b 0 '^stage 3:  blocks\.1536 \.\. blocks\.2047, model ops' -- "$bin" compile "$tmp/deep.shard" --strategy pp=4,mb=8 --emit=plan
EXPECT_TIMEOUT=20 expect deep-zero3 0 '^    all_gather +4101 x' -- "$bin" compile "$tmp/deep.shard" --strategy dp=4,zero=3 --emit=plan
# ... and 64 stages of 4000 layers (a stage's end cut is searched only
# where a partition no costlier than a greedy one's can put it: 64 s, now 4)
sed -e 's/layers = 2048/layers = 4000/' -e 's/batch = 16/batch = 256/' "$tmp/deep.shard" >"$tmp/deep4000.shard"
EXPECT_TIMEOUT=40 expect deep-pp64 0 '^stage 63:  blocks\.3937 from add \.\. blocks\.3999, model ops; 1\.6% of the FLOPs' -- "$bin" compile "$tmp/deep4000.shard" --mesh 64 --strategy pp=64,mb=256 --emit=plan
# ... and its program is written as functions of a few thousand lines (a
# C compiler's optimiser is superlinear in a function's length): the
# forward and backward of 512 layers in parts, each under 10,000 lines (the
# old compiler wrote one backward of 33,000)
sed 's/layers = 2048/layers = 512/' "$tmp/deep.shard" >"$tmp/deep512.shard"
longest_function='set -o pipefail; "$0" compile "$1" --target "$2" --strategy dp=4 --emit=c | awk '"'"'
  /^(static|__attribute__).*\(RtPass \*p\) \{$/ { n = 0; inf = 1; next }
  inf && /^}/ { inf = 0; if (n > max) max = n; next }
  inf { n++ }
  /^  (forward|backward)_p[0-9]+\(p\);$/ { parts++ }
  END { printf "longest function: %d lines; %d parts\n", max, parts }'"'"
EXPECT_TIMEOUT=20 expect deep-c-parts 0 '^longest function: [0-9]{3,4} lines; [0-9]{2,} parts$' -- bash -c "$longest_function" "$bin" "$tmp/deep512.shard" cpu
EXPECT_TIMEOUT=20 expect deep-cuda-parts 0 '^longest function: [0-9]{3,4} lines; [0-9]{2,} parts$' -- bash -c "$longest_function" "$bin" "$tmp/deep512.shard" cuda
# ... and `shardc build` says it is compiling a file that large before the
# C compiler's long run (here a stand-in compiler: SHARDC_CC=true)
EXPECT_TIMEOUT=20 expect deep-build-progress 0 '^compiling .*/deepbuild/model\.c \([0-9.]+ MB of generated code\)\.\.\.$' -- env SHARDC_CC=true "$bin" build "$tmp/deep512.shard" --strategy dp=4 -o "$tmp/deepbuild"
expect small-build-quiet 0 '^built$' -- bash -c '! SHARDC_CC=true "$0" build samples/gpt.shard -o "$1" | grep compiling && echo built' "$bin" "$tmp/smallbuild"
# ... and the cuda program's fused elementwise chains, alike in every
# layer but for their buffers, are a few kernels (functors whose fields are
# the buffers), not one per call: nvcc's time was most of a deep model's build
ew_kernels='set -o pipefail; "$0" compile "$1" --target cuda --strategy dp=4 --emit=c | awk '"'"'
  /^struct shardc_ew[0-9]+ \{$/ { k++ }
  /^  rtc_foreach(32)?\([0-9]+, shardc_ew[0-9]+\{/ { n++ }
  END { printf "%d elementwise calls, %d kernels\n", n, k }'"'"
EXPECT_TIMEOUT=20 expect deep-cuda-kernels 0 '^2050 elementwise calls, [1-9] kernels$' -- bash -c "$ew_kernels" "$bin" "$tmp/deep512.shard"
expect emit-c-bf16 1 'precision bf16 is not implemented yet' -- "$bin" compile samples/gpt2-124m.shard --emit=c
expect target-bad 1 '--target must be cpu, cuda or cuda-host' -- "$bin" compile samples/gpt.shard --target=tpu
expect dump-bad 1 "unknown pass 'nope' for --dump-after \(passes: lower, shape, shard, pipeline, autodiff, recompute, precision, zero, memplan, program, commcheck\)" -- "$bin" compile samples/gpt.shard --dump-after=nope
expect dump-lower 0 '^graph gpt \{' -- "$bin" compile samples/gpt.shard --dump-after=lower
expect list-passes 0 '^shape ' -- "$bin" compile --list-passes
expect mesh-missing-value 1 '--mesh needs a value' -- "$bin" check samples/gpt.shard --mesh
expect build-help 0 'usage: shardc build' -- "$bin" build --help
# nvcc named but absent (or a shardc built without the GPU libraries, as the
# sanitizer build is): said before any compiling
expect build-cuda-nvcc 1 "the compiler '/nonexistent/nvcc' is not on PATH|--target cuda needs nvcc, which this build of shardc did not find" -- env SHARDC_NVCC=/nonexistent/nvcc "$bin" build samples/gpt.shard --target cuda -o "$tmp/cuda"
# paths are text, not code: a model in a directory whose name has a '"', its
# training text under a '\' (DSL strings have no escapes), both reach the
# program intact; nvcc, which hands its command line to a shell, is refused
# a '$' in the output path instead of building elsewhere
mkdir -p "$tmp/q\"d/d\\q"
cp samples/data/tales.txt "$tmp/q\"d/d\\q/t.txt"
sed 's|  precision = fp32|  precision = fp32\n  data = "d\\q/t.txt"|' samples/gpt.shard >"$tmp/q\"d/m.shard"
if out=$("$bin" build "$tmp/q\"d/m.shard" --mesh 1 --strategy dp=1 -o "$tmp/q\"d/out" 2>&1) &&
   out=$("$tmp/q\"d/out/train" --steps 1 2>&1) && grep -q "^step 1/1 | loss" <<<"$out"; then
  pass=$((pass + 1))
else
  echo "FAIL: build-quoted-paths: $(tail -3 <<<"$out")"
  fail=$((fail + 1))
fi
expect build-cuda-shell-path 1 "nvcc cannot take the path '.*out\\\$x/train': it hands its command line to a shell|--target cuda needs nvcc" -- "$bin" build samples/gpt.shard --target cuda -o "$tmp/out\$x"
# the GPU architecture: from the mesh's device (a V100 cannot run the kernels:
# refused), SHARDC_CUDA_ARCH checked before nvcc sees it
expect build-cuda-v100 1 "mesh device V100_SXM \(compute capability 7.0\): the cuda target needs 8.0 or newer|--target cuda needs nvcc" -- "$bin" build samples/mlp.shard --mesh 1:V100_SXM --strategy dp=1 --target cuda -o "$tmp/v100"
expect build-cuda-arch-bad 1 "SHARDC_CUDA_ARCH='sm_90 -G' is not a GPU architecture: give sm_XY\[a\]|--target cuda needs nvcc" -- env SHARDC_CUDA_ARCH="sm_90 -G" "$bin" build samples/mlp.shard --mesh 1 --strategy dp=1 --target cuda -o "$tmp/arch"
expect build-cuda-arch-old 1 "SHARDC_CUDA_ARCH='sm_75': the cuda target needs compute capability 8.0 or newer|--target cuda needs nvcc" -- env SHARDC_CUDA_ARCH=sm_75 "$bin" build samples/mlp.shard --mesh 1 --strategy dp=1 --target cuda -o "$tmp/arch"
expect explore-table 0 'plans evaluated in .* s; best' -- "$bin" explore samples/gpt.shard
# the time said is the whole search's, its compiles included (it had said
# the first pass's alone: 0.001 s of 0.024)
t0=$(date +%s%N); out=$("$bin" explore samples/gpt.shard 2>&1); t1=$(date +%s%N)
said=$(sed -n 's/^[0-9]* plans evaluated in \([0-9.]*\) s; best [0-9]* (\([0-9]*\) compiled.*/\1 \2/p' <<<"$out")
if [ -n "$said" ] && [ "${said#* }" -gt 0 ] &&
   awk -v s="${said% *}" -v w="$(( (t1 - t0) / 1000 ))" 'BEGIN { exit !(s * 1e6 >= 0.3 * w) }'; then
  pass=$((pass + 1))
else
  echo "FAIL: explore-time: says ${said% *} s for a search of $(( (t1 - t0) / 1000 )) us with ${said#* } plans compiled"
  fail=$((fail + 1))
fi
expect explore-json 0 '^\[\{"strategy": "dp=[0-9]+.*"step_time_s": .*"mem_by_stage": \[.*"feasible": true' -- "$bin" explore samples/gpt.shard --json --top 3
expect explore-partial 0 '^1 +dp=2,tp=2' -- "$bin" explore samples/gpt.shard --strategy tp=2
# The plans explore compiles to refine its ranking are a count (about
# nodes x ranks of work), not a clock: a loaded machine gets the same answer
# (a one-second budget once compiled one or two of GPT-3 175B's plans by
# the load, and ranked interleaved:2 or :4 first)
source bench/published_models.sh  # gpt: Korthikanti et al.'s GPT-3 175B on 64 A100s
gpt "$tmp/gpt175b.shard" 96 12288 96 64 64 1 A100_SXM
out=$(timeout 60 "$bin" explore "$tmp/gpt175b.shard" --strategy tp=8,pp=8,dp=1,sp=megatron,recompute=selective --top 1 2>&1)
if grep -q '; best 1 (3 compiled: ' <<<"$out" &&
   grep -qE '^1 +dp=1,tp=8,sp=megatron,pp=8,schedule=interleaved:4,mb=64,recompute=selective +1 +12.41 s' <<<"$out"; then
  pass=$((pass + 1))
else
  echo "FAIL: explore-refine: $(head -5 <<<"$out")"
  fail=$((fail + 1))
fi
# GPT-2's head costs more than a layer: the stage partition still gives
# every stage a layer (it once proposed pp=2:12+0, which the compile of the
# shown plans refused with an error per plan), and the shown plans with
# recompute are compiled like the rest (their time the per-rank programs')
# A partial strategy or mesh no plan of the search matches: an error that
# names the rule (it printed an empty table and exit 0)
expect explore-none-devices 1 "explore: no plan for mesh 'laptop' \(4 devices\) matches --strategy dp=4,tp=2: the keys given use 8 devices" -- "$bin" explore samples/gpt.shard --strategy dp=4,tp=2
expect explore-none-tp 1 'matches --strategy tp=3: the search tries tp = 1, 2, 4, ..., 64; tp=3 is not one of them' -- "$bin" explore samples/gpt.shard --strategy tp=3
expect explore-none-heads 1 "tp=8 does not divide the model's 4 attention heads" -- "$bin" explore samples/gpt.shard --strategy tp=8 --mesh 8
expect explore-none-auto 1 'recompute=auto is the compiler.s choice per layer' -- "$bin" explore samples/gpt.shard --strategy recompute=auto
expect explore-none-mesh 1 "no plan for mesh '1000000' \(1000000 devices\): no split of the mesh's 1000000 devices" -- "$bin" explore samples/gpt.shard --mesh 1000000
expect auto-none-mesh 1 'strategy auto: no plan of the 0 evaluated fits and can be generated: no split of' -- "$bin" compile samples/gpt.shard --strategy auto --mesh 1000000
# A mesh the train block's plan does not fit: explore says so under the
# table, once, instead of the compiler's error for it (and a 175B model on
# 16 GPUs: every plan refused for memory, each with its reason, no errors)
expect explore-other-mesh 0 "^the train block's plan: not on this mesh: strategy dp=4 uses 4 devices but the mesh has 8" -- "$bin" explore samples/gpt.shard --mesh 8 --top 3
out=$("$bin" explore bench/models/gpt3-175b.shard --mesh 2x8:H100_SXM --top 3 2>&1)
if [ $? -eq 0 ] && ! grep -q 'error' <<<"$out" && [ "$(grep -c 'INFEASIBLE: stage [0-9] needs' <<<"$out")" = 3 ]; then
  pass=$((pass + 1))
else
  echo "FAIL: explore-quiet: $(head -5 <<<"$out")"
  fail=$((fail + 1))
fi
out=$("$bin" explore samples/gpt2-124m.shard --top 30 2>&1)
if [ $? -eq 0 ] && ! grep -qE 'error|\+0[,: ]' <<<"$out" && grep -q 'pp=2:' <<<"$out" &&
   grep -qE '\([0-9]+ compiled' <<<"$out"; then
  pass=$((pass + 1))
else
  echo "FAIL: explore-partition: $(grep -E 'error|\+0|evaluated' <<<"$out" | head -3)"
  fail=$((fail + 1))
fi
# what auto may pick: ring attention with bf16 activations too (the cuda
# target's bf16 ring kernels), and the cuda target generates it
sed 's/precision = fp32/precision = bf16/' samples/gpt.shard >"$tmp/gpt-bf16.shard"
expect explore-ring-bf16-generatable 0 'sp=ring' -- "$bin" explore "$tmp/gpt-bf16.shard" --mesh 4 --top 200 --generatable
expect emit-cuda-ring-bf16 0 'rt_ring_attention_backward_cu\(p->mesh, RT_AX_SP,' -- "$bin" compile "$tmp/gpt-bf16.shard" --target cuda --mesh 2 --strategy sp=ring:2 --emit=c
expect explore-infeasible 0 'INFEASIBLE: stage [0-9]+ needs [0-9.]+ GB > 80.0 GB' -- "$bin" explore bench/models/gpt3-175b.shard --mesh 4x8:A100_SXM --strategy tp=8,pp=4 --top 1
if command -v mpirun >/dev/null && [ -x "$(dirname "$bin")/shardc-calib" ]; then
  # (the microbenchmarks take 6 s on an idle 2-core machine, more under
  # the sanitizers or beside another test: 90 s before it counts as a hang)
  SHARDC_CALIB_QUICK=1 EXPECT_TIMEOUT=90 expect calibrate 0 'wrote .*prof2.json: 2 ranks; SGEMM up to' -- "$bin" calibrate --np 2 --rounds 2 -o "$tmp/prof2.json"
  # every figure measured (the fastest of 2 rounds: finite, positive), the rounds recorded
  expect calibrate-rounds 0 'rounds 2, all figures finite' -- python3 -c '
import json, math, sys
p = json.load(open(sys.argv[1]))
figs = [y for k in ("gemm", "gemm_thin", "bw") for x, y in p[k]] + list(p["special"].values()) + list(p["kernels"].values())
figs += [t for c in p["coll"] for b, t in c["t"]]
assert len(p["gemm"]) >= 10 and len(p["bw"]) >= 5 and len(p["coll"]) == 5, p.keys()
assert [x for x, y in p["gemm_thin"]] == [8, 16, 32, 64, 128, 256, 512], p["gemm_thin"]
# a thin GEMM is no faster than the square ones (they were up to 4.5 times,
# timed on subnormal operands that chained products left in the pool)
top = max(y for x, y in p["gemm"])
assert all(y <= 2 * top for x, y in p["gemm_thin"]), (top, p["gemm_thin"])
figs.append(p["eigh_flops"])
assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in figs), figs
print("rounds %d, all figures finite" % p["rounds"])' "$tmp/prof2.json"
  expect compile-profile 0 'predicted step .* \(profile .*prof2.json \(cpu, 2 ranks\)\)' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy dp=2 --profile "$tmp/prof2.json"
  # the kernels the programs run: where OpenBLAS does not know the CPU and
  # falls back to its Prescott kernels, the calibrator runs itself again with
  # the AVX2/AVX-512 ones, as the programs do (rt_blas_setup)
  if grep -qwE 'avx2|avx512f' /proc/cpuinfo; then
    expect calibrate-blas-core 0 '"blas_core": "[A-Za-z0-9]+"' -- grep -v '"blas_core": "Prescott"' "$tmp/prof2.json"
  fi
  expect calibrate-special 0 '"special": \{"exp": [0-9.e-]+, "log": .*"tanh": [0-9.e-]+' -- cat "$tmp/prof2.json"
  expect calibrate-kernels 0 '"kernels": \{"gelu": [0-9.e-]+, "gelu_bwd": .*"layernorm_bwd": [0-9.e-]+' -- cat "$tmp/prof2.json"
  expect explore-profile 0 'profile .*prof2.json' -- "$bin" explore samples/gpt.shard --mesh 2 --profile "$tmp/prof2.json"
fi
# the cuda calibrator's host build (rtc_calib.cu as host C++: no GPU, NCCL as MPI)
if command -v mpirun >/dev/null && [ -x "$(dirname "$bin")/shardc-calib-cuda-host" ]; then
  SHARDC_CALIB_QUICK=1 EXPECT_TIMEOUT=90 expect calibrate-cuda-host 0 'wrote .*profch.json: 2 ranks; fp32 GEMM up to [0-9.e+]+ GFLOP/s per rank, bf16 GEMM up to [0-9.e+]+ GFLOP/s' -- "$bin" calibrate --target cuda-host --np 2 -o "$tmp/profch.json"
  expect calibrate-cuda-host-keys 0 '"device": "host build of the cuda target' -- python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
assert p["shardc_profile"] == 1 and p["np"] == 2, p
for k in ("gemm", "gemm_bf16", "gemm_thin", "gemm_thin_bf16", "bw"):
    assert len(p[k]) >= 3 and all(y > 0 for x, y in p[k]), k
assert p["launch_s"] > 0 and p["launch_graph_s"] > 0
ops = {c["op"] for c in p["coll"] if c["n"] == 2 and c["t"]}
assert ops == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "p2p"}, ops
print("\"device\": \"%s\"" % p["device"])' "$tmp/profch.json"
  expect compile-profile-cuda-host 0 'predicted step .* \(profile .*profch.json \(host build of the cuda target \(no GPU\), 2 ranks\)\)' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy dp=2 --profile "$tmp/profch.json"
fi
expect calibrate-target-bad 1 "--target must be cpu, cuda or cuda-host, got 'tpu'" -- "$bin" calibrate --target tpu -o "$tmp/x.json"
if ! nvidia-smi -L >/dev/null 2>&1; then
  expect calibrate-cuda-nogpu 1 'calibrate --target cuda: no GPU visible|built without nvcc/NCCL: calibrate --target cuda needs them' -- "$bin" calibrate --target cuda -o "$tmp/x.json"
fi
echo '{"not": 1}' >"$tmp/bad.json"
expect profile-bad 1 'not a shardc profile' -- "$bin" compile samples/gpt.shard --profile "$tmp/bad.json"
printf '{"shardc_profile": 1, "special": {"tanh": -1}}' >"$tmp/badsf.json"
expect profile-bad-special 1 "special function's time must be between 0 and 1 ms" -- "$bin" compile samples/gpt.shard --profile "$tmp/badsf.json"
printf '{"shardc_profile": 1, "kernels": {"gelu": 2}}' >"$tmp/badk.json"
expect profile-bad-kernel 1 "kernel's time per element must be between 0 and 1 ms" -- "$bin" compile samples/gpt.shard --profile "$tmp/badk.json"
expect profile-missing 1 'profile /nonexistent.json: cannot open it' -- "$bin" explore samples/gpt.shard --profile /nonexistent.json
printf '{"shardc_profile": 1, "launch_s": 5e-6}' >"$tmp/nonp.json"
expect profile-no-device 0 '; profile .*/nonp\.json \(device not given\)$' -- "$bin" explore samples/gpt.shard --profile "$tmp/nonp.json" --top 1
printf '{"shardc_profile": 1, "coll": [{"op": "frob", "n": 2, "t": [[1024, 1e-5]]}]}' >"$tmp/badop.json"
expect profile-bad-coll-op 1 'line 1, column 39 \(byte offset 38\): coll: op must be all_reduce, all_gather, reduce_scatter, broadcast or p2p, got "frob"' -- "$bin" explore samples/gpt.shard --profile "$tmp/badop.json"
expect calibrate-no-out 1 'no output file' -- "$bin" calibrate --np 2
expect calibrate-rounds-bad 1 "--rounds must be a number from 1 to 100, got '0'" -- "$bin" calibrate --rounds 0 -o "$tmp/x.json"
expect calibrate-rounds-cuda 1 '--rounds is for --target cpu' -- "$bin" calibrate --target cuda-host --rounds 2 -o "$tmp/x.json"
expect explore-report 0 'plans evaluated' -- "$bin" explore bench/models/gpt3-175b.shard --top 3 --report "$tmp/report.html"
if command -v xmllint >/dev/null; then
  if xmllint --noout "$tmp/report.html" 2>/dev/null &&
     [ "$(xmllint --xpath 'count(//*[local-name()="svg"])' "$tmp/report.html")" = 4 ] &&
     [ "$(xmllint --xpath 'count(//*[@id="pareto"]/*[local-name()="circle"])' "$tmp/report.html")" -gt 1000 ] &&
     [ "$(xmllint --xpath 'count(//*[@id="timeline"]/*[@class="fwd"])' "$tmp/report.html")" -gt 100 ] &&
     [ "$(xmllint --xpath 'count(//*[@id="memory"]/*[@class="mem-3"])' "$tmp/report.html")" -gt 1 ] &&
     xmllint --xpath '//*[@id="trainplan"]' "$tmp/report.html" >/dev/null 2>&1 &&
     xmllint --xpath '//*[@id="front"]/@points' "$tmp/report.html" >/dev/null 2>&1; then
    pass=$((pass + 1))
  else
    echo "FAIL: explore-report-xml: the report does not parse or lacks its drawings"
    fail=$((fail + 1))
  fi
fi
expect explore-top-bad 1 '--top must be a number' -- "$bin" explore samples/gpt.shard --top 0

# The memory check (passes/memcheck.c): check, compile and build refuse a
# plan larger than the device (tests/diag/memory_*.shard for the messages);
# --no-memory-check lets it through; a --mesh device's catalog memory counts.
sed 's/mesh laptop { devices = 4, device = cpu }/mesh laptop { devices = 4, device = cpu, memory = 1 MiB }/' samples/gpt.shard >"$tmp/small-mem.shard"
expect memory-check 1 'small-mem.shard:24:14: error: the plan does not fit in device memory: every rank needs 22,822,976 bytes \(21.77 MiB\), but a device of mesh .laptop. \(cpu\) has 1,048,576 bytes \(1.00 MiB\)' -- "$bin" check "$tmp/small-mem.shard"
expect memory-compile 1 'does not fit in device memory' -- "$bin" compile "$tmp/small-mem.shard" --emit=plan
expect memory-build 1 'does not fit in device memory' -- "$bin" build "$tmp/small-mem.shard" -o "$tmp/small-mem"
expect memory-no-check 0 '' -- "$bin" check "$tmp/small-mem.shard" --no-memory-check
# 21 MiB devices: the plain plan (21.77 MiB) does not fit, recompute does.
sed 's/mesh laptop { devices = 4, device = cpu }/mesh laptop { devices = 4, device = cpu, memory = 21 MiB }/' samples/gpt.shard >"$tmp/mid-mem.shard"
expect memory-recompute-hint 1 'recompute=selective \(norms, activations\) or full \(whole layers\)' -- "$bin" check "$tmp/mid-mem.shard"
expect memory-recompute-fits 0 '^memory:   20,039,680 bytes per rank' -- "$bin" compile "$tmp/mid-mem.shard" --strategy dp=4,recompute=selective
# Pipeline cuts (passes/stage.c): pp=N balances FLOPs within the device
# memory, pp=N:memory the memory itself.  tests/dist/bigvocab.shard's
# FLOP-balanced stage 0 needs 32,595,968 bytes; balanced for memory, 25,212,928.
expect cuts-flops 0 'stage 0:  model ops, blocks.0 .. blocks.1; 15.5% of the FLOPs' -- "$bin" compile tests/dist/bigvocab.shard --strategy pp=4
expect cuts-flops-mem 0 'memory: 32,595,968 bytes per rank' -- "$bin" compile tests/dist/bigvocab.shard --strategy pp=4
expect cuts-memory 0 'cuts balance estimated memory' -- "$bin" compile tests/dist/bigvocab.shard --strategy pp=4:memory
# (by the estimate, a cut inside blocks.0 lightens stage 0 further: 20,344,832)
expect cuts-memory-stage0 0 'memory: 20,344,832 bytes per rank' -- "$bin" compile tests/dist/bigvocab.shard --strategy pp=4:memory
expect cuts-memory-inside 0 '^cut 0:    inside blocks.0 \(after 0.5 layers\), after add \(bigvocab.shard:6\), before layernorm' -- "$bin" compile tests/dist/bigvocab.shard --strategy pp=4:memory
expect cuts-memory-no33 1 '' -- sh -c "'$bin' compile tests/dist/bigvocab.shard --strategy pp=4:memory | grep -q 32,595,968"
# On 28 MiB devices the FLOP-balanced cuts would not fit; pp=4 moves them.
sed 's/mesh four { devices = 4, device = cpu }/mesh four { devices = 4, device = cpu, memory = 28 MiB }/' tests/dist/bigvocab.shard >"$tmp/bigvocab28.shard"
expect cuts-within-memory 0 "cuts balance FLOPs within the device memory" -- "$bin" compile "$tmp/bigvocab28.shard" --strategy pp=4
expect cuts-within-memory-plan 0 'stage 0:  model ops, blocks.0; 7.7% of the FLOPs' -- "$bin" compile "$tmp/bigvocab28.shard" --strategy pp=4
# Cuts inside a layer (passes/stage.c): tests/dist/gpt3.shard has 3 layers;
# on pp=2 a cut between layers gives 2+1 or 1+2 layers, a cut after
# blocks.1's attention residual add 43.8% + 56.2% of the FLOPs.  The
# balanced cut carries two tensors: after blocks.1's fc matmul (the residual
# stream and the matmul's output cross it), 53.4% + 46.6%, worth its
# 524,288 bytes more per message on this mesh.  pp=2:1.5+1.5 fixes the
# one-tensor cut.
expect cut-inside 0 '^cut 0:    inside blocks.1 \(after 1.69 layers\), after matmul \(gpt3.shard:6\), before add; 2 tensors cross it; 2 messages per microbatch \(655,360 bytes\) to stage 1, their gradients back:' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2
expect cut-inside-msg1 0 '^             %[0-9]+ f32\[B=4,T=64,128\] \(131,072 bytes\), add.s output' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2
expect cut-inside-msg2 0 '^             %[0-9]+ f32\[B=4,T=64,512\] \(524,288 bytes\), matmul.s output' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2
expect cut-inside-stage 0 '^stage 1:  blocks.1 from add .. blocks.2, model ops; 46.6% of the FLOPs' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2
expect cut-inside-one 0 '^cut 0:    inside blocks.1 \(after 1.5 layers\), after add \(gpt3.shard:5\), before layernorm; the message per microbatch: %[0-9]+ f32\[B=4,T=64,128\] \(131,072 bytes\) to stage 1, its gradient back' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2:1.5+1.5
expect cut-inside-given 0 '^stage 0:  model ops, blocks.0 .. blocks.1 to add; 43.8% of the FLOPs' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2:1.5+1.5
expect cut-inside-spec 0 '^strategy: dp=1,pp=2:1.5\+1.5,schedule=1f1b' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2:1.5+1.5
# stages on two nodes with tp=2: the residual stream (whole on both tp ranks)
# goes scattered, half a rank; the column matmul's output (split over tp)
# goes as each rank's own part; on one node both go whole
expect cut-scatter 0 '^             %[0-9]+ f32\[B=4,T=64,128\] \(131,072 bytes\), add.s output, scattered over tp: 65,536 bytes a rank, all-gathered there$' -- "$bin" compile tests/dist/gpt3.shard --mesh 2x2 --strategy pp=2,tp=2
expect cut-scatter-split 0 '^             %[0-9]+ f32\[B=4,T=64,256\] \(262,144 bytes\), matmul.s output$' -- "$bin" compile tests/dist/gpt3.shard --mesh 2x2 --strategy pp=2,tp=2
expect cut-scatter-one-node 0 '^             %[0-9]+ f32\[B=4,T=64,128\] \(131,072 bytes\), add.s output$' -- "$bin" compile tests/dist/gpt3.shard --mesh 4 --strategy pp=2,tp=2
# a GPU plan whose GEMMs have rows that are not 16-byte aligned (GPT-2's
# vocabulary of 50257 in bf16): the precision pass pads the LM head's
# 16-bit weight copy to 50304 rows (zeroed past 50257 in the step's cast),
# the logits' rows with it, the cross-entropy over the first 50257, dW from
# the first 50257 columns of dlogits; the plan says so.  Under ZeRO-3 (the
# weight gathered per use, no step copy) each cast before a use of the head
# writes the padded copy alike.  With SHARDC_HEAD_PAD=0 the
# plan names the unaligned rows, prices them and names cross_entropy's
# classes; a padded vocabulary (50304 rows, the loss over 50257 classes),
# a cpu mesh, an fp32 plan (CUDA cores): no such line
expect padded-head 0 "^          padded: embed.weight's 16-bit copy has 50304 rows, not 50257 \(zeros\), so the logits' rows are 100608 bytes, a multiple of 16" -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 1:H200_SXM --strategy dp=1
expect padded-head-code 0 'rt_matmul_backward_rows_cu\(BF\([0-9]+\), F\([0-9]+\), BF\([0-9]+\), BF\([0-9]+\), BF\([0-9]+\), 16384, 768, 50304, 50257\);' -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 1:H200_SXM --strategy dp=1 --emit=c
expect padded-head-cast 0 'rtc_memset\(BF\([0-9]+\), 0, 72192\);  // %[0-9]+: the padded rows' -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 1:H200_SXM --strategy dp=1 --emit=c
expect padded-head-ce 0 'rt_crossentropy_forward_site_ld_cu\(.*, 50257, 50304\)\);' -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 1:H200_SXM --strategy dp=1 --emit=c
expect unaligned-vocab 0 '^          unaligned: rows of 50257 features \(100514 bytes\) are not a multiple of 16 bytes, so cuBLAS runs their GEMMs at 0.16 of its rate: [0-9]+% of the step; padded to 50304 \(the unused rows kept out of the loss by `cross_entropy\(..., classes = 50257\)`\) the step would be about ' -- env SHARDC_HEAD_PAD=0 "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 1:H200_SXM --strategy dp=1
expect padded-head-zero3 0 "^          padded: embed.weight's 16-bit copy, cast before each use, has 50304 rows, not 50257" -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 2:H200_SXM --strategy dp=2,zero=3
expect padded-head-zero3-code 0 'rt_matmul_backward_rows_cu\(BF\([0-9]+\), F\([0-9]+\), BF\([0-9]+\), BF\([0-9]+\), BF\([0-9]+\), 16384, 768, 50304, 50257\);' -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 2:H200_SXM --strategy dp=2,zero=3 --emit=c
expect unaligned-zero3 0 '^          unaligned: rows of 50257 features' -- env SHARDC_HEAD_PAD=0 "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 2:H200_SXM --strategy dp=2,zero=3
sed 's/const vocab = 50257/const vocab = 50304/; s/return cross_entropy(logits, targets)/return cross_entropy(logits, targets, classes = 50257)/' \
  samples/gpt2-124m.shard >"$tmp/gpt2_padded.shard"
expect padded-classes-code 0 'rt_crossentropy_forward_site_ld_cu\(.*, 50257, 50304\)\);' -- "$bin" compile "$tmp/gpt2_padded.shard" --target cuda --mesh 1:H200_SXM --strategy dp=1 --emit=c
expect classes-ir 0 'cross_entropy %[0-9]+, \$targets \{vocab-parallel over tp\(2\), bytes=[0-9]+, classes=256\}' -- "$bin" compile tests/dist/gptpad.shard --mesh 2 --strategy tp=2 --emit=ir
# cross_entropy's classes: more than the logits' columns, not an integer, 0
for c in 300:"classes = 300 is more than the logits' 256 columns" 2.5:"'classes' must be an integer, got a number" \
         0:"'classes' must be at least 1, got 0"; do
  sed "s/return cross_entropy(logits, targets)/return cross_entropy(logits, targets, classes = ${c%%:*})/" \
    samples/gpt.shard >"$tmp/classes.shard"
  expect "classes-${c%%:*}" 1 "^$tmp/classes.shard:14:[0-9]+: error: cross_entropy: ${c#*:}\$" -- "$bin" check "$tmp/classes.shard"
done
sed 's/precision = bf16/precision = fp32/' samples/gpt2-124m.shard >"$tmp/gpt2_f32.shard"
for args in "$tmp/gpt2_padded.shard --target cuda --mesh 1:H200_SXM --strategy dp=1" \
            "samples/gpt2-124m.shard --mesh 1 --strategy dp=1" \
            "$tmp/gpt2_f32.shard --target cuda --mesh 1:H200_SXM --strategy dp=1"; do
  # shellcheck disable=SC2086
  if "$bin" compile $args 2>&1 | grep -q 'unaligned:'; then
    echo "FAIL: unaligned-none: an unaligned: line for $args"
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
done
# ZeRO-2/3 over several microbatches: the plan says each one reduce-scatters
# the gradients; with one microbatch a rank it says nothing
expect zero2-per-mb 0 '^zero:     2: each rank keeps its 1/2 of the gradients, so every one of the 2 microbatches. backward reduce-scatters them \(2 reductions a step; zero=1 reduces once' -- "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=2,dp=2,zero=2
if "$bin" compile samples/gpt.shard --mesh 4 --strategy dp=4,zero=2 2>&1 | grep -q '^zero:'; then
  echo "FAIL: zero2-one-mb: a zero: line with one microbatch a rank"
  fail=$((fail + 1))
else
  pass=$((pass + 1))
fi
# pp=2:1.25+1.75: the boundary nearest a quarter of blocks.1's FLOPs, after
# its qkv matmul's bias add (the residual and the qkv output cross it)
expect cut-frac 0 '^cut 0:    inside blocks.1 \(after 1.23 layers\), after add \(gpt3.shard:5\), before slice; 2 tensors cross it; 2 messages per microbatch \(524,288 bytes\)' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2:1.25+1.75
expect cut-frac-spec 0 '^strategy: dp=1,pp=2:1.25\+1.75,schedule=1f1b' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2:1.25+1.75
expect cut-frac-sum 1 'pp=2: the stage sizes add up to 2.6 layers, but model gpt has 3' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2:1.3+1.3
expect cut-frac-digits 1 'a stage size is a whole number of layers or has one or two decimals' -- "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy pp=2:1.125+1.875
# the largest stage's share of the FLOPs: 2 plans
largest() { "$bin" compile tests/dist/gpt3.shard --mesh 2 --strategy "$1" --emit=plan 2>&1 |
            sed -n 's/^stage [0-9]*: .*; \([0-9.]*\)% of the FLOPs.*/\1/p' | sort -g | tail -1; }
chosen=$(largest pp=2) a=$(largest pp=2:2+1) b=$(largest pp=2:1+2) h=$(largest pp=2:1.5+1.5)
if [ -n "$chosen" ] && [ -n "$a" ] && [ -n "$b" ] && [ -n "$h" ] &&
   awk -v c="$chosen" -v a="$a" -v b="$b" -v h="$h" 'BEGIN { exit !(c < a && c < b && c < h) }'; then
  pass=$((pass + 1))
else
  echo "FAIL: cut-inside-balance: the largest stage has ${chosen:-?}% of the FLOPs with pp=2, ${a:-?}% with 2+1, ${b:-?}% with 1+2, ${h:-?}% with 1.5+1.5"
  fail=$((fail + 1))
fi
# --memory SIZE sets each device's memory for the check and recompute=auto.
expect memory-flag 1 'note: --memory gives each device 1.00 MiB' -- "$bin" check samples/gpt.shard --memory 1MiB
expect memory-flag-auto 0 'auto: blocks.0 .. blocks.1: selective; blocks.2: ln_1 layernorm: 20,957,184 bytes .*per tensor \(per layer, selective for blocks.0 .. blocks.2, none for blocks.3: \+4.719e\+06' -- "$bin" compile samples/gpt.shard --strategy dp=4,recompute=auto --memory 20MiB
expect memory-flag-gb 0 '' -- "$bin" check samples/gpt.shard --memory "1 GB"
expect memory-flag-bad 1 "--memory needs a size of at least 1MB such as 80GB, 24GiB or 512MiB, got '12XB'" -- "$bin" check samples/gpt.shard --memory 12XB
expect memory-flag-tiny 1 "--memory needs a size of at least 1MB .*got '1.5'" -- "$bin" check samples/gpt.shard --memory 1.5
expect memory-flag-hex 1 "--memory needs a size of at least 1MB .*got '0x10GB'" -- "$bin" check samples/gpt.shard --memory 0x10GB
expect memory-flag-zero 1 "--memory needs a size" -- "$bin" check samples/gpt.shard --memory 0GB
expect memory-no-check-plan 0 '^memory:   22,822,976 bytes per rank' -- "$bin" compile "$tmp/small-mem.shard" --no-memory-check
# (in fp32: bf16 activations, passes/precision.c, fit a cpu's 16 GB)
sed 's/precision = bf16/precision = fp32/' samples/gpt2-124m.shard >"$tmp/gpt2-fp32.shard"
expect memory-cli-mesh 1 "gpt2-fp32.shard:27:14: error: the plan does not fit in device memory: every rank needs 18,355,507,328 bytes \(17.09 GiB\), but a device of mesh '8' \(cpu\) has 16,000,000,000 bytes \(14.90 GiB\)" -- "$bin" check "$tmp/gpt2-fp32.shard" --mesh 8
# bf16 (the cuda target's precision): half the activations, the same fp32
# parameters, gradients and optimizer state, and the 16-bit copies of the
# weights matmuls read (cast once per step; 2 bytes per element; the LM
# head's with 50304 rows)
expect memory-bf16-plan 0 "^memory:   10,429,911,168 bytes per rank \(9.71 GiB\): params 474.70 MiB, grads 474.70 MiB, optimizer 949.40 MiB, 16-bit weight copies 235.69 MiB, activations\+inputs 7.63 GiB" -- "$bin" compile samples/gpt2-124m.shard --target cuda
expect memory-fits-h100 1 '^samples/gpt2-124m.shard:26:15: error: precision bf16' -- "$bin" check samples/gpt2-124m.shard --mesh 8:H100_SXM
# ZeRO-1 under bf16 (passes/zero.c masters_sharded): each rank stores its
# eighth of the fp32 masters (params 59.34 MiB), and the step gathers the
# matmul weights as 16-bit copies, the rest (the embedding table, which the
# embedding reads in fp32; biases, norm weights) as fp32 copies, before the
# first microbatch; with whole masters and an fp32 all-gather after the
# update (SHARDC_ZERO_MASTERS=whole, as before) 256 MB more a rank and
# 149 MB more sent a step
expect memory-bf16-zero1 0 "^memory:   9,364,767,360 bytes per rank \(8.72 GiB\): params 59.34 MiB, grads 534.04 MiB, optimizer 118.68 MiB, gathered weight copies 406.64 MiB" -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 8 --strategy dp=8,zero=1
expect comm-bf16-zero1 0 "^comm:     722,443,008 bytes sent per rank per step" -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 8 --strategy dp=8,zero=1
# ... its copies gathered at the step's start beside the forward, each
# layer's first reader waiting for its own bucket (PInstr.early)
expect early-gathers-program 0 "^  fwd\.[0-9]+ +wait for early gathers 0\.\.3; .*matmul" -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 8 --strategy dp=8,zero=1 --emit=program
expect early-gathers-code 0 "rtc_allgather_early\(p->mesh, RT_AX_DP, \(float \*\)BF\([0-9]+\), \(const float \*\)BF\([0-9]+\), [0-9]+, 3\);" -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 8 --strategy dp=8,zero=1 --emit=c
expect memory-bf16-zero1-whole 0 "^memory:   9,621,052,416 bytes per rank .*params 474.70 MiB, grads 534.04 MiB, optimizer 118.68 MiB, 16-bit weight copies 235.69 MiB" -- env SHARDC_ZERO_MASTERS=whole "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 8 --strategy dp=8,zero=1
expect comm-bf16-zero1-whole 0 "^comm:     871,078,656 bytes sent per rank per step" -- env SHARDC_ZERO_MASTERS=whole "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 8 --strategy dp=8,zero=1
# ZeRO-3 under bf16: the matmul weights gathered before each use in 16
# bits (their shards cast once a step), the rest in fp32: 23% fewer bytes
expect comm-bf16-zero3 0 "^comm:     4,026,376,704 bytes sent per rank per step" -- "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 8 --strategy dp=8,zero=3
expect comm-bf16-zero3-whole 0 "^comm:     5,215,461,888 bytes sent per rank per step" -- env SHARDC_ZERO_MASTERS=whole "$bin" compile samples/gpt2-124m.shard --target cuda --mesh 8 --strategy dp=8,zero=3

# FLOPs (passes/report.c plan_flops; tests/unit/test_flops.c against the
# closed form): model FLOPs from the forward nodes of the whole model, the
# same under any strategy (not 3x the forward-and-backward graph), and the
# hardware FLOPs as run.
expect plan-flops-dp 0 '^flops:    model 5.536e\+09 per step = 3 x 4.613e\+08 forward per microbatch \(256 tokens\) x 4 microbatches \(dp 4 x mb 1\)' -- "$bin" compile samples/gpt.shard --emit=plan
expect plan-flops-tp 0 '^flops:    model 5.536e\+09 per step' -- "$bin" compile samples/gpt.shard --emit=plan --strategy tp=4
expect plan-flops-hw 0 '^          hardware 5.501e\+09 per step, 1.375e\+09 on the busiest rank .*; device peak 1.66e\+11 FLOP/s \(cpu, fp32\)' -- "$bin" compile samples/gpt.shard --emit=plan
# the mesh block's peak_fp32 is the peak MFU is measured against (it had
# been the catalog device's whatever the mesh said), in the plan and in the
# program's header
sed 's/mesh laptop { devices = 4, device = cpu }/mesh laptop { devices = 4, device = cpu, peak_fp32 = 0.5 TF\/s }/' \
  samples/gpt.shard >"$tmp/gpt-peak.shard"
expect plan-flops-mesh-peak 0 '; device peak 5e\+11 FLOP/s \(cpu, fp32\)' -- "$bin" compile "$tmp/gpt-peak.shard" --emit=plan
expect plan-flops-mesh-peak-c 0 '\.peak_flops = 5e\+11,' -- "$bin" compile "$tmp/gpt-peak.shard" --emit=c

# The command line wins over the train block.
expect strategy-override 0 'strategy: dp=2,tp=2,mb=2 \(from --strategy\)' -- "$bin" compile samples/gpt.shard --strategy dp=2,tp=2
expect strategy-eq-form 0 'strategy: dp=1,tp=4,mb=4 \(from --strategy\)' -- "$bin" compile samples/gpt.shard --strategy=tp=4
expect strategy-dp-inferred 0 'strategy: dp=2,pp=2,schedule=gpipe' -- "$bin" compile samples/gpt.shard --strategy pp=2,schedule=gpipe
expect strategy-auto 0 'strategy: dp=4.* \(from auto: the best of [0-9]+ plans, predicted' -- "$bin" compile samples/gpt.shard --strategy auto
# the keys written beside auto are fixed (a partial SPEC, as explore's); the
# block's microbatch is kept (microbatch = batch: only dp=1 plans); explore's
# first plan is auto's (both compile the small model's best candidates);
# per-stage recompute searched and priced stage by stage
sed 's/  strategy = "dp=4"/  strategy = auto, tp = 2/' samples/gpt.shard >"$tmp/auto_tp.shard"
expect auto-fixed-keys 0 'strategy: dp=2,tp=2,.*\(from auto: the best of [0-9]+ plans with tp=2, predicted' -- "$bin" compile "$tmp/auto_tp.shard" --emit=plan
sed 's/microbatch = 4/microbatch = 16/; s/  strategy = "dp=4"/  strategy = auto/' samples/gpt.shard >"$tmp/auto_mb.shard"
expect auto-block-microbatch 0 'strategy: dp=1,.*\(from auto' -- "$bin" compile "$tmp/auto_mb.shard" --emit=plan
first=$("$bin" explore "$tmp/auto_mb.shard" --top 1 2>&1 | awk '$1 == "1" { print $2 }')
expect auto-is-explore-first 0 "strategy: ${first//+/\\+} \(from auto" -- "$bin" compile "$tmp/auto_mb.shard" --emit=plan
expect explore-stage-recompute 0 '^1 +dp=1,pp=4:1\+1\+1\+1,schedule=1f1b,mb=4,recompute=full\+full\+selective\+selective ' -- "$bin" explore samples/gpt.shard --strategy pp=4 --memory 8MB --top 3
expect explore-stage-recompute-fixed 0 '^1 +dp=.*pp=2.*recompute=full\+none ' -- "$bin" explore samples/gpt.shard --strategy recompute=full+none --top 3
expect explore-stage-recompute-pp 1 'recompute with 2 per-stage policies needs pp=2 \(one policy a pipeline stage\), not pp=4' -- "$bin" explore samples/gpt.shard --strategy pp=4,recompute=full+none
expect explore-mem-units 0 'INFEASIBLE: stage 3 needs 17.3 MB > 8.0 MB' -- "$bin" explore samples/gpt.shard --strategy pp=4 --memory 8MB --top 3
expect auto-mem-units 1 'strategy auto: no plan of the [0-9]+ evaluated fits .*stage 0 needs [0-9.]+ MB > 1.0 MB' -- "$bin" compile samples/gpt.shard --strategy auto --memory 1MB
# a SPEC's items: none empty, none twice; auto among them searches the rest
expect strategy-dup 1 "'dp' is given twice in 'dp=2,dp=4'" -- "$bin" check samples/gpt.shard --strategy dp=2,dp=4
expect strategy-empty-item 1 "an empty item in 'dp=4,,'" -- "$bin" check samples/gpt.shard --strategy dp=4,,
expect strategy-auto-keys 0 'strategy: dp=2,tp=2,.*\(from auto: the best of [0-9]+ plans with tp=2' -- "$bin" compile samples/gpt.shard --strategy auto,tp=2 --emit=plan
# the fixed keys as written: stage partitions and per-stage recompute too
expect strategy-auto-stage-keys 0 '\(from auto: the best of [0-9]+ plans with pp=2:1\+3,recompute=full\+none, predicted' -- "$bin" compile samples/gpt.shard --mesh 4 --strategy auto,pp=2:1+3,recompute=full+none --emit=plan
expect mesh-too-many 1 "--mesh '2000000': sizes run from 1 to 1048576 devices" -- "$bin" check samples/gpt.shard --mesh 2000000
sed 's/microbatch = 4/microbatch = 5/; s/  strategy = "dp=4"/  strategy = auto/' samples/gpt.shard >"$tmp/mb5.shard"
expect auto-microbatch-reason 1 "strategy auto: .*the train block's microbatch 5 does not divide its batch of 16 sequences" -- "$bin" compile "$tmp/mb5.shard"
expect explore-no-layers 1 "the model has no repeated layers .*only data parallelism is searched for it" -- "$bin" explore samples/mlp.shard --mesh 4 --strategy tp=2
# explicit stage sizes that do not cover the model: refused before the search
expect explore-stage-sizes 1 'matches --strategy pp=2:1\+1: pp=2: the stage sizes add up to 2 layers, but the model has 4' -- "$bin" explore samples/gpt.shard --strategy pp=2:1+1
expect explore-stage-sizes-interleaved 0 '^1 +dp=2,pp=2:0.5\+1.5\+1\+1,schedule=interleaved:2,' -- "$bin" explore samples/gpt.shard --top 2 --strategy pp=2:0.5+1.5+1+1
# (4 chunks of a 3-layer model: parts of layers, as given)
expect explore-stage-sizes-parts 0 '^1 +dp=2,pp=2:0.5\+1.75\+0.5\+0.25,schedule=interleaved:2,' -- "$bin" explore tests/dist/gpt3.shard --mesh 4 --top 1 --strategy pp=2:0.5+1.75+0.5+0.25
expect explore-stage-sizes-schedule 1 'pp=2 with 4 stage sizes: the search tries interleaved:2 and 4 \(4 or 8 sizes\) and the other schedules \(2\)' -- "$bin" explore samples/gpt.shard --strategy pp=2:0.5+1.5+1+1,schedule=1f1b
expect explore-stage-sizes-no-interleave 0 '^4 +dp=2,pp=2:0.5\+3.5,schedule=(1f1b|gpipe)' -- "$bin" explore samples/gpt.shard --top 4 --strategy pp=2:0.5+3.5
# a mesh figure with a unit of the wrong kind is an error at the figure
for kv in "memory = 80 GB/s|'memory' must be a size such as 80 GB, got a bandwidth \('GB/s'\)" \
          "intra = 450 GiB|'intra' must be a bandwidth such as 450 GB/s, got a size \('GiB'\)" \
          "peak_fp32 = 67 GB|'peak_fp32' must be a rate such as 67 TF/s, got a size \('GB'\)"; do
  sed "s|mesh laptop { devices = 4, device = cpu }|mesh laptop { devices = 4, device = cpu, ${kv%%|*} }|" samples/gpt.shard >"$tmp/units.shard"
  expect "mesh-unit ${kv%%|*}" 1 "units.shard:17:[0-9]+: error: ${kv#*|}" -- "$bin" check "$tmp/units.shard"
done
expect mesh-spec 0 'mesh:     2x4:H100_SXM = 8 x H100_SXM \(2 nodes x 4\)' -- "$bin" compile samples/gpt.shard --mesh 2x4:H100_SXM --strategy dp=2,tp=4
expect mesh-spec-count 0 'strategy: dp=2,mb=2 ' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy dp=2
expect mesh-microbatch 1 'microbatch 4 does not divide the per-rank batch 2 \(batch 16 / dp 8\)' -- "$bin" check samples/gpt.shard --mesh 8 --strategy dp=8
expect mesh-vs-block-strategy 1 'strategy dp=4 uses 4 devices but the mesh has 8' -- "$bin" check samples/gpt.shard --mesh 8
expect mesh-bad 1 "--mesh 'zz' is neither a mesh declared in the file nor a size" -- "$bin" check samples/gpt.shard --mesh zz
expect mesh-bad-device 1 "unknown device 'TPUv4'" -- "$bin" check samples/gpt.shard --mesh 4:TPUv4
expect strategy-too-big 1 'uses 8 devices but the mesh has 4' -- "$bin" check samples/gpt.shard --strategy dp=2,tp=4
expect strategy-bad-key 1 "unknown strategy key 'tq'" -- "$bin" check samples/gpt.shard --strategy tq=2
expect strategy-too-big 1 "tp must be at most 1048576, got '9223372036854775807'" -- "$bin" check samples/gpt.shard --strategy tp=9223372036854775807
expect strategy-negative-huge 1 "dp must be a positive integer, got '-99999999999999999999'" -- "$bin" check samples/gpt.shard --strategy dp=-99999999999999999999
expect strategy-tp-heads 1 'attention: heads 4 cannot be split over tp=8' -- "$bin" check samples/gpt.shard --mesh 8 --strategy tp=8
expect model-flag-bad 1 "--model 'nope' is not a model" -- "$bin" check samples/gpt.shard --model nope
expect warnings-quiet 0 '' -- "$bin" check samples/gpt.shard -w

# precision = bf16 with 4 microbatches (passes/precision.c): each weight a
# matmul reads has one 16-bit copy, cast once per step in the program's cast
# block, and no cast in the forward or backward; under zero=3 (parameters
# gathered per use) a step cast of each layer's 16-bit shard (the matmul
# weights, gathered in 16 bits before each use: passes/zero.c), and the
# tied embedding (gathered in fp32: the embedding reads it so) cast before
# its two readers, the head's forward and backward.
sed 's/precision = fp32/precision = bf16/' samples/gpt.shard >"$tmp/gpt_bf16.shard"
bf16_casts() {
  local name="$1" want="$2" out ncast nuniq nmm nuse
  shift 2
  out=$(timeout 20 "$bin" compile "$tmp/gpt_bf16.shard" --target cuda --emit=program "$@" 2>&1)
  ncast=$(grep -cE '^  cast\.[0-9]+ ' <<<"$out")
  nuniq=$(grep -E '^  cast\.[0-9]+ ' <<<"$out" | grep -oE '= cast @[^ }]+' | sort -u | wc -l)
  nmm=$(grep -E '^  fwd\.[0-9]+ ' <<<"$out" | grep -c '= matmul ')
  nuse=$(grep -E '^  (fwd|bwd)\.[0-9]+ ' <<<"$out" | grep -c '= cast @')
  if [ "$want" = once ] && [ "$ncast" -gt 0 ] && [ "$ncast" = "$nuniq" ] && [ "$ncast" = "$nmm" ] &&
     [ "$nuse" = 0 ] && grep -q '16-bit weight copies' <<<"$out"; then
    pass=$((pass + 1))
  elif [ "$want" = per-use ] && [ "$ncast" = 0 ] && [ "$nuse" -ge $((2 * nmm)) ]; then
    pass=$((pass + 1))
  elif [ "$want" = shards ] && [ "$ncast" = 4 ] && [ "$nuniq" = 0 ] && [ "$nuse" = 2 ] &&
       [ "$(grep -cE '^  cast\.[0-9]+ .*= cast %' <<<"$out")" = 4 ]; then
    pass=$((pass + 1))
  else
    echo "FAIL: $name: $ncast step casts ($nuniq weights), $nmm matmuls, $nuse casts in the microbatch (want $want)"
    fail=$((fail + 1))
  fi
}
bf16_casts bf16-casts-once once --mesh 1 --strategy dp=1,mb=4
bf16_casts bf16-casts-once-pp once --mesh 2 --strategy pp=2,mb=4
bf16_casts bf16-casts-zero3 shards --mesh 2 --strategy dp=2,zero=3,mb=2
# (SHARDC_ZERO_MASTERS=whole: every bucket gathered in fp32, the casts before their readers)
SHARDC_ZERO_MASTERS=whole bf16_casts bf16-casts-zero3-whole per-use --mesh 2 --strategy dp=2,zero=3,mb=2

# zero=3 on the cuda target (passes/zero.c, program.c): every parameter
# gather runs ahead on the communication stream and has one wait before its
# first reader; the next layer's gather is issued before the current layer's
# wait (two in flight at a time), none blocks.
zero3_ahead() {
  local out nah nw peak
  out=$(timeout 20 "$bin" compile samples/gpt.shard --target cuda --emit=c --mesh 2 --strategy dp=2,zero=3 2>&1)
  nah=$(grep -c 'rtc_allgather_ahead(' <<<"$out")
  nw=$(grep -c 'rtc_gather_wait(' <<<"$out")
  peak=$(awk '/rtc_allgather_ahead\(/ {n++; if (n > m) m = n} /rtc_gather_wait\(/ {n--} END {print m + 0}' <<<"$out")
  if [ "$nah" -gt 0 ] && [ "$nah" = "$nw" ] && [ "$peak" = 2 ] && ! grep -q 'rtc_allgather_dim(' <<<"$out"; then
    pass=$((pass + 1))
  else
    echo "FAIL: zero3-gathers-ahead: $nah gathers ahead, $nw waits, at most $peak in flight"
    fail=$((fail + 1))
  fi
}
zero3_ahead

# Hostile profiles and output paths (docs/cost-model.md, "Reading a
# profile"): a number out of range is refused with its key and its
# position, nesting is bounded, a FIFO is refused, never waited on.
printf '{"shardc_profile": 1,\n "launch_s": -1}' >"$tmp/neg.json"
expect profile-range 1 "^shardc: error: --profile .*/neg.json: line 2, column 14 \(byte offset 35\): launch_s must be between 0 and 1 s, got -1$" -- "$bin" explore samples/gpt.shard --profile "$tmp/neg.json"
printf '{"shardc_profile": 1, "launch_s": 1e999}' >"$tmp/inf.json"
expect profile-inf 1 'line 1, column 35 \(byte offset 34\): the number 1e999 is out of range \(in "launch_s"\)$' -- "$bin" compile samples/gpt.shard --profile "$tmp/inf.json"
printf '{"shardc_profile": 1, "gemm": [[1, 1e-300]]}' >"$tmp/tiny.json"
expect profile-tiny-rate 1 'gemm: point 1: the rate must be between 1000 and 1e\+18 FLOP/s, got 1e-300$' -- "$bin" build samples/gpt.shard --strategy auto --profile "$tmp/tiny.json" -o "$tmp/tinyb"
printf '{"shardc_profile": 1, "np": 1e20, "launch_s": 1e-6}' >"$tmp/np.json"
expect profile-np 1 'np must be a whole number from 1 to 1048576, got 1e20$' -- "$bin" explore samples/gpt.shard --profile "$tmp/np.json"
printf '{"shardc_profile": 1}' >"$tmp/nothing.json"
expect profile-nothing 1 'the profile holds no measurements' -- "$bin" explore samples/gpt.shard --profile "$tmp/nothing.json"
printf '{"shardc_profile": 1, "eigh_flops": 0}' >"$tmp/eigh0.json"
expect profile-eigh 1 'eigh_flops must be between 1e\+06 and 1e\+15 FLOP/s, got 0$' -- "$bin" explore samples/gpt.shard --profile "$tmp/eigh0.json"
{ printf '{"shardc_profile": 1, "x": '; head -c 50000 /dev/zero | tr '\0' '['; head -c 50000 /dev/zero | tr '\0' ']'; printf '}'; } >"$tmp/deep.json"
expect profile-deep 1 'deep.json: line 1, column 91 \(byte offset 90\): arrays and objects nested too deep \(limit is 64\)$' -- "$bin" explore samples/gpt.shard --profile "$tmp/deep.json"
mkfifo "$tmp/prof.fifo"
EXPECT_TIMEOUT=10 expect profile-fifo 1 'prof.fifo: cannot open it: not a regular file \(a pipe\)$' -- "$bin" explore samples/gpt.shard --profile "$tmp/prof.fifo"
EXPECT_TIMEOUT=10 expect profile-fifo-compile 1 'cannot open it: not a regular file \(a pipe\)$' -- "$bin" compile samples/gpt.shard --profile "$tmp/prof.fifo"
expect profile-missing-errno 1 '^shardc: error: --profile /nonexistent.json: cannot open it: No such file or directory$' -- "$bin" compile samples/gpt.shard --profile /nonexistent.json
expect profile-dir 1 'cannot open it: Is a directory$' -- "$bin" explore samples/gpt.shard --profile "$tmp"
expect profile-dev-zero 1 'cannot open it: not a regular file \(a character device\)$' -- "$bin" explore samples/gpt.shard --profile /dev/zero
# (build, --emit=program|ir|c and --dump-after price nothing, and read it all the same)
expect profile-build-missing 1 'profile /nonexistent.json: cannot open it: No such file or directory$' -- "$bin" build samples/gpt.shard --profile /nonexistent.json -o "$tmp/pbuild"
if [ -e "$tmp/pbuild" ]; then echo "FAIL: profile-build-missing: built $tmp/pbuild"; fail=$((fail + 1)); fi
expect profile-emit-c 1 'gpt.shard: line 1, column 1 \(byte offset 0\): expected .\{., found' -- "$bin" compile samples/gpt.shard --emit=c --profile samples/gpt.shard
expect profile-emit-ir 1 'neg.json: line 2, column 14' -- "$bin" compile samples/gpt.shard --emit=ir --profile "$tmp/neg.json"
expect profile-emit-program 1 'neg.json: line 2, column 14' -- "$bin" compile samples/gpt.shard --emit=program --profile "$tmp/neg.json"
expect profile-dump-after 1 'neg.json: line 2, column 14' -- "$bin" compile samples/gpt.shard --dump-after=shard --profile "$tmp/neg.json"
# a profile of another kind of machine: a warning naming both, the plans priced all the same
printf '{"shardc_profile": 1, "device": "cpu", "np": 2, "launch_s": 2e-06, "gemm": [[1e6, 5e10], [1e9, 1e11]], "bw": [[1e6, 1e10]]}\n' >"$tmp/cpuprof.json"
expect profile-cpu-on-gpu 0 '^shardc: warning: --profile .*cpuprof.json was measured on "cpu" \(a CPU\), but mesh .2x8:H100_SXM. has H100_SXM devices \(GPUs\)' -- "$bin" explore samples/gpt.shard --mesh 2x8:H100_SXM --top 1 --profile "$tmp/cpuprof.json"
expect profile-gpu-on-cpu 0 'measured on "NVIDIA H200" \(a GPU\), but mesh .laptop. has cpu devices \(CPUs\)' -- "$bin" compile samples/gpt.shard --profile bench/results/profile-h200-2026-12-04.json
out=$("$bin" compile samples/gpt.shard --profile "$tmp/cpuprof.json" 2>&1)
if [ $? = 0 ] && ! grep -q warning <<<"$out"; then pass=$((pass + 1)); else
  echo "FAIL: profile-cpu-on-cpu: a warning or an error"; echo "$out" | head -5; fail=$((fail + 1)); fi
# write errors: the report, the standard output; a report that fails leaves the old one whole
expect report-full 1 '^shardc: error: cannot write /dev/full: No space left on device$' -- "$bin" explore samples/gpt.shard --report /dev/full
expect explore-stdout-full 1 '^shardc: error: cannot write the standard output: No space left on device$' -- sh -c '"$1" explore samples/gpt.shard >/dev/full' sh "$bin"
expect emit-c-stdout-full 1 'cannot write the standard output: No space left on device$' -- sh -c '"$1" compile samples/gpt.shard --emit=c >/dev/full' sh "$bin"
expect report-nodir 1 '^shardc: error: cannot write /nonexistent/r.html: No such file or directory$' -- "$bin" explore samples/gpt.shard --report /nonexistent/r.html
mkfifo "$tmp/report.fifo"
EXPECT_TIMEOUT=10 expect report-fifo 1 'cannot write .*report.fifo: a pipe that no process reads$' -- "$bin" explore samples/gpt.shard --report "$tmp/report.fifo"
expect report-stdout 0 '^<!DOCTYPE html>' -- "$bin" explore samples/gpt.shard --top 1 --report /dev/stdout
# a report cut short (a file size limit: EFBIG) leaves the previous one whole and no temporary
expect report-good 0 'plans evaluated' -- "$bin" explore samples/gpt.shard --report "$tmp/keep.html"
cp "$tmp/keep.html" "$tmp/keep.orig"
expect report-cut 1 'cannot write .*keep.html: File too large$' -- bash -c 'trap "" XFSZ; ulimit -f 4; exec "$1" explore samples/gpt.shard --top 3 --report "$2"' sh "$bin" "$tmp/keep.html"
if cmp -s "$tmp/keep.html" "$tmp/keep.orig" && [ -z "$(ls "$tmp" | grep 'keep.html.')" ]; then pass=$((pass + 1)); else
  echo "FAIL: report-cut-keeps: the old report changed or a temporary is left"; fail=$((fail + 1)); fi
# calibrate: the output path checked before mpirun starts; a failed
# measurement leaves the old profile whole (a stand-in mpirun that
# truncates its output file and fails, as a crashed calibrator would)
if [ -x "$(dirname "$bin")/shardc-calib" ]; then
  expect calibrate-out-nodir 1 '^shardc: error: cannot write /nonexistent/dir/p.json: No such file or directory$' -- "$bin" calibrate --np 1 -o /nonexistent/dir/p.json
  expect calibrate-out-dir 1 "^shardc: error: cannot write $tmp: Is a directory$" -- "$bin" calibrate --np 1 -o "$tmp"
  mkdir -p "$tmp/fakempi"
  printf '#!/bin/sh\nfor a; do case "$a" in *.json*) : >"$a" ;; esac; done\nexit 1\n' >"$tmp/fakempi/mpirun"
  chmod +x "$tmp/fakempi/mpirun"
  cp "$tmp/cpuprof.json" "$tmp/keep.json"
  expect calibrate-fails-keeps 1 'the microbenchmarks failed \(mpirun exit 1\); .*keep.json is as it was$' -- env PATH="$tmp/fakempi:$PATH" "$bin" calibrate --np 1 -o "$tmp/keep.json"
  if cmp -s "$tmp/keep.json" "$tmp/cpuprof.json" && [ -z "$(ls "$tmp" | grep 'keep.json.')" ]; then pass=$((pass + 1)); else
    echo "FAIL: calibrate-fails-keeps: the old profile changed or a temporary is left"; fail=$((fail + 1)); fi
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
