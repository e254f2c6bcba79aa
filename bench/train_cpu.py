#!/usr/bin/python3
"""Step time and peak memory: shardc's generated CPU trainer vs the same GPT
in PyTorch (tests/parity/torch_ref.py's model), same threads, same run.

  bench/train_cpu.py TRAIN_BINARY INIT.safetensors JSONL_FROM_SHARDC ..."""
import json
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "parity"))
import torch  # noqa: E402
import torch_ref  # noqa: E402


def run_shardc(train, steps, threads, workdir):
    log = os.path.join(workdir, "shardc.jsonl")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    t0 = time.time()
    subprocess.run([train, "--steps", str(steps), "--log", log, "--quiet"], check=True, env=env,
                   cwd=workdir)
    wall = time.time() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    rows = [json.loads(l) for l in open(log)]
    return [r["step_ms"] for r in rows], rows, rss, wall


def run_torch(init, steps, threads, B, T, cfg):
    torch.set_num_threads(threads)
    params = {k: v.float().requires_grad_(True) for k, v in torch_ref.read_safetensors(init).items()
              if not k.startswith("optimizer.")}
    decay = [v for k, v in sorted(params.items()) if v.dim() >= 2]
    nodecay = [v for k, v in sorted(params.items()) if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(0)
    times = []
    for _ in range(steps):
        x = torch.randint(0, 256, (B, T + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch_ref.gpt(params, cfg, x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return times, rss


def main():
    train, init, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
    steps, threads, B, T = 8, int(os.environ.get("THREADS", "2")), 4, 256
    cfg = {"layers": 8, "heads": 8}
    s_ms, rows, s_rss, _ = run_shardc(train, steps, threads, workdir)
    t_ms, t_rss = run_torch(init, steps, threads, B, T, cfg)
    skip = 2  # warm-up steps
    s_med, t_med = statistics.median(s_ms[skip:]), statistics.median(t_ms[skip:])
    tok = B * T
    print(f"GPT d=512 L=8 H=8 T={T} B={B} vocab=256, fp32, {threads} threads, "
          f"median of steps {skip + 1}..{steps}")
    print(f"{'':10} {'step ms':>10} {'tokens/s':>10} {'peak RSS MiB':>14}")
    print(f"{'shardc':10} {s_med:10.1f} {tok / s_med * 1e3:10.0f} {s_rss:14.1f}")
    print(f"{'pytorch':10} {t_med:10.1f} {tok / t_med * 1e3:10.0f} {t_rss:14.1f}")
    print(f"{'ratio':10} {s_med / t_med:10.2f} {'':>10} {s_rss / t_rss:14.2f}   (shardc / pytorch; < 1 is better)")


if __name__ == "__main__":
    main()
