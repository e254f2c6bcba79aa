#!/usr/bin/python3
"""PyTorch parity for one sample: shardc's trainer and the hand-written
PyTorch model of tests/parity/torch_ref.py start from the same safetensors
weights, train on the same batches with the same hyperparameters, and must
agree per step in loss (relative 1e-5) and at the end in weights (1e-4).

  parity.py SHARDC SAMPLE KIND WORKDIR [STEPS] [LR] [OPTIMIZER]

LR, when given, replaces the peak learning rate of the sample's optimizer
(in a copy of the file in WORKDIR): the tiny GPT's demo setting (3e-3) is in
an unstable regime (gradient-norm spikes at steps 10, 16, 19) that amplifies
float32 rounding differences to 2e-5 by step 19, though steps 1-14 agree to
1e-7; the parity test runs it at 1e-3 ("-" keeps the sample's).

OPTIMIZER, when given, replaces the sample's whole optimizer call (e.g.
"shampoo(lr = 1e-3, block = 64, start_preconditioning = 5)"): Shampoo and
Adafactor are checked against the reference optimizers of torch_ref.py.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_ref  # noqa: E402

LOSS_RTOL, WEIGHT_ATOL = 1e-5, 1e-4
# One rank: the whole global batch on one process, as microbatches.
ONE_RANK = ["--mesh", "1", "--strategy", "dp=1"]


def run(cmd, env=None):
    """cmd's output, captured (tests/pyserve.py runs this script in a server
    whose own stdout is not the caller's); its output and exit 1 when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        print(r.stdout + r.stderr)
        sys.exit(f"parity: {' '.join(cmd)}: exit status {r.returncode}")
    return r.stdout


def plan_of(shardc, sample):
    out = run([shardc, "compile", sample, "--emit=plan"] + ONE_RANK)
    info = {}
    m = re.search(r"^optim:\s+(\w+) (.*)$", out, re.M)
    info["optimizer"] = m.group(1)
    for k, v in re.findall(r"(\w+)=([^\s,()]+)", m.group(2)):
        info[k] = v
    b = re.search(r"betas=\(([^,]+), ([^)]+)\)", m.group(2))
    if b:
        info["beta1"], info["beta2"] = b.group(1), b.group(2)
    info["schedule"] = "constant" if " constant " in m.group(2) else "cosine"
    info["steps"] = re.search(r"^steps:\s+(\d+)", out, re.M).group(1)
    bm = re.search(r"microbatch (\d+) x (\d+) microbatch", out)
    info["micro"], info["mb"] = bm.group(1), bm.group(2)
    sq = re.search(r"; seq (\d+)", out)
    info["seq"] = sq.group(1) if sq else None
    return info


