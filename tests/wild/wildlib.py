"""Shared pieces of the models-from-the-wild corpus: the manifest, the cache
layout, seeded input generation and output comparison.

Used by fetch.py (downloads, exports, ONNX Runtime references) and
run_wild.py (the differential test). Debian's /usr/bin/python3 with numpy.
"""
import hashlib
import json
import os
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MANIFEST = os.path.join(HERE, "models.json")
ORT_DIR = os.path.join(REPO, "tests", "ort")
NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
                "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


# Bump when make_input's output changes, so cached inputs and references are remade.
INPUTS_VERSION = 2


class WildError(Exception):
    """A corpus problem with a message for the user (bad manifest, failed download...)."""


class Unreachable(WildError):
    """The npm registry could not be reached: the test skips instead of failing."""


def cache_dir(override=None):
    return os.path.abspath(override or os.environ.get("HODU_WILD_DIR") or
                           os.path.join(os.path.expanduser("~"), ".cache", "hodu", "wild"))


def load_manifest(path=MANIFEST):
    with open(path) as f:
        doc = json.load(f)
    models = doc["models"]
    seen = set()
    for m in models:
        for key in ("id", "exporter", "opset", "ops", "why", "inputs", "sizes", "tolerance"):
            if key not in m:
                raise WildError(f"{path}: model {m.get('id', '?')} has no '{key}'")
        if m["id"] in seen:
            raise WildError(f"{path}: model id {m['id']} appears twice")
        seen.add(m["id"])
        if sum(k in m for k in ("npm", "torch", "derived")) != 1:
            raise WildError(f"{path}: model {m['id']} needs exactly one of npm, torch, derived")
        if "reason" not in m["tolerance"]:
            raise WildError(f"{path}: model {m['id']}: the tolerance needs a written reason")
    return models


def select(models, ids=None, ci_only=False):
    if ids:
        by_id = {m["id"]: m for m in models}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise WildError(f"unknown model id(s): {', '.join(missing)} (see tests/wild/models.json)")
        return [by_id[i] for i in ids]
    return [m for m in models if m.get("ci")] if ci_only else list(models)


def model_path(cache, model):
    return os.path.join(cache, "models", model["id"] + ".onnx")


def size_tag(size):
    """A folder name for one bound size, e.g. batch1_samples512."""
    if not size:
        return "static"
    return "_".join(f"{k}{v}" for k, v in size.items())


