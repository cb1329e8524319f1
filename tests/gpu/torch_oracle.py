"""PyTorch oracle for netc's ResNet and LLaMA samples (issue 24).

  python3 tests/gpu/torch_oracle.py [--steps N] [--models resnet,llama] [--keep DIR]

For each model: builds the sample stand-alone in f64 (build/netc build
... --precision f64) at small sizes, lets the program write its initial
parameters (--steps 0 --save), writes a dataset of N batches as .npy
files, trains N steps from those parameters on that data (--init, --data,
--log, --save), then runs the same architecture in PyTorch (f64, eager,
written here from the samples' text: no netc code) from the same
parameters on the same batches and compares
  - each step's loss: netc's log prints an f64 program's loss with 17
    significant digits (its exact value), so |netc - torch| <= 1e-12 |torch|
    as for the parameters (9 digits and 1e-8 before);
  - every parameter after N steps: max |netc - torch| over the tensor
    <= 1e-12 x max |torch| (issue 24: f64 <= 1e-12 relative).
resnet: samples/resnet.net at WIDTH 4, B 8, BLOCKS 2 (every kind of
block: stem, basic blocks, strided blocks with 1x1 projections), batch
norm on the batch's statistics (biased variance, eps 1e-5), SGD momentum
0.9 as MindSpore's (m = 0.9 m + g, p -= lr m), lr 0.05.
llama: samples/llama.net at its sizes (B 8, T 16, D 32, 4 heads, SwiGLU
64, vocabulary 64, 2 layers), one stage, one micro-batch: RMS norm (eps
1e-6), RoPE (torch's rotate_half pairs, base 10000), causal attention
scaled 1/sqrt(head width), AdamW without bias correction (MindSpore's
AdamWeightDecay, docs/language.md), lr 3e-3, betas 0.9 / 0.95, eps 1e-8,
weight decay 0.01 on every parameter; and again with 2 key/value heads
(grouped-query attention: each serves 2 query heads).
Each model also runs a control: the parameters of a torch run with the
learning rate 1e-8 off must differ by more than 1e-12.

Without PyTorch it prints "SKIP torch_oracle: ..." and exits 0 (here, where
torch is not installed: tests/e2e/test_conv.sh checks that line); on the GPU
machine tests/gpu/remote.sh runs it. Prints one line per check,
"ok|FAIL MODEL: ...", and last "N passed, N failed"; exit 1 on a failure.
Needs build/netc and a C compiler (the CPU target); uses the .gpu-deps
libraries where tests/gpu/remote.sh unpacked them.
"""
import argparse
import array
import csv
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


# ---- files netc reads and writes, without numpy or safetensors ---------------------------
def write_npy(path, shape, values, code):
    """values: a flat list; code 'd' (<f8) or 'i' (<i4)"""
    descr = {"d": "<f8", "i": "<i4"}[code]
    dims = "".join("%d, " % d for d in shape)
    head = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode("latin1"))
        f.write(array.array(code, values).tobytes())


def read_safetensors(path):
    """{name: (shape, flat list of floats)} of its F64 tensors"""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__" or t["dtype"] != "F64":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["shape"], array.array("d", blob[8 + n + a:8 + n + b]).tolist())
    return out


def read_losses(path):
    with open(path) as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


# ---- the netc side ---------------------------------------------------------------------------
def deps_env():
    """tests/gpu/remote.sh's unpacked libraries (.gpu-deps), as tests/bench/gpu_bench.sh sets them"""
    env = dict(os.environ)
    d = os.path.join(ROOT, ".gpu-deps", "root")
    if os.path.isdir(d):
        lib = os.path.join(d, "usr", "lib", "x86_64-linux-gnu")
        env["PATH"] = os.path.join(d, "usr", "bin") + ":" + env.get("PATH", "")
        env["OPAL_PREFIX"] = os.path.join(d, "usr")
        env["OPAL_SYSCONFDIR"] = os.path.join(d, "etc", "openmpi")
        libs = [lib, lib + "/openmpi/lib", lib + "/openblas-pthread"]
        env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")])
        env["LIBRARY_PATH"] = ":".join(libs[1:] + [lib, env.get("LIBRARY_PATH", "")])
        env["OMPI_MCA_mca_base_component_show_load_errors"] = "0"
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def run(cmd, env):
    p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:]))