def main():
    shardc, sample, kind, work = sys.argv[1:5]
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    os.makedirs(work, exist_ok=True)
    if len(sys.argv) > 6:
        text = open(sample).read()
        n = 1
        if sys.argv[6] != "-":
            text, n = re.subn(r"(optimizer\s*=\s*\w+\(\s*lr\s*=\s*)[0-9.eE+-]+", r"\g<1>" + sys.argv[6], text)
        if len(sys.argv) > 7:
            text, n = re.subn(r"optimizer\s*=\s*\w+\((?:[^()]|\([^()]*\))*\)",
                              lambda _: "optimizer = " + sys.argv[7], text)
        if n != 1:
            sys.exit(f"parity: cannot find the optimizer's lr in {sample}")
        sample = os.path.join(work, os.path.basename(sample))
        with open(sample, "w") as f:
            f.write(text)
    p = plan_of(shardc, sample)
    out = os.path.join(work, "out")
    run([shardc, "build", sample, "-o", out] + ONE_RANK)
    train = os.path.join(out, "train")
    init = os.path.join(work, "init.safetensors")
    final = os.path.join(work, "final.safetensors")
    log = os.path.join(work, "log.jsonl")
    batches = os.path.join(work, "batches.i32")
    for f in (log, batches):
        if os.path.exists(f):
            os.remove(f)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    run([train, "--steps", "0", "--save", init, "--quiet"], env=env)
    run([train, "--steps", str(steps), "--log", log, "--save", final, "--quiet"],
        env=dict(env, SHARDC_DUMP_BATCHES=batches))
    ours = [json.loads(l)["loss"] for l in open(log)]

    cfg = {"gpt": {"layers": 4, "heads": 4}, "llama": {"layers": 4, "heads": 8, "kv_heads": 2},
           "mlp": {}}[kind]
    cm = re.search(r"cross_entropy\([^)]*classes\s*=\s*(\d+)", open(sample).read())
    if cm:  # cross_entropy(..., classes = N): a padded vocabulary
        cfg["classes"] = int(cm.group(1))
    shape = f"{p['micro']},{p['seq']}" if p["seq"] else p["micro"]
    ref_losses = os.path.join(work, "torch_losses.txt")
    ref_final = os.path.join(work, "torch_final.npz")
    args = ["--model", kind,
            "--config", json.dumps(cfg), "--init", init, "--batches", batches,
            "--input-shape", shape, "--steps", str(steps), "--mb", p["mb"],
            "--optimizer", p["optimizer"], "--lr", p["lr"], "--weight-decay", p["weight_decay"],
            "--warmup", p["warmup"], "--schedule", p["schedule"],
            "--min-lr-ratio", str(float(p["min_lr"]) / float(p["lr"])),
            "--total-steps", p["steps"], "--clip", p["clip"], "--losses", ref_losses,
            "--final", ref_final]
    if p["optimizer"] == "adamw":
        args += ["--beta1", p["beta1"], "--beta2", p["beta2"], "--eps", p["eps"]]
    elif p["optimizer"] == "shampoo":
        args += ["--beta1", p["beta1"], "--beta2", p["beta2"], "--eps", p["epsilon"],
                 "--block", p["block"], "--precondition-every", p["precondition_every"],
                 "--start-preconditioning", p["start_preconditioning"], "--graft", p["graft"],
                 "--root", p["root"], "--graft-eps", p["graft_eps"],
                 "--stagger", "1" if p.get("stagger", "true") == "true" else "0"]
    elif p["optimizer"] == "adafactor":
        args += ["--beta1", p["beta1"], "--eps", p["eps"], "--decay-rate", p["decay_rate"],
                 "--clip-threshold", p["clip_threshold"]]
    else:
        args += ["--momentum", p["momentum"]]
    if kind == "mlp":
        args += ["--input-float", "64"]
    # in this interpreter (torch imported once, not per run: 1.7 s), on one
    # thread as the program ran
    torch_ref.torch.set_num_threads(1)
    torch_ref.main(args)
    ref = [float(l) for l in open(ref_losses)]

    fails = 0
    print(f"{kind}: {'step':>4} {'shardc':>12} {'pytorch':>12} {'rel diff':>10}")
    for i, (a, b) in enumerate(zip(ours, ref)):
        rel = abs(a - b) / max(abs(b), 1e-12)
        flag = "" if rel <= LOSS_RTOL else "  <-- FAIL"
        fails += bool(flag)
        print(f"{kind}: {i + 1:4d} {a:12.7f} {b:12.7f} {rel:10.2e}{flag}")
    if len(ours) != steps or len(ref) != steps:
        print(f"{kind}: FAIL: {len(ours)} shardc steps, {len(ref)} PyTorch steps, expected {steps}")
        fails += 1
    w_ours = {k: v.float().numpy() for k, v in torch_ref.read_safetensors(final).items()}
    w_ref = dict(np.load(ref_final))
    worst, worst_name = 0.0, ""
    for name, b in w_ref.items():
        a = w_ours.get(name)
        if a is None or a.shape != b.shape:
            print(f"{kind}: FAIL: tensor {name} missing or of another shape in {final}")
            fails += 1
            continue
        d = float(np.max(np.abs(a - b))) if a.size else 0.0
        if d > worst:
            worst, worst_name = d, name
    wflag = "" if worst <= WEIGHT_ATOL else "  <-- FAIL"
    fails += bool(wflag)
    print(f"{kind}: final weights: max |shardc - pytorch| = {worst:.2e} ({worst_name}){wflag}")
    print(f"{kind}: {'PASS' if not fails else 'FAIL'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
