#!/usr/bin/env python3
"""Fetches the models-from-the-wild corpus and makes its reference outputs.

For each model of tests/wild/models.json:
  npm      `npm pack PACKAGE@VERSION` into CACHE/npm, the .onnx taken out of the
           tarball (or put together from its chunks), its sha256 checked;
  torch    torch.onnx.export of the recipe (torch_export.py), random weights
           from a fixed seed;
  derived  an int8 variant of another corpus model (quantize.py), calibrated
           with ONNX Runtime on that model's first seeded input;
then, for each bound size, the seeded inputs and ONNX Runtime 1.30's outputs
(tests/ort/ort_run.js) under CACHE/data/ID/SIZE. Idempotent: what is there and
up to date is kept.

usage: fetch.py [--dir CACHE] [--ci | --all | ID ...] [--no-refs] [--list]
CACHE defaults to $HODU_WILD_DIR, else ~/.cache/hodu/wild.
Exit codes: 0 done, 1 an error (bad download, sha256 mismatch, failed export),
77 the npm registry or ONNX Runtime is unreachable (nothing else was wrong).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wildlib as W  # noqa: E402

NETWORK_ERRORS = re.compile(r"ENOTFOUND|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EAI_AGAIN|ENETUNREACH|EHOSTUNREACH|"
                            r"network|socket hang up|request to .* failed", re.I)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def ort_version():
    pkg = os.path.join(W.ORT_DIR, "node_modules", "onnxruntime-node", "package.json")
    if not os.path.isfile(pkg):
        raise W.Unreachable("ONNX Runtime is not installed: run scripts/setup.sh "
                            "(or: cd tests/ort && npm install --ignore-scripts)")
    with open(pkg) as f:
        return json.load(f)["version"]


def npm_tarball(cache, spec):
    """CACHE/npm/<name>-<version>.tgz for spec 'PACKAGE@VERSION', packed once."""
    name, version = spec.rsplit("@", 1)
    tgz = os.path.join(cache, "npm", f"{name.lstrip('@').replace('/', '-')}-{version}.tgz")
    if os.path.isfile(tgz):
        return tgz
    if shutil.which("npm") is None:
        raise W.Unreachable(f"npm is not installed, cannot fetch {spec} (scripts/setup.sh installs it)")
    os.makedirs(os.path.dirname(tgz), exist_ok=True)
    log(f"fetch: npm pack {spec}")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(tgz)) as tmp:
        try:
            r = subprocess.run(["npm", "pack", spec, "--loglevel=error", "--pack-destination", tmp, "--fetch-timeout=60000",
                                "--fetch-retries=1"], capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise W.Unreachable(f"npm pack {spec} timed out after 900 s: is the npm registry reachable?")
        if r.returncode != 0:
            msg = [ln for ln in (r.stderr.strip() or r.stdout.strip()).splitlines()
                   if re.search(r"error (code|[A-Z]?[a-z]*Error|404)|reason:|not found|No matching", ln)]
            text = "\n  ".join(msg[:3]) or f"exit code {r.returncode}"
            if NETWORK_ERRORS.search(r.stderr):
                raise W.Unreachable(f"the npm registry is unreachable (npm pack {spec}):\n  {text}")
            raise W.WildError(f"npm pack {spec} failed:\n  {text}")
        packed = [f for f in os.listdir(tmp) if f.endswith(".tgz")]
        if len(packed) != 1:
            raise W.WildError(f"npm pack {spec} left {packed} instead of one tarball")
        os.replace(os.path.join(tmp, packed[0]), tgz)
    return tgz


def extract_npm(cache, model, dest):
    src = model["npm"]
    tgz = npm_tarball(cache, src["package"])
    with tarfile.open(tgz) as t:
        if "resource" in src:   # @imgly/background-removal-data: a model split into chunks named by their sha256
            res = json.load(t.extractfile(src["resources_json"]))
            entry = res.get(src["resource"])
            if entry is None:
                raise W.WildError(f"{model['id']}: {src['resource']} is not in {src['resources_json']}")
            folder = os.path.dirname(src["resources_json"])
            data = b"".join(t.extractfile(f"{folder}/{c['hash']}").read() for c in entry["chunks"])
        else:
            try:
                data = t.extractfile(src["path"]).read()
            except KeyError:
                raise W.WildError(f"{model['id']}: {src['path']} is not in {os.path.basename(tgz)}")
    tmp = dest + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    got = W.sha256_file(tmp)
    if got != src["sha256"]:
        os.remove(tmp)
        raise W.WildError(f"{model['id']}: sha256 of {src['path'] if 'path' in src else src['resource']} in "
                          f"{src['package']} is {got}, the manifest says {src['sha256']}")
    os.replace(tmp, dest)


def recipe_of(model, by_id):
    """What a torch export or derived model is made from: its recipe, inputs and the
    sources of the scripts that make it (a change to any of them remakes it)."""
    recipe = dict(model.get("torch") or model["derived"], inputs=model["inputs"], first_size=(model["sizes"] or [{}])[0])
    scripts = ["torch_export.py"] if "torch" in model else ["quantize.py", "contrib_models.py", "fetch.py"]
    recipe["scripts"] = {s: W.sha256_file(os.path.join(W.HERE, s)) for s in scripts + ["wildlib.py"]}
    if "derived" in model:
        recipe["base"] = recipe_of(by_id[model["derived"]["from"]], by_id)
    return recipe


def stamp_ok(path, recipe):
    stamp = path + ".recipe.json"
    if not (os.path.isfile(path) and os.path.isfile(stamp)):
        return False
    with open(stamp) as f:
        return json.load(f) == recipe


def write_stamp(path, recipe):
    with open(path + ".recipe.json", "w") as f:
        json.dump(recipe, f, indent=1, sort_keys=True)


def example_inputs(model, size):
    return [W.make_input(model["id"], n, spec, size) for n, spec in model["inputs"].items()]


def export_torch(model, dest):
    import torch_export
    tmp = dest + ".part"
    torch_export.export(model["torch"], example_inputs(model, (model["sizes"] or [{}])[0]), tmp)
    os.replace(tmp, dest)


def run_ort(model_file, out_dir, feeds, level="all"):
    """ONNX Runtime's outputs for FEEDS {name: array} into OUT_DIR, at graph optimization
    LEVEL; returns the output names in order."""
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for name, x in feeds.items():
            p = os.path.join(tmp, W.sanitize(name) + ".npy")
            np.save(p, x)
            args.append(f"{name}={p}")
        r = subprocess.run(["node", os.path.join(W.ORT_DIR, "ort_run.js"), model_file, out_dir, "--threads", "1",
                        "--level", level] + args,
                           capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise W.WildError(f"ONNX Runtime failed on {model_file}: {r.stderr.strip()[-600:]}")
    import onnx
    return [o.name for o in onnx.load(model_file, load_external_data=False).graph.output]


def calibrate(base_file, base_model, names):
    """(min, max) of each value in NAMES on the base model's first seeded input."""
    import onnx
    m = onnx.load(base_file)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
            have.add(n)
    size = (base_model["sizes"] or [{}])[0]
    feeds = dict(zip(base_model["inputs"], example_inputs(base_model, size)))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "calib.onnx")
        onnx.save(m, path)
        run_ort(path, os.path.join(tmp, "out"), feeds)
        ranges = {}
        for n in names:
            x = np.load(os.path.join(tmp, "out", W.sanitize(n) + ".npy"))
            ranges[n] = (float(x.min()), float(x.max()))
    return ranges