def netc_train(work, tag, net, defines, data, steps, env):
    """builds NET stand-alone in f64, saves its initial parameters, trains
    STEPS on DATA (a list of (name, shape, values, code)) from them;
    returns (initial parameters, final parameters, losses)"""
    prog = os.path.join(work, tag)
    cmd = [os.path.join(ROOT, "build", "netc"), "build", net, "--precision", "f64", "-o", prog]
    for d in ["parallel_mode=stand_alone"] + defines:
        cmd += ["-D", d]
    run(cmd, env)
    init = prog + ".init.st"
    run([prog, "--steps", "0", "--save", init, "--quiet"], env)
    files = []
    for name, shape, values, code in data:
        files.append(os.path.join(work, "%s.%s.npy" % (tag, name)))
        write_npy(files[-1], shape, values, code)
    run([prog, "--init", init, "--steps", str(steps), "--data", ",".join(files), "--log", prog + ".csv",
         "--save", prog + ".st", "--quiet"], env)
    return read_safetensors(init), read_safetensors(prog + ".st"), read_losses(prog + ".csv")


# ---- the PyTorch side ---------------------------------------------------------------------------
def resnet_loss(torch, F, P, x, y, blocks):
    def convbn(h, name, stride, pad):
        h = F.conv2d(h, P[name + ".w"], stride=stride, padding=pad)
        return F.batch_norm(h, None, None, P[name + ".gamma"], P[name + ".beta"], training=True, eps=1e-5)

    def basic(h, name):
        a = F.relu(convbn(h, name + ".conv1", 1, 1))
        return F.relu(convbn(a, name + ".conv2", 1, 1) + h)

    def down(h, name):
        a = F.relu(convbn(h, name + ".conv1", 2, 1))
        return F.relu(convbn(a, name + ".conv2", 1, 1) + convbn(h, name + ".shortcut", 2, 0))

    h = F.conv2d(x, P["stem_w"], padding=1)
    h = F.relu(F.batch_norm(h, None, None, P["stem_gamma"], P["stem_beta"], training=True, eps=1e-5))
    for i in range(blocks):
        h = basic(h, "layer1.%d" % i)
    for s in (2, 3, 4):
        h = down(h, "layer%d_down" % s)
        for i in range(blocks - 1):
            h = basic(h, "layer%d.%d" % (s, i))
    logits = h.mean(dim=(2, 3)) @ P["fc_w"] + P["fc_b"]
    return F.cross_entropy(logits, y.long())


def rms_norm(torch, x, g, eps=1e-6):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * g


