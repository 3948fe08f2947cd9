#!/usr/bin/python3
"""hodu.torch.compile against eager PyTorch on CPU, in one run, interleaved.

For each model: a training step (forward, cross-entropy, backward; the optimizer's step is
left out, being the same torch code on both sides) and an inference forward (torch.no_grad,
eval mode), of the compiled module and of eager PyTorch alternately, --rounds rounds of
--iters runs each; the median of each side's round medians is kept and the ratio
hodu / torch printed (targets: training <= 0.8, inference <= 0.7). Both sides use --threads
threads (torch.set_num_threads, hodu's kernels the same count). Absolute times on a shared
machine are noise; the ratio in one interleaved run is the figure.

"ops" among --models times each torch.ops.hodu op (the C++ extension's kernels, or whatever
hodu.torch.ops.backend() says) against torch's own function on one shape each: forward +
backward, and forward under torch.no_grad, interleaved the same way.

usage: PYTHONPATH=build/python /usr/bin/python3 bench/torch_bench.py [--threads 2] [--rounds 5]
           [--iters 10] [--models cnn transformer resnet18 ops] [--markdown FILE]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
import hodu.torch  # noqa: E402
from torch_models import CNN, Transformer  # noqa: E402


def make(name):
    """(module, input batch, labels) for a model name."""
    g = torch.Generator().manual_seed(0)
    if name == "cnn":
        return CNN(), torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 10, (64,), generator=g)
    if name == "transformer":
        return (Transformer(d=128, heads=4, ff=512, layers=2), torch.randint(0, 32, (32, 16), generator=g),
                torch.randint(0, 10, (32,), generator=g))
    if name == "resnet18":
        import torchvision
        return (torchvision.models.resnet18(num_classes=10), torch.randn(8, 3, 64, 64, generator=g),
                torch.randint(0, 10, (8,), generator=g))
    raise SystemExit(f"error: unknown model '{name}' (cnn, transformer, resnet18, ops)")


def timed(fn, iters):
    """Median milliseconds of `iters` calls."""
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def interleaved(hodu_fn, torch_fn, args):
    """The median of each side's round medians, the sides run alternately, after a warm-up
    (plans, oneDNN primitives, torch's allocator)."""
    sides = {"hodu": hodu_fn, "torch": torch_fn}
    for fn in sides.values():
        fn()
        fn()
    medians = {k: [] for k in sides}
    for _ in range(args.rounds):
        for k, fn in sides.items():
            medians[k].append(timed(fn, args.iters))
    return statistics.median(medians["hodu"]), statistics.median(medians["torch"])


def attention_torch(q, k, v, causal):
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def op_cases():
    """(name, shapes, torch.ops.hodu call, torch's call, input shapes)."""
    o = torch.ops.hodu
    return [
        ("matmul", lambda a, b: o.matmul(a, b), torch.matmul, [(8, 128, 64), (64, 128)]),
        ("linear", lambda x, w, b: o.linear(x, w, b), F.linear, [(512, 256), (256, 256), (256,)]),
        ("conv2d", lambda x, w, b: o.conv2d(x, w, b, 1, 1), lambda x, w, b: F.conv2d(x, w, b, 1, 1),
         [(8, 32, 28, 28), (64, 32, 3, 3), (64,)]),
        ("attention", lambda q, k, v: o.attention(q, k, v, causal=True),
         lambda q, k, v: attention_torch(q, k, v, True), [(8, 4, 64, 32)] * 3),
        ("layer_norm", lambda x, w, b: o.layer_norm(x, [256], w, b), lambda x, w, b: F.layer_norm(x, [256], w, b),
         [(512, 256), (256,), (256,)]),
        ("gelu", lambda x: o.gelu(x), F.gelu, [(512, 1024)]),
        ("softmax", lambda x: o.softmax(x, -1), lambda x: torch.softmax(x, -1), [(256, 512)]),
    ]


def bench_ops(args):
    g = torch.Generator().manual_seed(0)
    rows = []
    for name, hodu_op, torch_op, shapes in op_cases():
        xs = [torch.randn(*s, generator=g, requires_grad=True) for s in shapes]
        grad = torch.randn_like(torch_op(*xs))

        def step(op):
            def run():
                for x in xs:
                    x.grad = None
                op(*xs).backward(grad)
            return run

        def forward(op):
            def run():
                with torch.no_grad():
                    op(*xs)
            return run

        label = "x".join(str(list(s)) for s in shapes)
        for kind, make_fn in (("fwd+bwd", step), ("forward", forward)):
            h, t = interleaved(make_fn(hodu_op), make_fn(torch_op), args)
            rows.append((f"op {name} {label}", kind, h, t, h / t))
            print(f"op {name:10s} {kind:8s} hodu {h:8.3f} ms  torch {t:8.3f} ms  ratio {h / t:5.2f}  {label}",
                  flush=True)
    return rows


def bench(name, args):
    if name == "ops":
        return bench_ops(args)
    torch.manual_seed(0)
    model, x, y = make(name)
    compiled = hodu.torch.compile(model, x, threads=args.threads)

    def train(m):
        def step():
            model.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), y).backward()
        return step

    def infer(m):
        def run():
            with torch.no_grad():
                m(x)
        return run

    rows = []
    for kind, make_fn, mode in (("train step", train, model.train), ("inference", infer, model.eval)):
        mode()
        h, t = interleaved(make_fn(compiled), make_fn(model), args)
        rows.append((name, kind, h, t, h / t))
        print(f"{name:12s} {kind:11s} hodu {h:8.2f} ms  torch {t:8.2f} ms  ratio {h / t:5.2f}", flush=True)
    model.train()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--models", nargs="+", default=["cnn", "transformer"])
    ap.add_argument("--markdown", help="write the table as Markdown to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} interleaved rounds of {args.iters}; "
          f"torch.ops.hodu from {hodu.torch.ops.backend()}")
    rows = [r for name in args.models for r in bench(name, args)]
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds of {args.iters}\n\n")
            f.write("| model | what | hodu ms | torch ms | hodu / torch |\n|---|---|---|---|---|\n")
            for name, kind, h, t, r in rows:
                f.write(f"| {name} | {kind} | {h:.2f} | {t:.2f} | {r:.2f} |\n")


if __name__ == "__main__":
    main()
