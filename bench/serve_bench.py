#!/usr/bin/python3
"""Load test of `hodugaki serve`: N concurrent clients for T seconds against a
CNN (torchvision ResNet-18, 224x224) and a text encoder (a 4-layer BERT-style
encoder, 64 tokens), each with dynamic batching off (--max-batch 1) and on,
then a soak of many requests to a small CNN to see whether memory stays flat.

Every response is compared with `hodu run`'s output for the same input (a pool
of seeded inputs, each run once through `hodu run -f npy`): bit-identical,
close (rtol 1e-4, atol 1e-5: a batched run may round differently), or wrong.
Reports throughput, p50/p90/p99 latency, the mean batch the server ran (from
its /metrics), and the server's resident memory over time. Clients use
hodu.client with the binary tensor extension, on the same machine as the server.

usage: /usr/bin/python3 bench/serve_bench.py [--hodugaki build/bin/hodugaki] [--hodu build/bin/hodu]
           [--clients 64] [--seconds 60] [--models cnn encoder] [--max-batch 16] [--batch-timeout-us 2000]
           [--soak-requests 100000] [--json OUT.json]
Models are exported once into bench/models/serve/ (torch, random weights, seed 0).
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
from hodu.client import InferenceClient  # noqa: E402

POOL = 16  # distinct inputs per model


def export_models(out_dir):
    """ResNet-18 and the encoder with a dynamic batch dim, exported once."""
    paths = {"cnn": os.path.join(out_dir, "resnet18.onnx"), "encoder": os.path.join(out_dir, "encoder.onnx")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    import torch
    import torchvision
    sys.path.insert(0, HERE)
    from export_zoo import Bert
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    specs = [("cnn", torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 224, 224), "input"),
             ("encoder", Bert(vocab=8000, d=256, layers=4, heads=4, ff=1024, seq=64).eval(),
              torch.randint(0, 8000, (1, 64)), "input_ids")]
    for key, model, x, name in specs:
        torch.onnx.export(model, (x,), paths[key], opset_version=17, input_names=[name], output_names=["output"],
                          dynamic_axes={name: {0: "batch"}, "output": {0: "batch"}}, do_constant_folding=True)
        print(f"exported {paths[key]}", flush=True)
    return paths


def make_pool(key, rng):
    if key == "encoder":
        return "input_ids", [rng.integers(0, 8000, (1, 64), dtype=np.int64) for _ in range(POOL)]
    if key == "tiny":
        return "image", [rng.standard_normal((1, 1, 8, 8)).astype(np.float32) for _ in range(POOL)]
    return "input", [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(POOL)]


def references(hodu, model, name, pool, tmp):
    """`hodu run -f npy` of each pool input."""
    tmp = tempfile.mkdtemp(dir=tmp)
    out = []
    for i, x in enumerate(pool):
        np.save(os.path.join(tmp, f"in{i}.npy"), x)
        d = os.path.join(tmp, f"ref{i}")
        subprocess.run([hodu, "run", model, "-i", f"{name}={tmp}/in{i}.npy", "-f", "npy", "-o", d], check=True,
                       capture_output=True)
        (only,) = os.listdir(d)  # the models here have one output
        out.append(np.load(os.path.join(d, only)))
    return out


class Server:
    def __init__(self, hodugaki, model, name, extra):
        self.proc = subprocess.Popen([hodugaki, "serve", f"{name}={model}", "--host", "127.0.0.1", "--port", "0",
                                      *extra], stderr=subprocess.PIPE, text=True)
        self.log = []
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        else:
            raise RuntimeError("hodugaki did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def metrics(self):
        import urllib.request
        return urllib.request.urlopen(self.url + "/metrics", timeout=30).read().decode()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=120)


def metric(text, name, model):
    m = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def load(server, model_name, input_name, pool, refs, clients, seconds=None, total=None, rss_every=1.0):
    """Clients in threads until `seconds` pass or `total` requests are done."""
    lock = threading.Lock()
    stats = {"lat": [], "exact": 0, "close": 0, "wrong": 0, "errors": 0, "max_diff": 0.0, "done": 0}
    stop = threading.Event()
    deadline = time.monotonic() + seconds if seconds else None

    def client(k):
        c = InferenceClient(server.url, timeout=300)
        n = 0
        while not stop.is_set():
            with lock:
                if total is not None and stats["done"] >= total:
                    break
                stats["done"] += 1
            i = (k * 7 + n) % POOL
            n += 1
            t0 = time.perf_counter()
            try:
                (y,) = c.infer(model_name, {input_name: pool[i]}).values()
            except Exception as e:  # noqa: BLE001 (counted)
                with lock:
                    stats["errors"] += 1
                    if stats["errors"] < 5:
                        print(f"  error: {e}", flush=True)
                continue
            dt = time.perf_counter() - t0
            ref = refs[i]
            if y.shape == ref.shape and np.array_equal(y, ref):
                kind, diff = "exact", 0.0
            elif y.shape == ref.shape and np.allclose(y, ref, rtol=1e-4, atol=1e-5):
                kind, diff = "close", float(np.max(np.abs(y.astype(np.float64) - ref)))
            else:
                kind, diff = "wrong", float("inf")
            with lock:
                stats["lat"].append(dt)
                stats[kind] += 1
                stats["max_diff"] = max(stats["max_diff"], diff)
            if deadline and time.monotonic() > deadline:
                break

    rss = [(0.0, server.rss_mb())]
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(rss_every)
        rss.append((time.monotonic() - start, server.rss_mb()))
        if deadline and time.monotonic() > deadline + 60:
            stop.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    lat = sorted(stats["lat"])

    def pct(p):
        return 1000 * lat[min(len(lat) - 1, int(p / 100 * len(lat)))] if lat else float("nan")

    ok = len(lat)
    return {"requests": ok + stats["errors"], "errors": stats["errors"], "exact": stats["exact"],
            "close": stats["close"], "wrong": stats["wrong"], "max_abs_diff": stats["max_diff"],
            "seconds": round(elapsed, 1), "throughput": ok / elapsed, "p50_ms": pct(50), "p90_ms": pct(90),
            "p99_ms": pct(99), "mean_ms": 1000 * statistics.mean(lat) if lat else float("nan"), "rss_mb": rss}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hodugaki", default=os.path.join(ROOT, "build", "bin", "hodugaki"))
    ap.add_argument("--hodu", default=os.path.join(ROOT, "build", "bin", "hodu"))
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--models", nargs="*", default=["cnn", "encoder"], choices=["cnn", "encoder"])
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--batch-timeout-us", type=int, default=2000)
    ap.add_argument("--soak-requests", type=int, default=100000, help="0: no soak")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    paths = export_models(os.path.join(HERE, "models", "serve"))
    paths["tiny"] = os.path.join(ROOT, "examples", "models", "tiny_cnn.onnx")
    rng = np.random.default_rng(0)
    results = {"clients": args.clients, "seconds": args.seconds, "cores": os.cpu_count(),
               "load_before": os.getloadavg()[0], "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.models:
            name, pool = make_pool(key, rng)
            refs = references(args.hodu, paths[key], name, pool, tmp)
            for mode, batch in (("off", 1), ("on", args.max_batch)):
                extra = ["--max-batch", str(batch), "--batch-timeout-us", str(args.batch_timeout_us)]
                server = Server(args.hodugaki, paths[key], key, extra)
                load(server, key, name, pool, refs, min(args.clients, 8), seconds=3)  # warm-up: plans per batch size
                warm = server.metrics()
                r = load(server, key, name, pool, refs, args.clients, seconds=args.seconds)
                text = server.metrics()
                runs = metric(text, "hodugaki_batch_size_count", key) - metric(warm, "hodugaki_batch_size_count", key)
                rows = metric(text, "hodugaki_batch_size_sum", key) - metric(warm, "hodugaki_batch_size_sum", key)
                r.update(model=key, batching=mode, max_batch=batch, mean_batch=rows / runs if runs else 0,
                         exit_code=server.stop(), load=os.getloadavg()[0])
                results["runs"].append(r)
                print(f"{key:8s} batching {mode:3s}: {r['throughput']:7.1f} req/s  p50 {r['p50_ms']:7.1f} ms  "
                      f"p99 {r['p99_ms']:7.1f} ms  mean batch {r['mean_batch']:4.1f}  {r['requests']} requests "
                      f"({r['exact']} exact, {r['close']} close, {r['wrong']} wrong, {r['errors']} errors, "
                      f"max |diff| {r['max_abs_diff']:.2g})  RSS {r['rss_mb'][0][1]:.0f} -> {r['rss_mb'][-1][1]:.0f} "
                      f"MB  load {r['load']:.1f}", flush=True)
            off, on = results["runs"][-2], results["runs"][-1]
            print(f"{key:8s} batching on / off: {on['throughput'] / off['throughput']:.2f}x throughput", flush=True)
        if args.soak_requests:
            name, pool = make_pool("tiny", rng)
            refs = references(args.hodu, paths["tiny"], name, pool, tmp)
            server = Server(args.hodugaki, paths["tiny"], "tiny",
                            ["--max-batch", str(args.max_batch), "--batch-timeout-us", str(args.batch_timeout_us)])
            r = load(server, "tiny", name, pool, refs, args.clients, total=args.soak_requests, rss_every=2.0)
            r.update(model="tiny_cnn soak", batching="on", exit_code=server.stop(), load=os.getloadavg()[0])
            results["runs"].append(r)
            rss = [m for _, m in r["rss_mb"]]
            print(f"soak: {r['requests']} requests in {r['seconds']} s ({r['throughput']:.0f} req/s), "
                  f"{r['wrong']} wrong, {r['errors']} errors; RSS MB at 0/25/50/75/100 %: "
                  + " ".join(f"{rss[min(len(rss) - 1, int(q * (len(rss) - 1)))]:.1f}" for q in (0, .25, .5, .75, 1)),
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    bad = sum(r["wrong"] + r["errors"] for r in results["runs"]) + sum(r["exit_code"] != 0 for r in results["runs"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