def make_derived(cache, model, by_id, dest):
    import onnx
    import contrib_models
    import quantize
    base = by_id[model["derived"]["from"]]
    base_file = ensure_model(cache, base, by_id)
    name = model["derived"]["transform"]
    transform = dict(quantize.TRANSFORMS, **contrib_models.TRANSFORMS)[name]
    m = onnx.load(base_file)
    values = contrib_models.CALIBRATION[name] if name in contrib_models.CALIBRATION else \
        (None if name in ("dynamic_matmul", "dynamic_conv", "float16") else quantize.conv_calibration_values)
    calib = calibrate(base_file, base, values(m)) if values else None
    q = transform(m, calib)
    tmp = dest + ".part"
    onnx.save(q, tmp)
    os.replace(tmp, dest)


def ensure_model(cache, model, by_id):
    dest = W.model_path(cache, model)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if "npm" in model:
        if not (os.path.isfile(dest) and W.sha256_file(dest) == model["npm"]["sha256"]):
            extract_npm(cache, model, dest)
        return dest
    recipe = recipe_of(model, by_id)
    if not stamp_ok(dest, recipe):
        log(f"fetch: {'exporting' if 'torch' in model else 'building'} {model['id']}")
        if "torch" in model:
            export_torch(model, dest)
        else:
            make_derived(cache, model, by_id, dest)
        write_stamp(dest, recipe)
    return dest


def ort_moves(model_file, folder, name, feeds, level, outputs):
    """{output: [rel-L2, max abs]}: how far ONNX Runtime's outputs on FEEDS at LEVEL are from
    the reference outputs in FOLDER/ort."""
    run_ort(model_file, os.path.join(folder, name), feeds, level)
    moves = {}
    for out in outputs:
        a = np.load(os.path.join(folder, name, W.sanitize(out) + ".npy"))
        b = np.load(os.path.join(folder, "ort", W.sanitize(out) + ".npy"))
        rel, mx, _ = W.compare(a, b)
        moves[out] = [rel, mx]
    shutil.rmtree(os.path.join(folder, name))
    return moves