def rope(torch, x, base=10000.0):
    """x [b, heads, t, d]: pairs (i, i + d/2) turned by t * base^(-2i/d)"""
    t, d = x.shape[2], x.shape[3]
    i = torch.arange(d // 2, dtype=torch.float64)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * torch.pow(torch.tensor(base, dtype=torch.float64), -2.0 * i / d)
    c, s = torch.cos(ang), torch.sin(ang)
    u, w = x[..., : d // 2], x[..., d // 2:]
    return torch.cat((u * c - w * s, u * s + w * c), dim=-1)


def llama_loss(torch, F, P, tokens, labels, a):
    b, t, d, heads, kvh = a["B"], a["T"], a["D"], a["H"], a["KVH"]
    hd = d // heads
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    h = F.embedding(tokens.long(), P["tok_emb"]).reshape(b * t, d)
    for l in range(a["L"]):
        p = "layers.%d." % l
        x = rms_norm(torch, h, P[p + "n1"])
        q = (x @ P[p + "attn.wq"]).reshape(b, t, heads, hd).transpose(1, 2)
        k = (x @ P[p + "attn.wk"]).reshape(b, t, kvh, hd).transpose(1, 2)
        v = (x @ P[p + "attn.wv"]).reshape(b, t, kvh, hd).transpose(1, 2)
        q, k = rope(torch, q), rope(torch, k)
        k, v = (z.repeat_interleave(heads // kvh, dim=1) for z in (k, v))
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        o = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
        h = h + o.transpose(1, 2).reshape(b * t, heads * hd) @ P[p + "attn.wo"]
        x = rms_norm(torch, h, P[p + "n2"])
        h = h + (F.silu(x @ P[p + "mlp.w1"]) * (x @ P[p + "mlp.w3"])) @ P[p + "mlp.w2"]
    logits = rms_norm(torch, h, P["norm_f"]) @ P["w_out"]
    return F.cross_entropy(logits, labels.reshape(-1).long())


def momentum(torch, P, state, lr=0.05, mu=0.9, scale=1.0):
    lr *= scale
    with torch.no_grad():
        for n, p in P.items():
            m = state.setdefault(n, torch.zeros_like(p))
            m.mul_(mu).add_(p.grad)
            p.sub_(lr * m)


def adamw(torch, P, state, lr=3e-3, b1=0.9, b2=0.95, eps=1e-8, wd=0.01, scale=1.0):
    lr *= scale
    with torch.no_grad():
        for n, p in P.items():
            m, v = state.setdefault(n, (torch.zeros_like(p), torch.zeros_like(p)))
            m.mul_(b1).add_((1 - b1) * p.grad)
            v.mul_(b2).add_((1 - b2) * p.grad * p.grad)
            p.sub_(lr * (m / (torch.sqrt(v) + eps) + wd * p))


def torch_train(torch, init, batches, loss_fn, update):
    P = {n: torch.tensor(vals, dtype=torch.float64).reshape(shape).requires_grad_()
         for n, (shape, vals) in init.items() if not n.startswith(("moments.", "moment1.", "moment2."))}
    state, losses = {}, []
    for batch in batches:
        for p in P.values():
            p.grad = None
        loss = loss_fn(P, *batch)
        loss.backward()
        losses.append(loss.item())
        update(torch, P, state)
    return P, losses


# ---- comparison ---------------------------------------------------------------------------------
class Report:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, line):
        print(("ok   " if ok else "FAIL ") + line)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def worst_param(torch, final, P):
    """the largest max|netc - torch| / max|torch| over the tensors, its name"""
    worst_rel, worst_name = 0.0, "-"
    for n, p in P.items():
        if n in final:
            got = torch.tensor(final[n][1], dtype=torch.float64).reshape(p.shape)
            scale = p.detach().abs().max().item() or 1.0
            rel = (got - p.detach()).abs().max().item() / scale
            if rel >= worst_rel:
                worst_rel, worst_name = rel, n
    return worst_rel, worst_name


def compare(rep, torch, model, got_losses, want_losses, final, P):
    worst = max(abs(g - w) / abs(w) for g, w in zip(got_losses, want_losses)) if want_losses else math.inf
    rep.check(len(got_losses) == len(want_losses) and worst <= 1e-12,
              "%s: %d losses (netc %s, torch %s), worst relative difference %.2e (<= 1e-12; the log's 17 digits)"
              % (model, len(want_losses), "%.17g" % got_losses[-1] if got_losses else "-", "%.17g" % want_losses[-1],
                 worst))
    missing = [n for n in P if n not in final]
    worst_rel, worst_name = worst_param(torch, final, P)
    rep.check(not missing and worst_rel <= 1e-12,
              "%s: %d parameters after %d steps, worst max|netc - torch| / max|torch| %.2e (%s; <= 1e-12)%s"
              % (model, len(P), len(want_losses), worst_rel, worst_name,
                 ", missing from netc's checkpoint: " + " ".join(missing) if missing else ""))


def control(rep, torch, model, init, batches, loss_fn, update, final):
    """the same comparison against a torch run whose learning rate is
    1e-8 off must fail: the tolerance is tight enough to see it"""
    P, _ = torch_train(torch, init, batches, loss_fn, lambda t, P, st: update(t, P, st, scale=1 + 1e-8))
    rel, _ = worst_param(torch, final, P)
    rep.check(rel > 1e-12, "%s: control: against torch with lr x (1 + 1e-8) the parameters differ by %.2e (> 1e-12: "
              "the comparison can fail)" % (model, rel))


def gen(torch, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def oracle_resnet(rep, torch, F, work, steps, env):
    B, W, BLOCKS = 8, 4, 2
    g = gen(torch, 24)
    x = torch.randn(steps * B, 3, 32, 32, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (steps * B,), generator=g, dtype=torch.int32)
    init, final, losses = netc_train(work, "resnet", "samples/resnet.net", ["WIDTH=%d" % W, "B=%d" % B, "BLOCKS=%d" % BLOCKS],
                                     [("images", list(x.shape), x.flatten().tolist(), "d"),
                                      ("labels", list(y.shape), y.flatten().tolist(), "i")], steps, env)
    batches = [(x[s * B:(s + 1) * B], y[s * B:(s + 1) * B]) for s in range(steps)]
    loss = lambda P, xb, yb: resnet_loss(torch, F, P, xb, yb, BLOCKS)
    P, want = torch_train(torch, init, batches, loss, momentum)
    name = "resnet (width %d, batch %d, %d blocks a stage)" % (W, B, BLOCKS)
    compare(rep, torch, name, losses, want, final, P)
    control(rep, torch, name, init, batches, loss, momentum, final)


def oracle_llama(rep, torch, F, work, steps, env, kvh=4):
    a = {"B": 8, "T": 16, "D": 32, "H": 4, "KVH": kvh, "V": 64, "L": 2}
    g = gen(torch, 25)
    tok = torch.randint(0, a["V"], (steps * a["B"], a["T"] + 1), generator=g, dtype=torch.int32)
    x, y = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    init, final, losses = netc_train(work, "llama%d" % kvh, "samples/llama.net",
                                     ["PP=1", "pipeline_stages=1", "train.micro_size=1", "KVH=%d" % kvh],
                                     [("tokens", list(x.shape), x.flatten().tolist(), "i"),
                                      ("labels", list(y.shape), y.flatten().tolist(), "i")], steps, env)
    batches = [(x[s * a["B"]:(s + 1) * a["B"]], y[s * a["B"]:(s + 1) * a["B"]]) for s in range(steps)]
    loss = lambda P, tb, lb: llama_loss(torch, F, P, tb, lb, a)
    P, want = torch_train(torch, init, batches, loss, adamw)
    name = "llama (d 32, 4 heads, %s, 2 layers)" % ("%d key/value heads" % kvh if kvh < 4 else "multi-head")
    compare(rep, torch, name, losses, want, final, P)
    control(rep, torch, name, init, batches, loss, adamw, final)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--models", default="resnet,llama,llama_gqa")
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print("SKIP torch_oracle: no PyTorch here (%s); tests/gpu/remote.sh runs it on the GPU machine" % e)
        return 0
    torch.set_num_threads(1)
    work = a.keep or tempfile.mkdtemp(prefix="netc-oracle-")
    os.makedirs(work, exist_ok=True)
    rep, env = Report(), deps_env()
    print("torch_oracle: PyTorch %s, f64, %d steps, work in %s" % (torch.__version__, a.steps, work))
    for m in a.models.split(","):
        try:
            models = {"resnet": oracle_resnet, "llama": oracle_llama,
                      "llama_gqa": lambda *x: oracle_llama(*x, kvh=2)}
            models[m](rep, torch, F, work, a.steps, env)
        except (RuntimeError, KeyError, OSError) as e:
            rep.check(False, "%s: %s" % (m, e))
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (rep.passed, rep.failed))
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
