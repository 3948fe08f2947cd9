#!/usr/bin/python3
"""hodu against ONNX Runtime 1.30 on the model zoo, in one run, interleaved.

For each model and thread count: the same seeded inputs, `hodu bench --json`
and `node bench/ort_bench.js` alternately (--rounds times each, the median of
the medians kept), then the outputs of both compared (relative L2 error).
Absolute times on a shared machine are noise; the ratio in one run is the figure.

usage: /usr/bin/python3 bench/run_bench.py [--hodu build/bin/hodu] [--threads 1 2]
           [--engine E [E ...]] [--max-isa host avx2] [--iters 5] [--warmup 1] [--rounds 2] [--tol 1e-4]
           [--corpus DIR ...] [--shape NAME=DxD ...] [--markdown FILE] [MODEL.onnx ...]

--max-isa host avx2: one hodu row per instruction-set cap (`hodu bench --max-isa`;
host = none), all timed in the same interleaved rounds as ONNX Runtime, which
honours no cap (its rows run at the host ISA: an AVX2 hodu row beside it on an
AVX-512 CPU is hodu's AVX2 code against ORT's AVX-512 code).
--corpus DIR: every .onnx under DIR too (the zoo in bench/models, real models).
--shape NAME=DxD: the shape of a model input with symbolic dims (else 1 per dim).
--inputs-from DIR [--size-index N]: a model's inputs from DIR/<model>/<size>/inputs/<input>.npy
where that folder exists (the wild corpus's recorded inputs, ~/.cache/hodu/wild/data: real audio
and tokens at the sizes tests/wild/models.json binds; N picks the size in sorted order, default 0).
--markdown FILE: the table as Markdown with the CPU it ran on and the command.

--engine cpu native: one row per hodu engine, all timed in the same interleaved
rounds (native: the model compiled once by `hodu build` to a default-mode .so,
whose load and peak memory are then those of loading the library; the build time
is printed beside the model).

Under each row, the nodes that ran on the interpreter's kernel (op, node, share of
the run), from `hodu bench --json`'s one profiled run after the timed ones.

Each call times at least --min-ms of runs (more iterations for fast models than
--iters: 10 runs of a 2 ms model are 20 ms, all noise on a shared machine).
"""
import math
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "ort"))
from compare_models import make_inputs, rel_l2, sanitize  # noqa: E402


def run_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cpu_name():
    flags, name = set(), "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and name == "unknown CPU":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    isa = ("AVX-512" + (" VNNI" if "avx512_vnni" in flags else "") if "avx512f" in flags
           else "AVX2" if "avx2" in flags else "no AVX2")
    if "avx_vnni" in flags:
        isa += ", AVX-VNNI"
    return f"{name} ({isa}, {os.cpu_count()} logical CPUs)"