def size_text(size):
    return ",".join(f"{k}={v}" for k, v in size.items()) if size else "static"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sanitize(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def resolve_shape(shape, size):
    out = []
    for d in shape:
        if isinstance(d, str):
            if d not in size:
                raise WildError(f"shape dim '{d}' is not bound by size {size_text(size)}")
            out.append(int(size[d]))
        else:
            out.append(int(d))
    return out


def make_input(model_id, name, spec, size, seed=0):
    """The seeded input NAME of MODEL_ID at SIZE, following its generation rule."""
    dtype = NUMPY_DTYPES[spec["dtype"]]
    shape = resolve_shape(spec.get("shape", []), size)
    rng = np.random.default_rng([seed, zlib.crc32(f"{model_id}/{name}/{size_tag(size)}".encode())])
    gen = spec["gen"]
    if gen == "const":
        value = spec["value"]
        value = size[value] if isinstance(value, str) else value
        x = np.full(shape, value)
    elif gen == "zeros":
        x = np.zeros(shape)
    elif gen == "ones":
        x = np.ones(shape)
    elif gen == "uniform":      # [lo, hi): images in [0,1], normalized images in [-1,1]
        lo, hi = spec.get("range", [0.0, 1.0])
        x = rng.uniform(lo, hi, shape)
    elif gen == "normal":       # mean/std-normalized images, embeddings
        x = rng.standard_normal(shape) * spec.get("std", 1.0) + spec.get("mean", 0.0)
    elif gen == "audio":        # speech-like: a few tones plus noise, peak 0.9, in [-1, 1]
        t = np.arange(shape[-1]) / float(spec.get("rate", 16000))
        x = np.zeros(shape)
        for _ in range(3):
            f = rng.uniform(80, 3000, shape[:-1] + [1])
            x += rng.uniform(0.1, 0.3, shape[:-1] + [1]) * np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3))
        x += 0.05 * rng.standard_normal(shape)
        x = 0.9 * x / max(np.abs(x).max(), 1e-9)
    elif gen == "strokes":      # text-like image [N, C, H, W]: dark stroke runs on a light page, then noise
        lo, hi = spec.get("range", [-1.0, 1.0])
        x = np.full(shape, lo + 0.9 * (hi - lo))
        n, _, h, w = shape
        for i in range(n):
            for _ in range(max(1, h * w // 8000)):
                lh = int(rng.integers(max(2, min(h // 2, 8)), max(3, min(int(0.7 * h), 20)) + 1))
                y0, x0 = int(rng.integers(0, max(1, h - lh))), int(rng.integers(0, max(1, w // 2)))
                length = int(rng.integers(min(w - x0, 24), min(w - x0, max(40, w // 3)) + 1))
                for k in range(x0, x0 + length, 6):
                    x[i, :, y0:y0 + lh, k:k + 3] = lo + 0.1 * (hi - lo)
        x += rng.normal(0.0, 0.025 * (hi - lo), shape)
    elif gen == "photo":        # a real photograph [N, 3, H, W] in [0, 1] (scikit-learn's sample china.jpg)
        from PIL import Image
        from sklearn.datasets import load_sample_image
        n, c, h, w = shape
        img = Image.fromarray(load_sample_image(spec.get("image", "china.jpg"))).resize((w, h), Image.BILINEAR)
        x = np.broadcast_to(np.asarray(img, dtype=np.float32).transpose(2, 0, 1)[:c] / 255.0, shape)
    elif gen == "tokens":       # token ids in [lo, hi)
        lo, hi = spec["range"]
        x = rng.integers(lo, hi, shape)
    elif gen == "mask":         # attention mask of ones, the last `pad` positions of row 0 zero when given
        x = np.ones(shape)
        pad = int(spec.get("pad", 0))
        if pad and len(shape) == 2 and shape[1] > pad:
            x[0, shape[1] - pad:] = 0
    else:
        raise WildError(f"{model_id}: input {name}: unknown generation rule '{gen}'")
    return np.array(x, dtype=dtype, order="C")  # not ascontiguousarray: it makes scalars 1-D


def one_ulp_noise(x, seed):
    """X moved by one ulp up or down per element (floats only): how far the oracle moves."""
    if not np.issubdtype(x.dtype, np.floating):
        return x
    rng = np.random.default_rng(seed)
    direction = np.where(rng.integers(0, 2, x.shape) == 1, np.inf, -np.inf).astype(x.dtype)
    return np.nextafter(x, direction).astype(x.dtype)


def compare(actual, expected):
    """(rel_l2, max_abs, problem): problem is None when shapes and dtypes agree."""
    if actual.shape != expected.shape:
        return float("inf"), float("inf"), f"shape {list(actual.shape)} vs {list(expected.shape)}"
    if actual.dtype != expected.dtype:
        return float("inf"), float("inf"), f"dtype {actual.dtype} vs {expected.dtype}"
    if expected.size == 0:
        return 0.0, 0.0, None
    if not np.issubdtype(expected.dtype, np.floating):
        diff = np.count_nonzero(actual != expected)
        return (float(diff) / expected.size, float(np.max(np.abs(actual.astype(np.float64) - expected))) if diff else 0.0,
                None)
    a = actual.astype(np.float64).ravel()
    b = expected.astype(np.float64).ravel()
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if np.any(nan_a != nan_b):
        return float("inf"), float("inf"), f"NaN at {int(np.count_nonzero(nan_a != nan_b))} positions differ"
    keep = ~nan_b
    a, b = a[keep], b[keep]
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    if np.any(inf_a != inf_b) or np.any(a[inf_b] != b[inf_b]):
        return float("inf"), float("inf"), "infinities differ"
    a, b = a[~inf_b], b[~inf_b]
    if b.size == 0:
        return 0.0, 0.0, None
    diff = a - b
    den = np.linalg.norm(b)
    rel = float(np.linalg.norm(diff) / den) if den > 0 else float(np.linalg.norm(diff))
    return rel, float(np.max(np.abs(diff))), None