def ensure_refs(cache, model, model_file, version):
    """Seeded inputs and ONNX Runtime outputs for every size; returns the list of size folders."""
    model_sha = W.sha256_file(model_file)
    folders = []
    for size in model["sizes"] or [{}]:
        folder = os.path.join(cache, "data", model["id"], W.size_tag(size))
        meta_path = os.path.join(folder, "meta.json")
        want = {"model_sha256": model_sha, "ort": version, "inputs": model["inputs"], "size": size,
                "inputs_version": W.INPUTS_VERSION, "ort_level": model.get("ort_level", {}).get("level", "all"),
                "noise": bool(model["tolerance"].get("ort_noise")),
                "fusion": bool(model["tolerance"].get("ort_fusion"))}
        if os.path.isfile(meta_path):
            with open(meta_path) as f:
                meta = json.load(f)
            if all(meta.get(k) == v for k, v in want.items()):
                folders.append(folder)
                continue
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(os.path.join(folder, "inputs"))
        feeds = {}
        for name, spec in model["inputs"].items():
            feeds[name] = W.make_input(model["id"], name, spec, size)
            np.save(os.path.join(folder, "inputs", W.sanitize(name) + ".npy"), feeds[name])
        log(f"fetch: ONNX Runtime {version} reference for {model['id']} at {W.size_text(size)}")
        outputs = run_ort(model_file, os.path.join(folder, "ort"), feeds, want["ort_level"])
        meta = dict(want, outputs=outputs)
        for out in outputs:
            y = np.load(os.path.join(folder, "ort", W.sanitize(out) + ".npy"))
            if y.size > 1 and np.issubdtype(y.dtype, np.floating) and np.all(y == y.flat[0]):
                raise W.WildError(f"{model['id']}: ONNX Runtime's output '{out}' at {W.size_text(size)} is constant "
                                  f"({y.flat[0]}): comparing with it would prove nothing; change the inputs or recipe")
            if "npm" not in model and np.issubdtype(y.dtype, np.floating) and np.abs(y).max() < 1e-4:
                raise W.WildError(f"{model['id']}: ONNX Runtime's output '{out}' at {W.size_text(size)} is at most "
                                  f"{np.abs(y).max():.1e}: the recipe's activations vanish; fix its weights")
        if want["noise"]:
            # How far ONNX Runtime itself moves when every float input moves by one ulp:
            # quantized models round activations, so a tiny change flips some quanta.
            noisy = {n: W.one_ulp_noise(x, 1 + i) for i, (n, x) in enumerate(feeds.items())}
            meta["ort_noise"] = ort_moves(model_file, folder, "ort_noise", noisy, want["ort_level"], outputs)
        if want["fusion"] and want["ort_level"] != "all":
            # How far ONNX Runtime moves when it runs the same model with its own graph
            # optimizations (QDQ pairs fused into int8 kernels, integer sums requantized once):
            # the rounding a fused int8 path may legitimately change on these inputs.
            meta["ort_fusion"] = ort_moves(model_file, folder, "ort_fused", feeds, "all", outputs)
        with open(meta_path, "w") as f:
            json.dump(meta, f, indent=1)
        folders.append(folder)
    return folders


def fetch(models, all_models, cache, refs=True):
    """Fetches MODELS. Returns {id: error message} for those that could not be had;
    raises Unreachable when the registry or ONNX Runtime is missing and nothing else failed."""
    by_id = {m["id"]: m for m in all_models}
    version = ort_version() if refs else None
    errors, unreachable = {}, {}
    for m in models:
        try:
            path = ensure_model(cache, m, by_id)
            if refs:
                ensure_refs(cache, m, path, version)
        except W.Unreachable as e:
            unreachable[m["id"]] = str(e)
        except W.WildError as e:
            errors[m["id"]] = str(e)
        except Exception as e:  # an exporter or quantizer crash: name the model, keep going
            errors[m["id"]] = f"{type(e).__name__}: {e}"
    return errors, unreachable


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("ids", nargs="*", help="model ids (default: the CI subset, or all with --all)")
    ap.add_argument("--dir", help="cache folder (default: $HODU_WILD_DIR or ~/.cache/hodu/wild)")
    ap.add_argument("--all", action="store_true", help="the whole corpus")
    ap.add_argument("--ci", action="store_true", help="the CI subset (the default without ids)")
    ap.add_argument("--no-refs", action="store_true", help="models only, no inputs or ONNX Runtime outputs")
    ap.add_argument("--list", action="store_true", help="list the corpus and exit")
    args = ap.parse_args()
    try:
        all_models = W.load_manifest()
        models = W.select(all_models, args.ids, ci_only=not args.all)
    except W.WildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for m in models:
            print(f"{m['id']:28s} {'ci ' if m.get('ci') else '   '}{len(m['sizes']) or 1} size(s)  {m['exporter']}")
        return 0
    cache = W.cache_dir(args.dir)
    try:
        errors, unreachable = fetch(models, all_models, cache, refs=not args.no_refs)
    except W.Unreachable as e:
        print(f"SKIP: {e}", file=sys.stderr)
        return 77
    for mid, msg in errors.items():
        print(f"error: {mid}: {msg}", file=sys.stderr)
    for mid, msg in unreachable.items():
        print(f"unavailable: {mid}: {msg}", file=sys.stderr)
    print(f"fetch: {len(models) - len(errors) - len(unreachable)} of {len(models)} models ready in {cache}",
          file=sys.stderr)
    return 1 if errors else (77 if unreachable else 0)


if __name__ == "__main__":
    sys.exit(main())