def write_markdown(path, rows):
    lines = [f"CPU: {cpu_name()}. Command: `/usr/bin/python3 {' '.join(sys.argv)}`", "",
             "| model | hodu | threads | hodu ms | ORT ms | hodu/ORT | fastest h/o | CPU h/o | rel-L2 | interpreter fallbacks |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fb = ", ".join(f"{f['op']} {f['percent']:.1f}%" for f in r.get("fallbacks", [])) or "none"
        lines.append(f"| {r['model']} | {r['engine']} | {r['threads']} | {r['hodu_ms']:.2f} | {r['ort_ms']:.2f} | "
                     f"{r['ratio']:.2f} | {r['min_ratio']:.2f} | {r['cpu_ratio']:.2f} | {r['rel_l2']:.1e} | {fb} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def symbolic_inputs(model):
    """Names of the model's inputs with a dim of no fixed value (--shape applies to those only)."""
    import onnx
    m = onnx.load(model, load_external_data=False)
    return {i.name for i in m.graph.input
            if any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)}


def bench_model(model, name, args, shapes, engines, ort_js, rows, label, isa_args):
    """Checks one model's outputs against ORT and times it at each thread count into rows;
    returns how many of its rows missed the tolerance."""
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        feeds, outputs = make_inputs(model, tmp, 0)
        sizes = sorted(glob.glob(os.path.join(args.inputs_from, name, "*", "inputs"))) if args.inputs_from else []
        if sizes:
            given = sizes[min(args.size_index, len(sizes) - 1)]
            feeds = [(n, os.path.join(given, sanitize(n) + ".npy")) if os.path.isfile(
                os.path.join(given, sanitize(n) + ".npy")) else (n, p) for n, p in feeds]
            print(f"{name}: inputs from {given}", flush=True)
        rng = np.random.default_rng(0)
        symbolic = symbolic_inputs(model)
        for n, p in feeds:  # inputs with symbolic dims given a shape: regenerated at it
            if n in shapes and n in symbolic:
                x = np.load(p)
                y = (rng.standard_normal(shapes[n]) if np.issubdtype(x.dtype, np.floating)
                     else rng.integers(0, 10, shapes[n])).astype(x.dtype)
                np.save(p, y)
        # Outputs of each, once, for the comparison.
        ort_out = os.path.join(tmp, "ort")
        run_json(["node", ort_js, model, "--threads", "2", "--warmup", "0", "--iters", "1", "--out", ort_out] +
                 [f"{n}={p}" for n, p in feeds])
        # What each engine row runs: the model, or for native the library built from it once.
        target = {k: (model, (["--engine", k[0]] if k[0] else []) + isa_args(k[1])) for k in engines}
        if any(k[0] == "native" for k in engines):
            lib = os.path.join(tmp, "model.so")
            t0 = time.time()
            subprocess.run([args.hodu, "build", model, "-o", lib, "-q"], capture_output=True, check=True)
            print(f"{name}: hodu build -> .so in {time.time() - t0:.1f} s", flush=True)
            for k in engines:
                if k[0] == "native":
                    target[k] = (lib, isa_args(k[1]))
        errs = {}
        for e in engines:
            hodu_out = os.path.join(tmp, "hodu-" + label(e))
            subprocess.run([args.hodu, "run", target[e][0], "-f", "npy", "-o", hodu_out, "--threads", "2"] +
                           target[e][1] +
                           sum([["-i", f"{n}={p}"] for n, p in feeds], []), capture_output=True, check=True)
            errs[e] = max(rel_l2(np.load(os.path.join(hodu_out, sanitize(o) + ".npy")),
                                 np.load(os.path.join(ort_out, sanitize(o) + ".npy"))) for o in outputs)
            for o in outputs if e == engines[0] else []:
                y = np.load(os.path.join(ort_out, sanitize(o) + ".npy"))
                if y.size > 1 and np.all(y == y.flat[0]):
                    print(f"{name}: warning: ONNX Runtime's output '{o}' is constant ({y.flat[0]}): "
                          "the rel-L2 column proves nothing for it", file=sys.stderr, flush=True)
            if not errs[e] <= args.tol:
                failures += 1
        for t in args.threads:
            hodu_runs, ort_runs = {e: [] for e in engines}, []
            probe = run_json([args.hodu, "bench", target[engines[0]][0], "--json", "--threads", str(t), "--iters",
                              "3", "--warmup", "1"] + target[engines[0]][1] +
                             sum([["-i", f"{n}={p}"] for n, p in feeds], []))
            iters = max(args.iters, math.ceil(args.min_ms / max(probe["median_ms"], 1e-3)))
            for _ in range(args.rounds):
                for e in engines:
                    hodu_runs[e].append(run_json(
                        [args.hodu, "bench", target[e][0], "--json", "--threads", str(t), "--iters", str(iters),
                         "--warmup", str(args.warmup)] + target[e][1] +
                        sum([["-i", f"{n}={p}"] for n, p in feeds], [])))
                ort_runs.append(run_json(
                    ["node", ort_js, model, "--threads", str(t), "--iters", str(iters), "--warmup",
                     str(args.warmup)] + [f"{n}={p}" for n, p in feeds]))
            o = statistics.median(r["median_ms"] for r in ort_runs)
            for e in engines:
                h = statistics.median(r["median_ms"] for r in hodu_runs[e])
                err = errs[e]
                row = {"model": name, "engine": label(e), "threads": t, "hodu_ms": h, "ort_ms": o,
                       "ratio": h / o,
                       # The fastest run of each: the least disturbed by other load on a shared machine.
                       "min_ratio": min(r["min_ms"] for r in hodu_runs[e]) / min(r["min_ms"] for r in ort_runs),
                       # CPU time per run (all threads): at 1 thread, what a run costs even where
                       # other load keeps the process waiting for a core.
                       "cpu_ratio": (statistics.median(r["cpu_ms"] for r in hodu_runs[e]) /
                                     statistics.median(r["cpu_ms"] for r in ort_runs)),
                       "hodu_load_ms": statistics.median(r["load_ms"] + r["first_run_ms"] for r in hodu_runs[e]),
                       "ort_load_ms": statistics.median(r["load_ms"] + r["first_run_ms"] for r in ort_runs),
                       "hodu_rss_mb": max(r["peak_rss_mb"] for r in hodu_runs[e]),
                       "ort_rss_mb": max(r["peak_rss_mb"] for r in ort_runs), "rel_l2": err}
                # Nodes that ran on the interpreter's kernel (hodu bench --json's one profiled run).
                row["fallbacks"] = hodu_runs[e][-1].get("fallback_nodes", [])
                rows.append(row)
                print(f"{name:20s} {row['engine']:>7s} {t:3d} {h:9.1f} {o:9.1f} {h / o:8.2f} "
                      f"{row['min_ratio']:7.2f} {row['cpu_ratio']:7.2f} {row['hodu_load_ms']:9.0f} {row['ort_load_ms']:9.0f} {row['hodu_rss_mb']:8.0f} "
                      f"{row['ort_rss_mb']:7.0f} {err:9.2e}{'' if err <= args.tol else '  MISMATCH'}", flush=True)
                if row["fallbacks"]:
                    print(f"  {name} ({row['engine']}, {t} thr): interpreter fallbacks: " +
                          ", ".join(f"{f['op']} '{f['node']}' {f['percent']:.1f}%" for f in row["fallbacks"]),
                          flush=True)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hodu", default=os.path.join(ROOT, "build", "bin", "hodu"))
    ap.add_argument("--engine", nargs="+", default=[""], help="hodu engine(s); several: side by side")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--min-ms", type=float, default=500, help="timed runs per call: at least this many ms")
    ap.add_argument("--json", default="", help="also write all results here")
    ap.add_argument("--max-isa", nargs="+", default=["host"], help="hodu ISA caps (host: none); one row each")
    ap.add_argument("--corpus", nargs="*", default=[], help="folders whose .onnx models are benchmarked too")
    ap.add_argument("--shape", action="append", default=[], help="NAME=DxD for inputs with symbolic dims")
    ap.add_argument("--markdown", default="", help="also write the table as Markdown here")
    ap.add_argument("--inputs-from", default="", help="DIR/<model>/<size>/inputs/<input>.npy where present")
    ap.add_argument("--size-index", type=int, default=0, help="which <size> folder of --inputs-from (sorted)")
    ap.add_argument("models", nargs="*")
    args = ap.parse_args()
    # `--max-isa host avx2 a.onnx` or `--engine cpu a.onnx`: nargs="+" takes the models too;
    # give them back (an ISA or engine name is never a file).
    stray = [v for v in args.max_isa + args.engine if v.endswith(".onnx") or os.path.isfile(v)]
    args.max_isa = [v for v in args.max_isa if v not in stray] or ["host"]
    args.engine = [v for v in args.engine if v not in stray] or [""]
    models = stray + list(args.models)
    for d in args.corpus:
        models += sorted(glob.glob(os.path.join(d, "**", "*.onnx"), recursive=True))
    if not models:
        models = sorted(glob.glob(os.path.join(HERE, "models", "*.onnx")))
    shapes = {}
    for spec in args.shape:
        name, _, dims = spec.partition("=")
        shapes[name] = [int(d) for d in dims.split("x")]
    if not models:
        print("no models: run /usr/bin/python3 bench/export_zoo.py first")
        return 1
    ort_js = os.path.join(HERE, "ort_bench.js")
    rows, failures = [], 0
    # One hodu row per (engine, ISA cap); the cap goes to `hodu bench --max-isa`.
    engines = [(e, isa) for e in args.engine for isa in args.max_isa]
    def isa_args(isa):
        return [] if isa == "host" else ["--max-isa", isa]
    def label(key):
        e, isa = key
        return (e or "default") + ("" if isa == "host" else "@" + isa)
    hdr = (f"{'model':20s} {'engine':>7s} {'thr':>3s} {'hodu ms':>9s} {'ort ms':>9s} {'hodu/ort':>8s} "
           f"{'min h/o':>7s} {'cpu h/o':>7s} {'hodu load':>9s} {'ort load':>9s} {'hodu MB':>8s} {'ort MB':>7s} {'rel-L2':>9s}")
    print(hdr)
    print("-" * len(hdr))
    for model in models:
        name = os.path.splitext(os.path.basename(model))[0]
        try:
            failures += bench_model(model, name, args, shapes, engines, ort_js, rows, label, isa_args)
        except (RuntimeError, subprocess.CalledProcessError) as e:
            # A model either runtime cannot run (a symbolic dim left at 1, an op ORT lacks) is
            # reported and counted; the others still run.
            detail = (e.stderr.decode(errors="replace") if isinstance(e, subprocess.CalledProcessError) and e.stderr
                      else str(e)).strip()[-400:]
            print(f"{name}: FAILED, not timed: {detail}", flush=True)
            failures += 1
    if rows:
        for e in engines:
            for t in args.threads:
                ratios = [r["ratio"] for r in rows if r["threads"] == t and r["engine"] == label(e)]
                gm = float(np.exp(np.mean(np.log(ratios))))
                mins = [r["min_ratio"] for r in rows if r["threads"] == t and r["engine"] == label(e)]
                gm_min = float(np.exp(np.mean(np.log(mins))))
                print(f"geometric mean hodu ({label(e)})/ort at {t} thread(s): {gm:.2f} (of the fastest runs: {gm_min:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.markdown and rows:
        write_markdown(args.markdown, rows)
    fb = sorted({r["model"] for r in rows if r.get("fallbacks")})
    print("interpreter fallbacks: " + ("none" if not fb else "in " + ", ".join(fb)))
    print("load = load + first run (ms); MB = peak RSS of the process; min h/o = fastest hodu run / fastest ORT run; "
          "cpu h/o = CPU time per run (all threads), hodu / ORT")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
