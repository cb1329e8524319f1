"""PyTorch eager twins of the models tests/bench/run.sh times (`make bench`).

  python3 tests/bench/torch_models.py mlp [--batch 128 --hidden 1024]
  python3 tests/bench/torch_models.py gpt [--batch 8 --seq 128 --width 256
                                           --heads 8 --vocab 2048 --layers 4]
  python3 tests/bench/torch_models.py resnet [--batch 128 --width 64]
  common: --steps N (default 40) --warmup W (default 10) --threads T (1)

mlp: samples/mlp.net at B, H: 784-H-H-10, bias + ReLU, softmax cross-
entropy, SGD momentum 0.9 (lr 0.05; PyTorch's momentum buffer is
MindSpore's: m = 0.9 m + g, p -= lr m). Each step draws its batch
(randn features, random labels), as netc's synthetic data does.
gpt: samples/transformer.net: token + position embeddings, pre-norm
layers of causal attention (q, k, v, o without bias, scores materialised,
scaled, masked, softmax) and a 4x GELU (exact) MLP with biases, final layer
norm, output projection without bias, cross-entropy; AdamW(lr 3e-4, betas
(0.9, 0.95), eps 1e-8, weight decay 0.01); random tokens each step.
resnet: samples/resnet.net: ResNet-18 for 32x32 images (3x3 stem without
max pool, basic blocks [2, 2, 2, 2] of width W, 2W, 4W, 8W, strided 1x1
projections, convs without bias, batch norm, global average pooling,
linear classifier), cross-entropy, SGD momentum 0.9 (lr 0.05); randn
images and random labels each step.

Prints two lines over the steps after the warm-up, each step timed whole
(data, forward, backward, update):
  STEP_MS median min max   wall time per step (time.perf_counter)
  CPU_MS mean              process CPU time per step (time.process_time)
Benchmarks only: no test depends on it.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.l1 = nn.Linear(784, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class Layer(nn.Module):
    def __init__(self, d, heads, t):
        super().__init__()
        self.d, self.h = d, heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).tril(), persistent=False)

    def attention(self, x, b, t):
        hd = self.d // self.h
        q, k, v = (f(x).view(b, t, self.h, hd).transpose(1, 2) for f in (self.q, self.k, self.v))
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        s = s.masked_fill(~self.mask, float("-inf"))
        o = F.softmax(s, dim=-1) @ v
        return self.o(o.transpose(1, 2).reshape(b * t, self.d))

    def forward(self, x, b, t):
        x = x + self.attention(self.ln1(x), b, t)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok = nn.Embedding(a.vocab, a.width)
        self.pos = nn.Parameter(torch.randn(a.seq, a.width) * 0.01)
        self.layers = nn.ModuleList(Layer(a.width, a.heads, a.seq) for _ in range(a.layers))
        self.lnf = nn.LayerNorm(a.width)
        self.out = nn.Linear(a.width, a.vocab, bias=False)

    def forward(self, tokens):
        b, t = tokens.shape
        h = (self.tok(tokens) + self.pos).reshape(b * t, -1)
        for layer in self.layers:
            h = layer(h, b, t)
        return self.out(self.lnf(h))


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(h + (x if self.short is None else self.short(x)))


class ResNet18(nn.Module):
    def __init__(self, width, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width))
        blocks, cin = [], width
        for i, stride in enumerate((1, 2, 2, 2)):
            cout = width << i
            blocks += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        h = self.blocks(F.relu(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["mlp", "gpt", "resnet"])
    ap.add_argument("--batch", type=int)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--width", type=int)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    if a.model == "mlp":
        b = a.batch or 128
        model = MLP(a.hidden)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def batch():
            return torch.randn(b, 784), torch.randint(0, 10, (b,))
    elif a.model == "resnet":
        b = a.batch or 128
        model = ResNet18(a.width or 64)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def batch():
            return torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,))
    else:
        b = a.batch or 8
        a.width = a.width or 256
        model = GPT(a)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.01)

        def batch():
            tok = torch.randint(0, a.vocab, (b, a.seq))
            return tok, torch.randint(0, a.vocab, (b * a.seq,))
    times = []
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            c0 = time.process_time()
        t0 = time.perf_counter()
        x, y = batch()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        if step >= a.warmup:
            times.append(t1 - t0)
    cpu = (time.process_time() - c0) / a.steps
    ms = [t * 1e3 for t in times]
    print("STEP_MS %.3f %.3f %.3f" % (statistics.median(ms), min(ms), max(ms)))
    print("CPU_MS %.3f" % (cpu * 1e3))


if __name__ == "__main__":
    main()
