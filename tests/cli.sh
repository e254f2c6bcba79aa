#!/usr/bin/env bash
# Driver tests: subcommands, flags, exit codes and messages.
#   tests/cli.sh SHARDC
set -uo pipefail
bin="$1"
cd "$(dirname "$0")/.."
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NAME EXIT PATTERN -- command...   (PATTERN is an extended regex on stdout+stderr)
expect() {
  local name="$1" want="$2" pat="$3"
  shift 4
  local out rc
  out=$(timeout 20 "$@" 2>&1)
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
expect directory 1 "cannot open 'samples'|is a directory" -- "$bin" check samples
printf 'const a = 1\0junk' >"$tmp/nul.shard"
expect nul-byte 1 'contains a NUL byte' -- "$bin" check "$tmp/nul.shard"
: >"$tmp/empty.shard"
expect empty-check 0 '' -- "$bin" check "$tmp/empty.shard"
expect empty-compile 1 'declares no model' -- "$bin" compile "$tmp/empty.shard"
expect emit-bad 1 '--emit must be ir, program, plan or c' -- "$bin" compile samples/gpt.shard --emit=asm
expect emit-c 0 '^/\* model.c — training program for model .gpt.' -- "$bin" compile samples/gpt.shard --emit=c
expect emit-c-cuda 1 '--target cuda: code for this target is not generated yet' -- "$bin" compile samples/gpt.shard --emit=c --target cuda
# Every command refuses the target the same way, the plan included.
expect plan-cuda 1 '--target cuda: code for this target is not generated yet' -- "$bin" compile samples/gpt.shard --target cuda
expect check-cuda 1 '--target cuda: code for this target is not generated yet' -- "$bin" check samples/gpt.shard --target cuda
expect check-cpu 0 '' -- "$bin" check samples/gpt.shard --target cpu
expect target-bad 1 "--target must be cpu or cuda, got 'tpu'" -- "$bin" check samples/gpt.shard --target tpu
# The communication check (passes/commpass.c): a broken per-rank program
# (SHARDC_DEBUG_BREAK_COMM) is a compile error naming ranks and ops.
expect commcheck-ok 0 '^comm: ' -- "$bin" compile samples/gpt.shard --strategy tp=2,dp=2 --emit=plan
expect commcheck-drop 1 'communication check failed .*communicator 1 \(ranks 2,3\): rank 2 issues all_reduce .* but rank 3 issues' -- env SHARDC_DEBUG_BREAK_COMM=drop:3:0 "$bin" compile samples/gpt.shard --strategy tp=2,dp=2 --emit=plan
expect commcheck-bytes 1 'communication check failed .*rank 2 issues all_reduce of 262144 bytes .* but rank 3 issues all_reduce of 131072 bytes' -- env SHARDC_DEBUG_BREAK_COMM=bytes:2:5 "$bin" compile samples/gpt.shard --strategy tp=2,dp=2 --emit=plan
# (event 7 of dp=4: the loss sum, after the 7 gradient buckets' all-reduces)
expect commcheck-hang 1 'communication check failed .*(deadlock|blocked|waits)' -- env SHARDC_DEBUG_BREAK_COMM=drop:0:7 "$bin" compile samples/gpt.shard --strategy dp=4 --emit=plan
expect commcheck-spec 1 'SHARDC_DEBUG_BREAK_COMM' -- env SHARDC_DEBUG_BREAK_COMM=frob:1 "$bin" compile samples/gpt.shard --strategy dp=4 --emit=plan
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
expect commcheck-pp-order 1 'send/recv mismatch in the 1st message from rank 1 to rank 0: rank 1 sends 131072 bytes with tag 5 \(gradient of microbatch 2 to stage 0: instruction bwd.30\) but rank 0 receives 131072 bytes with tag 1 \(gradient of microbatch 1 from stage 1: instruction bwd.0\)' -- env SHARDC_DEBUG_BREAK_COMM=drop:1:1 "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2,schedule=1f1b
expect commcheck-pp-bytes 1 'rank 0 sends 262144 bytes with tag 0 \(activation of microbatch 1 to stage 1: instruction fwd.37\) but rank 1 receives 131072 bytes' -- env SHARDC_DEBUG_BREAK_COMM=bytes:0:0 "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2
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
expect plan-tp2d 0 '^comm: .*\(dp 849,408, tp-row 5,840,896, tp-col 5,031,424\)' -- "$bin" compile samples/gpt.shard --mesh 8 --emit=plan --strategy tp2d=2x2,dp=2
expect commcheck-tp2d 1 'communication check failed .*communicator 15 \(ranks 2,3\): rank 2 issues broadcast of 32768 bytes \(node 11 summa 2x2 \(blocks.0.attn\), forward of microbatch 1: instruction fwd.5\) but rank 3 issues broadcast of 16384 bytes' -- env SHARDC_DEBUG_BREAK_COMM=bytes:2:2 "$bin" compile samples/gpt.shard --strategy tp2d=2x2 --emit=plan
expect tp2d-tied-bias 0 'param @linear.bias : f32\[128\] init=zeros split\(0 over tp-col\)' -- "$bin" compile tests/dist/tiedbias.shard --mesh 4 --strategy tp2d=2x2 --emit=ir
expect tp2d-pp 0 '^stage 1:  blocks.2 .. blocks.3, model ops' -- "$bin" compile samples/gpt.shard --mesh 8 --strategy tp2d=2x2,pp=2
expect tp2d-ring 1 'strategy tp2d=2x2 with sp \(the grid already splits the rows\) is not implemented yet' -- "$bin" compile samples/gpt.shard --mesh 8 --emit=c --strategy tp2d=2x2,sp=ring:2
expect tp2d-dropout 1 '2D tensor parallelism \(tp2d=2x2\): dropout is not implemented yet' -- "$bin" compile "$tmp/dropout.shard" --mesh 4 --strategy tp2d=2x2 --emit=c
sed 's/batch = 16, seq = ctx, microbatch = 4/batch = 12, seq = ctx, microbatch = 3/' samples/gpt.shard >"$tmp/mb3.shard"
expect tp2d-microbatch 1 '2D tensor parallelism \(tp2d=2x2\): a microbatch of 3 rows cannot be split over the 2 grid rows' -- "$bin" compile "$tmp/mb3.shard" --mesh 4 --strategy tp2d=2x2 --emit=c
expect tp2d-kv-heads 1 'attention: key/value heads 2 cannot be split over tp2d=4' -- "$bin" compile samples/llama.shard --mesh 16 --strategy tp2d=4x4 --emit=c
expect emit-c-fp64-zero 1 'fp64 builds are for single-rank gradient checks; build with --mesh 1 --strategy dp=1' -- "$bin" compile samples/gpt.shard --emit=c --strategy dp=4,zero=2 --precision=fp64
expect tp2d-zero 0 '\{RT_STEP_ALLREDUCE, RT_AX_TPC, 0, [0-9]+, [0-9]+, 0.0\},  // gradient shard of bucket' -- "$bin" compile samples/gpt.shard --mesh 8 --emit=c --strategy tp2d=2x2,dp=2,zero=2
expect emit-c-fp64-tp 1 'fp64 builds are for single-rank gradient checks; build with --mesh 1 --strategy dp=1' -- "$bin" compile samples/gpt.shard --emit=c --strategy tp=4 --precision=fp64
expect emit-c-interleaved 0 'static void r1_backward_c1\(RtPass \*p\)' -- "$bin" compile samples/gpt.shard --emit=c --strategy pp=2,dp=2,schedule=interleaved:2
expect plan-interleaved 0 '^rank 0:   memory 22,790,144 bytes per rank .*persistent 7,000,064 \+ transient 1,310,720 \(the largest chunk.s\) \+ stash slots 14,479,360' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2,schedule=interleaved:2
expect commcheck-interleaved 1 'deadlock: 2 ranks can never finish: rank 0 waits at event 0 in recv of 131072 bytes with tag 2 from rank 1 \(activation of microbatch 1 from stage 1: instruction c1.fwd.1\)' -- env SHARDC_DEBUG_BREAK_COMM=swap:0:1,swap:0:0 "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2,schedule=interleaved:2
expect interleaved-sizes 1 'pp=2: 2 stage sizes for 4 stages \(interleaved chunks take no explicit sizes yet\)' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:2+2,schedule=interleaved:2
expect interleaved-too-deep 1 'pp=4 needs 8 pipeline stages but model gpt has only 5 places to cut it .*use fewer interleaved chunks or a smaller pp' -- "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=4,schedule=interleaved:2
expect interleaved-zero 1 'strategy zero=1 with schedule=interleaved \(ZeRO for pipeline chunks\) is not implemented yet' -- "$bin" compile samples/gpt.shard --emit=c --strategy pp=2,dp=2,schedule=interleaved:2,zero=1
expect pp-too-deep 1 'pp=8 needs 8 pipeline stages but model gpt has only 5 places to cut it \(between layers, where one activation crosses\); use pp=6 or less' -- "$bin" compile samples/gpt.shard --mesh 8 --strategy pp=8
expect plan-pp 0 '^stage 3:  blocks.3, model ops; 27.8% of the FLOPs' -- "$bin" compile samples/gpt.shard --mesh 4 --strategy pp=4,schedule=1f1b
expect plan-pp-layers 0 '^stage 0:  model ops, blocks.0 .. blocks.2; 72.2% of the FLOPs' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:3+1
expect pp-layers-sum 1 'pp=2: the stage sizes add up to 5 layers, but model gpt has 4' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:2+3
expect pp-layers-count 1 'pp=2:4 gives 1 stage size for 2 stages' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy pp=2:4
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
expect shampoo-tp 1 'strategy optimizer shampoo with tp \(blocks of sharded tensors\) is not implemented yet' -- "$bin" compile "$tmp/shampoo.shard" --strategy tp=4 --emit=c
expect shampoo-dp 0 'RT_STEP_OPT_GATHER, RT_AX_DP, 0, [0-9]+, [0-9]+, 0.0},  // Shampoo directions all-gathered over dp' -- "$bin" compile "$tmp/shampoo.shard" --strategy dp=4 --emit=c
expect shampoo-lpt 0 '^            data rank 3: [0-9]+ units, roots' -- "$bin" compile "$tmp/shampoo.shard" --strategy dp=4 --emit=plan
expect shampoo-pp-lpt 0 '^shampoo:  stage 1: [0-9]+ units .* over 2 data ranks' -- "$bin" compile "$tmp/shampoo.shard" --strategy pp=2,dp=2 --emit=plan
expect shampoo-gather 0 'step.[0-9]+ +all_gather over dp: [0-9]+ elements per rank at F\([0-9]+\)  \(Shampoo directions all-gathered over dp\)' -- "$bin" compile "$tmp/shampoo.shard" --strategy dp=4 --emit=program
expect shampoo-zero 1 'strategy optimizer shampoo with zero \(blocks of sharded tensors\) is not implemented yet' -- "$bin" compile "$tmp/shampoo.shard" --strategy dp=4,zero=1 --emit=c
expect emit-c-bf16 1 'precision bf16 is not implemented yet' -- "$bin" compile samples/gpt2-124m.shard --emit=c
expect target-bad 1 '--target must be cpu or cuda' -- "$bin" compile samples/gpt.shard --target=tpu
expect dump-bad 1 "unknown pass 'nope' for --dump-after \(passes: lower, shape, shard, pipeline, autodiff, zero, memplan, program, commcheck\)" -- "$bin" compile samples/gpt.shard --dump-after=nope
expect dump-lower 0 '^graph gpt \{' -- "$bin" compile samples/gpt.shard --dump-after=lower
expect list-passes 0 '^shape ' -- "$bin" compile --list-passes
expect mesh-missing-value 1 '--mesh needs a value' -- "$bin" check samples/gpt.shard --mesh
expect build-help 0 'usage: shardc build' -- "$bin" build --help
expect build-cuda 1 '--target cuda: code for this target is not generated yet' -- "$bin" build samples/gpt.shard --target cuda -o "$tmp/cuda"
expect build-pp 1 'strategy zero=1 with schedule=interleaved' -- "$bin" build samples/gpt.shard --strategy dp=2,pp=2,schedule=interleaved:2,zero=1 -o "$tmp/pp"
expect explore-unavailable 1 "'explore' is not available yet" -- "$bin" explore samples/gpt.shard

# The command line wins over the train block.
expect strategy-override 0 'strategy: dp=2,tp=2,mb=2 \(from --strategy\)' -- "$bin" compile samples/gpt.shard --strategy dp=2,tp=2
expect strategy-eq-form 0 'strategy: dp=1,tp=4,mb=4 \(from --strategy\)' -- "$bin" compile samples/gpt.shard --strategy=tp=4
expect strategy-dp-inferred 0 'strategy: dp=2,pp=2,schedule=gpipe' -- "$bin" compile samples/gpt.shard --strategy pp=2,schedule=gpipe
expect strategy-auto 0 'strategy: auto' -- "$bin" compile samples/gpt.shard --strategy auto
expect mesh-spec 0 'mesh:     2x4:H100_SXM = 8 x H100_SXM \(2 nodes x 4\)' -- "$bin" compile samples/gpt.shard --mesh 2x4:H100_SXM --strategy dp=2,tp=4
expect mesh-spec-count 0 'strategy: dp=2,mb=2 ' -- "$bin" compile samples/gpt.shard --mesh 2 --strategy dp=2
expect mesh-microbatch 1 'microbatch 4 does not divide the per-rank batch 2 \(batch 16 / dp 8\)' -- "$bin" check samples/gpt.shard --mesh 8 --strategy dp=8
expect mesh-vs-block-strategy 1 'strategy dp=4 uses 4 devices but the mesh has 8' -- "$bin" check samples/gpt.shard --mesh 8
expect mesh-bad 1 "--mesh 'zz' is neither a mesh declared in the file nor a size" -- "$bin" check samples/gpt.shard --mesh zz
expect mesh-bad-device 1 "unknown device 'TPUv4'" -- "$bin" check samples/gpt.shard --mesh 4:TPUv4
expect strategy-too-big 1 'uses 8 devices but the mesh has 4' -- "$bin" check samples/gpt.shard --strategy dp=2,tp=4
expect strategy-bad-key 1 "unknown strategy key 'tq'" -- "$bin" check samples/gpt.shard --strategy tq=2
expect strategy-tp-heads 1 'attention: heads 4 cannot be split over tp=8' -- "$bin" check samples/gpt.shard --mesh 8 --strategy tp=8
expect model-flag-bad 1 "--model 'nope' is not a model" -- "$bin" check samples/gpt.shard --model nope
expect warnings-quiet 0 '' -- "$bin" check samples/gpt.shard -w

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
