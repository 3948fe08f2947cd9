#!/usr/bin/env python3
"""Differential test of hodu on the models-from-the-wild corpus (tests/wild/README.md).

Every model of the selection, at each of its bound sizes, runs on
  interp     hodu run --engine interp (the reference interpreter)
  O0..O3     hodu run --engine cpu -O0 .. -O3
  so         hodu build MODEL -o X.so --shape NAME=DIMS..., then hodu run X.so
  free       hodu build MODEL -o X.so without shape flags, once per model: one library run
             at every size (issue 20; not in the default list)
  free_sa    the same built with --standalone (not in the default list)
  py         hodu.InferenceSession (PYTHONPATH=<build>/python), default engine
and each output is compared with ONNX Runtime 1.30's (made by fetch.py) and
with the interpreter's, by relative L2 error against the model's tolerance.

Cells: ok; WRONG (an output beyond tolerance); refused (hodu stopped with a
clear "error:" saying what it does not support, e.g. an op its compiler lacks);
rejected (hodu stopped with an "error:" that names nothing unsupported, on a
model ONNX Runtime runs); crash (a signal, an exit without "error:", missing
outputs, or a timeout); xfail (WRONG, rejected or crash listed in
expected_failures.txt); XPASS (listed there but now right: remove the line).
Exit code: 1 on any WRONG, rejected, crash or XPASS or a corpus error, 77 when
ONNX Runtime or the npm registry is unreachable and nothing failed, else 0.

usage: run_wild.py --hodu BIN [--all | ID ...] [--engines interp,O0,O1,O2,O3,so,py,free,free_sa]
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fetch as F  # noqa: E402
import wildlib as W  # noqa: E402

ENGINES = ["interp", "O0", "O1", "O2", "O3", "so", "py"]
# Libraries built without shape flags (one per model, run at every size): asked for by name.
FREE_ENGINES = {"free": [], "free_sa": ["--standalone"]}
FAILING = ("WRONG", "crash", "rejected")
UNSUPPORTED = re.compile(r"not supported|unsupported|not implemented", re.I)


class Result:
    def __init__(self, model, size, engine, status, detail="", repro=""):
        self.model, self.size, self.engine = model, size, engine
        self.status, self.detail, self.repro = status, detail, repro
        self.expected = None   # the expected-failures line that covers it


def load_expected(path, known_ids):
    """[(model, engine, size_tag, reason, line_no)] from 'MODEL ENGINE SIZE  # reason' lines."""
    entries = []
    if not path or not os.path.isfile(path):
        return entries
    with open(path) as f:
        for no, line in enumerate(f, 1):
            text, _, reason = line.partition("#")
            fields = text.split()
            if not fields:
                continue
            if len(fields) != 3 or not reason.strip():
                raise W.WildError(f"{path}:{no}: want 'MODEL ENGINE SIZE  # reason' (ENGINE or SIZE may be *)")
            model, engine, size = fields
            if model not in known_ids:
                raise W.WildError(f"{path}:{no}: unknown model id '{model}'")
            if engine != "*" and engine not in ENGINES and engine not in FREE_ENGINES:
                raise W.WildError(f"{path}:{no}: engine '{engine}' is not one of "
                                  f"{', '.join(ENGINES + list(FREE_ENGINES))} or *")
            entries.append((model, engine, size, reason.strip(), no))
    return entries


def run_cmd(cmd, timeout, env=None):
    """(status, message, seconds): status ok / refused / crash."""
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return "crash", f"timed out after {timeout} s", time.time() - t0
    dt = time.time() - t0
    if r.returncode == 0:
        return "ok", "", dt
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    if r.returncode == 1 and errors:
        msg = errors[-1][len("error:"):].strip()
        msg = re.sub(r"; supported ops: .*", " (its supported ops are listed by the command)", msg)
        # ONNX Runtime ran this model: an error that does not say what hodu lacks
        # (an op, a dtype, a format) rejects a valid model, and that is a bug.
        return ("refused" if UNSUPPORTED.search(msg) else "rejected"), msg, dt
    tail = " | ".join(r.stderr.strip().splitlines()[-3:])
    how = f"signal {-r.returncode}" if r.returncode < 0 else f"exit code {r.returncode}"
    return "crash", f"{how} without an 'error:' line: {tail[-400:]}", dt


def load_outputs(folder, names):
    out = {}
    for n in names:
        p = os.path.join(folder, W.sanitize(n) + ".npy")
        if not os.path.isfile(p):
            return None, f"no output '{n}' written"
        out[n] = np.load(p)
    return out, None


def tolerance_for(model, meta, output):
    """(rel_l2, atol): an output passes when its relative L2 error is within rel_l2,
    or, where the manifest gives an atol, when every element is within atol."""
    tol = model["tolerance"]
    allowed = float(tol["rel_l2"])
    noise = (meta.get("ort_noise") or {}).get(output)
    if noise:
        allowed = max(allowed, 2.0 * noise[0])
    fusion = (meta.get("ort_fusion") or {}).get(output)
    if fusion:
        allowed = max(allowed, 2.0 * fusion[0])
    return allowed, float(tol.get("atol", 0.0))


class Runner:
    def __init__(self, args, cache):
        self.args, self.cache = args, cache
        self.hodu = os.path.abspath(args.hodu)
        self.free_dir = tempfile.TemporaryDirectory(prefix="hodu-wild-free-")
        self.free_builds = {}  # (model id, engine) -> build()'s result
        self.pyenv = dict(os.environ)
        pydir = args.python_dir or os.path.join(os.path.dirname(os.path.dirname(self.hodu)), "python")
        self.pydir = pydir if os.path.isdir(os.path.join(pydir, "hodu")) else None
        if self.pydir:
            self.pyenv["PYTHONPATH"] = self.pydir + os.pathsep + self.pyenv.get("PYTHONPATH", "")

    def command(self, engine, model_file, feeds, out_dir, so_file=None):
        inputs = ",".join(f"{n}={p}" for n, p in feeds)
        threads = ["--threads", str(self.args.threads)]
        if engine == "py":
            return [sys.executable, os.path.join(W.HERE, "py_run.py"), model_file, out_dir] + threads + \
                [f"{n}={p}" for n, p in feeds]
        base = [self.hodu, "run", so_file or model_file, "-I", inputs, "-f", "npy", "-o", out_dir] + threads
        if engine == "interp":
            return base + ["--engine", "interp"]
        if engine == "so" or engine in FREE_ENGINES:
            return base
        return base + ["--engine", "cpu", "-O", engine[1]]

    def build(self, model, model_file, feeds, work):
        so = os.path.join(work, "model.so")
        cmd = [self.hodu, "build", model_file, "-o", so, "-q"]
        for n, p in feeds:
            shape = np.load(p, mmap_mode="r").shape
            if shape:
                cmd += ["--shape", f"{n}={'x'.join(str(d) for d in shape)}"]
        status, msg, _ = run_cmd(cmd, self.args.timeout)
        return status, msg, so, cmd

    def build_free(self, model, model_file, engine):
        """One library per model and engine, its input dims left free."""
        key = (model["id"], engine)
        if key not in self.free_builds:
            so = os.path.join(self.free_dir.name, f"{W.sanitize(model['id'])}_{engine}.so")
            cmd = [self.hodu, "build", model_file, "-o", so, "-q"] + FREE_ENGINES[engine]
            status, msg, _ = run_cmd(cmd, self.args.timeout)
            self.free_builds[key] = (status, msg, so, cmd)
        return self.free_builds[key]

    def run_size(self, model, model_file, folder):
        import json
        with open(os.path.join(folder, "meta.json")) as f:
            meta = json.load(f)
        size = meta["size"]
        outputs = meta["outputs"]
        ref, problem = load_outputs(os.path.join(folder, "ort"), outputs)
        if problem:
            raise W.WildError(f"{model['id']}: reference outputs incomplete in {folder}: {problem}")
        feeds = [(n, os.path.join(folder, "inputs", W.sanitize(n) + ".npy")) for n in model["inputs"]]
        results, interp_out = [], None
        with tempfile.TemporaryDirectory(prefix="hodu-wild-") as work:
            for engine in self.args.engines:
                out_dir = os.path.join(work, engine)
                so_file = None
                if engine == "so" or engine in FREE_ENGINES:
                    if engine == "so":
                        status, msg, so_file, bcmd = self.build(model, model_file, feeds, work)
                    else:
                        status, msg, so_file, bcmd = self.build_free(model, model_file, engine)
                    if status != "ok":
                        results.append(Result(model["id"], size, engine, status, f"hodu build: {msg}",
                                              " ".join(shlex.quote(c) for c in bcmd)))
                        continue
                if engine == "py" and not self.pydir:
                    results.append(Result(model["id"], size, engine, "crash",
                                          "hodu's Python package is not built (no <build>/python/hodu)"))
                    continue
                cmd = self.command(engine, model_file, feeds, out_dir, so_file)
                status, msg, secs = run_cmd(cmd, self.args.timeout, env=self.pyenv if engine == "py" else None)
                repro = " ".join(shlex.quote(c) for c in cmd)
                if engine == "so" or engine in FREE_ENGINES:
                    repro = " ".join(shlex.quote(c) for c in bcmd) + " && " + repro
                if status != "ok":
                    results.append(Result(model["id"], size, engine, status, msg, repro))
                    continue
                got, problem = load_outputs(out_dir, outputs)
                if problem:
                    results.append(Result(model["id"], size, engine, "crash", problem, repro))
                    continue
                if engine == "interp":
                    interp_out = got
                results.append(self.judge(model, meta, size, engine, got, ref, interp_out, repro, secs))
        return results

    def judge(self, model, meta, size, engine, got, ref, interp_out, repro, secs):
        notes = []
        for name in meta["outputs"]:
            rel, mx, problem = W.compare(got[name], ref[name])
            allowed, atol = tolerance_for(model, meta, name)
            if problem or (rel > allowed and not mx <= atol):
                vs_interp = ""
                if interp_out is not None and engine != "interp":
                    r2, m2, p2 = W.compare(got[name], interp_out[name])
                    vs_interp = f"; vs interp: {p2}" if p2 else f"; vs interp rel-L2 {r2:.2e} max-abs {m2:.2e}"
                what = problem or (f"rel-L2 {rel:.2e} max-abs {mx:.2e} (tolerance rel-L2 {allowed:.1e}" +
                                   (f" or max-abs {atol:.1e})" if atol else ")"))
                return Result(model["id"], size, engine, "WRONG",
                              f"first differing output '{name}': {what} vs ONNX Runtime{vs_interp}", repro)
            notes.append(rel)
        return Result(model["id"], size, engine, "ok", f"max rel-L2 {max(notes) if notes else 0:.1e}, {secs:.1f} s",
                      repro)


def apply_expected(results, entries):
    used = set()
    for r in results:
        for (model, engine, size, reason, no) in entries:
            if model == r.model and engine in ("*", r.engine) and size in ("*", W.size_tag(r.size)):
                r.expected = (reason, no)
                used.add(no)
                if r.status in FAILING:
                    r.status = "xfail"
                elif r.status == "ok":
                    r.status = "XPASS"
                break
    return used


def cell(results):
    states = [r.status for r in results]
    return states[0] if len(set(states)) == 1 else "/".join(states)


def print_table(models, results, engines):
    by = {}
    for r in results:
        by.setdefault((r.model, r.engine), []).append(r)
    width = max([len(m["id"]) for m in models] + [5])
    print(f"\n{'model':{width}s} {'sizes':>5s}  " + " ".join(f"{e:>8s}" for e in engines))
    for m in models:
        rows = [by.get((m["id"], e)) for e in engines]
        if not any(rows):
            continue
        print(f"{m['id']:{width}s} {len(m['sizes']) or 1:>5d}  " +
              " ".join(f"{cell(rs) if rs else '-':>8s}" for rs in rows))
    print("(cells with '/' give each size in manifest order)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ids", nargs="*", help="model ids (default: the CI subset; --all: every model)")
    ap.add_argument("--hodu", required=True, help="the hodu binary (build/bin/hodu)")
    ap.add_argument("--all", action="store_true", help="the whole corpus (also: HODU_WILD_ALL=1)")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help=f"comma list of {','.join(ENGINES + list(FREE_ENGINES))} (default: all but "
                         f"{', '.join(FREE_ENGINES)})")
    ap.add_argument("--python-dir", help="folder holding the hodu Python package (default: <build>/python)")
    ap.add_argument("--dir", help="corpus cache (default: $HODU_WILD_DIR or ~/.cache/hodu/wild)")
    ap.add_argument("--expected", default=os.path.join(W.HERE, "expected_failures.txt"),
                    help="expected failures file (default: tests/wild/expected_failures.txt)")
    ap.add_argument("--threads", type=int, default=2, help="threads per hodu run (default 2)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per hodu command (default 600)")
    ap.add_argument("--no-fetch", action="store_true", help="use the cache as it is; never call npm or export")
    args = ap.parse_args()
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in ENGINES and e not in FREE_ENGINES]
    if bad:
        print(f"error: unknown engine(s) {', '.join(bad)}; choose from {', '.join(ENGINES + list(FREE_ENGINES))}",
              file=sys.stderr)
        return 2
    if not os.access(args.hodu, os.X_OK):
        print(f"error: {args.hodu} is not an executable hodu binary", file=sys.stderr)
        return 2
    run_all = args.all or os.environ.get("HODU_WILD_ALL") == "1"
    try:
        all_models = W.load_manifest()
        models = W.select(all_models, args.ids, ci_only=not run_all)
        expected = load_expected(args.expected, {m["id"] for m in all_models})
    except W.WildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cache = W.cache_dir(args.dir)
    print(f"wild: {len(models)} models ({'all' if run_all or args.ids else 'CI subset'}), cache {cache}", flush=True)
    t0 = time.time()
    try:
        if args.no_fetch:
            errors, unreachable = {}, {}
            F.ort_version()
        else:
            errors, unreachable = F.fetch(models, all_models, cache)
    except W.Unreachable as e:
        print(f"SKIP: {e}")
        return 77
    print(f"wild: corpus ready in {time.time() - t0:.0f} s", flush=True)
    runner = Runner(args, cache)
    results = []
    for m in models:
        if m["id"] in errors or m["id"] in unreachable:
            continue
        model_file = W.model_path(cache, m)
        for size in m["sizes"] or [{}]:
            folder = os.path.join(cache, "data", m["id"], W.size_tag(size))
            if not os.path.isfile(os.path.join(folder, "meta.json")):
                errors[m["id"]] = f"no reference outputs in {folder}: run tests/wild/fetch.py {m['id']}"
                break
            t1 = time.time()
            try:
                rs = runner.run_size(m, model_file, folder)
            except W.WildError as e:
                errors[m["id"]] = str(e)
                break
            results += rs
            print(f"wild: {m['id']} {W.size_text(size)}: " +
                  " ".join(f"{r.engine}={r.status}" for r in rs) + f" ({time.time() - t1:.0f} s)", flush=True)
    apply_expected(results, expected)
    print_table(models, results, args.engines)

    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    problems = [r for r in results if r.status not in ("ok",)]
    if problems:
        print("\ndetails:")
    for r in problems:
        where = f"{r.model} {r.engine} {W.size_text(r.size)}"
        if r.status == "XPASS":
            print(f"XPASS   {where}: now within tolerance ({r.detail}); remove line {r.expected[1]} of "
                  f"{os.path.basename(args.expected)} ({r.expected[0]})")
            continue
        print(f"{r.status:7s} {where}: {r.detail}")
        if r.status == "xfail":
            print(f"        expected ({r.expected[0]})")
        if r.repro:
            print(f"        repro: {r.repro}")
    for mid, msg in errors.items():
        print(f"ERROR   {mid}: {msg}")
    for mid, msg in unreachable.items():
        print(f"UNAVAILABLE {mid}: {msg}")
    summary = ", ".join(f"{counts.get(s, 0)} {s}"
                        for s in ("ok", "WRONG", "rejected", "crash", "refused", "xfail", "XPASS"))
    print(f"\nwild: {len(results)} runs: {summary}; {len(errors)} corpus errors, {len(unreachable)} unavailable "
          f"({time.time() - t0:.0f} s)")
    failed = sum(counts.get(s, 0) for s in FAILING + ("XPASS",)) + len(errors)
    if failed:
        return 1
    if unreachable:
        print("SKIP: some models could not be downloaded (npm registry unreachable); the rest passed")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
