#!/usr/bin/env python3
"""Two configurations of hodu's cpu engine on one model, in one process, runs alternated: the
difference a kernel choice makes, measured where a shared machine's speed swings between runs.

Each configuration is a set of environment variables (the HODU_CPU_* switches, HODU_MAX_ISA is
not one: it is read once a process) set while its session plans, then restored. Both sessions
run the same seeded inputs, A then B, then B then A, --runs times; the table gives each one's
median and fastest run and B's over A's (median, fastest, total), and the relative L2 distance
of their first outputs. On the machines this project is benchmarked on a whole `hodu bench` can
run 1.5x slower than the one before it (a neighbour on the same physical core); runs a few
milliseconds apart share that state, so the ratios here hold where two separate benches do not.

  /usr/bin/python3 bench/ab_env.py MODEL --b HODU_CPU_WINOGRAD=off [--a K=V,...] [--threads 2]
      [--runs 200] [--shape NAME=DxD ...] [--hodu-python build/python]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_env(text):
    out = {}
    for item in filter(None, text.split(",")):
        if "=" not in item:
            sys.exit(f"error: '{item}': expected NAME=VALUE")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def make_feeds(session, shapes):
    rng = np.random.RandomState(0)
    feeds = {}
    for i in session.get_inputs():
        shape = shapes.get(i.name) or [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        if "int" in str(i.type):
            feeds[i.name] = rng.randint(0, 100, shape).astype(np.int64 if "64" in str(i.type) else np.int32)
        else:
            feeds[i.name] = rng.rand(*shape).astype(np.float32)
    return feeds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--a", default="", help="configuration A: NAME=VALUE,... (default: none set)")
    ap.add_argument("--b", default="", help="configuration B: NAME=VALUE,...")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--shape", action="append", default=[], help="NAME=DxD for an input with symbolic dims")
    ap.add_argument("--hodu-python", default=os.path.join(ROOT, "build", "python"))
    args = ap.parse_args()
    sys.path.insert(0, args.hodu_python)
    import hodu

    shapes = {}
    for s in args.shape:
        name, dims = s.split("=", 1)
        shapes[name] = [int(d) for d in dims.split("x")]
    sessions = []
    for env in (parse_env(args.a), parse_env(args.b)):
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            s = hodu.InferenceSession(args.model, threads=args.threads, engine="cpu")
            feeds = make_feeds(s, shapes)
            first = s.run(None, feeds)  # plans while the variables are set
            s.run(None, feeds)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        sessions.append((s, feeds, first))
    times = ([], [])
    for r in range(args.runs):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            s, feeds, _ = sessions[i]
            t0 = time.perf_counter()
            s.run(None, feeds)
            times[i].append((time.perf_counter() - t0) * 1e3)
    a, b = times
    ya, yb = (np.asarray(x[2][0], dtype=np.float64) for x in sessions)
    rel = float(np.linalg.norm(ya - yb) / max(np.linalg.norm(ya), 1e-30)) if ya.shape == yb.shape else float("nan")
    print(f"{os.path.basename(args.model)}, {args.threads} thread(s), {args.runs} runs each")
    print(f"  A {args.a or '(default)'}: median {statistics.median(a):.2f} ms, fastest {min(a):.2f}")
    print(f"  B {args.b or '(default)'}: median {statistics.median(b):.2f} ms, fastest {min(b):.2f}")
    print(f"  B/A: median {statistics.median(b) / statistics.median(a):.3f}, fastest {min(b) / min(a):.3f}, "
          f"total {sum(b) / sum(a):.3f}; first output rel-L2 {rel:.1e}")


if __name__ == "__main__":
    main()
