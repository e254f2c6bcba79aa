#!/usr/bin/env python3
"""att_torch.py — the peer of bench/att_cuda.cu: PyTorch's
scaled_dot_product_attention on the same shapes, in the same memory layout
(q, out (B,T,H,D) rows H*D apart, viewed as (B,H,T,D)), bf16, causal as
given, with each backend PyTorch offers on the GPU (FlashAttention-2, cuDNN,
memory-efficient), timed as att_cuda times ours: two warm-up calls, then
5 rounds of REPS calls between synchronisations, the median round.  The
backward is timed as forward + backward less the forward, gradients into
fresh leaf tensors (PyTorch writes them; ours accumulates: the same bytes
written).  FLOPs by FlashAttention's benchmark convention (att_cuda.cu).

Prints one line per shape and backend; a backend that refuses a shape
(grouped-query heads, head dim) prints why instead.  Needs a GPU and
PyTorch >= 2.3 (torch.nn.attention.sdpa_kernel); bench/gpu_check.sh runs
it as part of step 4c on the GPU machine, whose python3 has PyTorch.
"""
import statistics
import sys
import time
import warnings

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except Exception as e:  # noqa: BLE001 (any import failure: say why, exit 77)
    print(f"att_torch: PyTorch with torch.nn.attention is not here ({e})")
    sys.exit(77)

SHAPES = [  # as bench/att_cuda.cu
    ("gpt2", 16, 1024, 12, 12, 64, True),
    ("gpt2-nc", 16, 1024, 12, 12, 64, False),
    ("llama", 4, 2048, 32, 8, 128, True),
]
BACKENDS = [
    ("flash2", SDPBackend.FLASH_ATTENTION),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
    ("mem-eff", SDPBackend.EFFICIENT_ATTENTION),
]
REPS = 10
warnings.filterwarnings("ignore")  # a refused backend's warning: the line says why


def time_calls(f):
    for _ in range(2):
        f()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(REPS):
            f()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / REPS)
    return statistics.median(rounds)


def tensors(B, T, H, D, grad):
    # (B,T,H,D) storage viewed as (B,H,T,D): the programs' layout
    x = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    return x.detach().requires_grad_(grad)


def main():
    if not torch.cuda.is_available():
        print("att_torch: no GPU")
        return 77
    print(f"attention, PyTorch {torch.__version__} scaled_dot_product_attention on "
          f"{torch.cuda.get_device_name(0)}")
    print(f"{'shape':<8} {'backend':<8} {'B T H/Hkv D':<30} {'fwd ms':>10} {'TFLOP/s':>9} "
          f"{'bwd ms':>10} {'TFLOP/s':>9}")
    for name, B, T, H, Hkv, D, causal in SHAPES:
        f = 4.0 * B * H * T * T * D / (2 if causal else 1)
        dims = f"{B} {T} {H}/{Hkv} {D}" + (" causal" if causal else "")
        q, k, v = tensors(B, T, H, D, True), tensors(B, T, Hkv, D, True), tensors(B, T, Hkv, D, True)
        dout = tensors(B, T, H, D, False)
        gqa = {"enable_gqa": True} if Hkv != H else {}
        for bname, backend in BACKENDS:
            try:
                with sdpa_kernel(backend):
                    def fwd():
                        with torch.no_grad():
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)

                    def fwdbwd():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
                        q.grad = k.grad = v.grad = None
                        o.backward(dout)

                    tf = time_calls(fwd)
                    tfb = time_calls(fwdbwd)
                tb = max(tfb - tf, 1e-9)
                print(f"{name:<8} {bname:<8} {dims:<30} {tf * 1e3:>10.3f} {f / tf / 1e12:>9.1f} "
                      f"{tb * 1e3:>10.3f} {2.5 * f / tb / 1e12:>9.1f}")
            except Exception as e:  # noqa: BLE001 (a backend that refuses the shape)
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                print(f"{name:<8} {bname:<8} {dims:<30} not run: {msg[:90]}")
        del q, k, v, dout
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
