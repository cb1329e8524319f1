"""The PyTorch eager twin of tests/bench/gpt2_small.net, for `make bench-gpu`.

Same model: 12 pre-norm layers, width 768, 12 heads, sequence 1024,
vocabulary 50304, tied embeddings, exact GELU, attention written out
(scores materialised, causal mask, softmax: what netc's program computes;
--sdpa uses PyTorch's fused attention instead), AdamW(lr 6e-4, betas
(0.9, 0.95), eps 1e-8, weight decay 0.1), batch 8, random tokens.

  python3 tests/bench/gpt2_torch.py --precision f32|tf32|bf16 [--steps N]
      [--warmup W] [--sdpa] [--compile] [--dims B,T,D,H,V,L]

--compile runs the model and loss through torch.compile (the first
steps, in the warm-up, compile it). --dims gives other sizes (the
benchmark's SMALL=1 smoke run). Prints one line:
  torch NAME: X ms/step, Y tokens/s (median of steps W+1..N, loss L)
where X is the median of the per-step times after W warm-up steps (each
step ends with torch.cuda.synchronize()). Benchmarks only: no test
depends on it.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, D, H, V, L = 8, 1024, 768, 12, 50304, 12


def set_dims(text):
    global B, T, D, H, V, L
    B, T, D, H, V, L = (int(x) for x in text.split(","))


class Attention(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.sdpa = sdpa
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x):
        b = x.shape[0]
        q, k, v = (f(x).view(b, T, H, D // H).transpose(1, 2) for f in (self.q, self.k, self.v))
        if self.sdpa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
            s = s.masked_fill(~self.mask, float("-inf"))
            o = F.softmax(s, dim=-1) @ v
        return self.o(o.transpose(1, 2).reshape(b, T, D))


class Layer(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attention(sdpa)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT2(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.01)
        self.layers = nn.ModuleList(Layer(sdpa) for _ in range(L))
        self.lnf = nn.LayerNorm(D)
        for p in self.parameters():
            if p.dim() == 2 and p is not self.pos:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens, labels):
        h = self.tok(tokens) + self.pos
        for layer in self.layers:
            h = layer(h)
        logits = self.lnf(h) @ self.tok.weight.t()      # tied
        return F.cross_entropy(logits.view(-1, V), labels.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", choices=["f32", "tf32", "bf16"], default="f32")
    ap.add_argument("--steps", type=int, default=13)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--sdpa", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--dims", help="B,T,D,H,V,L")
    a = ap.parse_args()
    if a.dims:
        set_dims(a.dims)
    torch.backends.cuda.matmul.allow_tf32 = a.precision != "f32"
    torch.backends.cudnn.allow_tf32 = a.precision != "f32"
    dev = torch.device("cuda")
    torch.manual_seed(1234)
    model = GPT2(a.sdpa).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    fwd = torch.compile(model) if a.compile else model
    tokens = torch.randint(0, V, (B, T), device=dev)
    labels = torch.randint(0, V, (B, T), device=dev)
    times = []
    for step in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = fwd(tokens, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    measured = sorted(times[a.warmup:]) or sorted(times)
    n = len(measured)
    med = measured[n // 2] if n % 2 else (measured[n // 2 - 1] + measured[n // 2]) / 2
    name = ("compile" if a.compile else "eager") + f" {a.precision}" + (" sdpa" if a.sdpa else "")
    print(f"torch {name}: {1000 * med:.1f} ms/step, {B * T / med:.0f} tokens/s"
          f" (median of steps {a.warmup + 1}..{a.steps}, loss {loss.item():.4f})")


if __name__ == "__main__":
    main()
