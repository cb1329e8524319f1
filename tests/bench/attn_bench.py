"""PyTorch's scaled_dot_product_attention on one GPU, the reference of
tests/bench/attn_bench.sh: forward and forward + backward of q, k, v
[b, heads, t, d] (default 8, 12, 1024, 64, causal) in each dtype given
(bf16, f32), the mean of 20 runs after 3, timed by CUDA events. Prints
"torch DTYPE fwd: X ms" and "torch DTYPE fwd+bwd: Y ms"."""
import sys

import torch
import torch.nn.functional as F


def bench(dtype, name, b, h, t, d, causal, iters=20, warm=3):
    q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    do = torch.randn(b, h, t, d, device="cuda", dtype=dtype)
    for bwd in (False, True):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(warm + iters):
            if i == warm:
                e0.record()
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if bwd:
                o.backward(do)
        e1.record()
        torch.cuda.synchronize()
        print(f"torch {name} {'fwd+bwd' if bwd else 'fwd'}: {e0.elapsed_time(e1) / iters:.3f} ms "
              f"(b {b}, heads {h}, t {t}, d {d}{', causal' if causal else ''})")


def main():
    b, h, t, d, causal = (int(x) for x in (sys.argv[1:6] + ["8", "12", "1024", "64", "1"][len(sys.argv[1:6]):]))
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        bench(dtype, name, b, h, t, d, bool(causal))


if __name__ == "__main__":
    main()
