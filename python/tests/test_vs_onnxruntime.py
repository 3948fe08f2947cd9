"""hodu.InferenceSession against ONNX Runtime 1.30 (tests/ort/ort_run.js, the project's oracle) on real models."""
import glob
import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest

import hodu
from conftest import SOURCE_DIR

ORT_DIR = os.path.join(SOURCE_DIR, "tests", "ort")
ONNX_TO_NUMPY = {1: np.float32, 7: np.int64, 6: np.int32, 9: np.bool_, 11: np.float64}

pytestmark = pytest.mark.skipif(
    not (shutil.which("node") and os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node"))),
    reason="ONNX Runtime (tests/ort/node_modules) or node is not installed")


def ort_run(model, feeds, tmp_path):
    args = []
    for name, x in feeds.items():
        path = tmp_path / f"in_{len(args)}.npy"
        np.save(path, x)
        args.append(f"{name}={path}")
    out_dir = tmp_path / "ort"
    r = subprocess.run(["node", os.path.join(ORT_DIR, "ort_run.js"), model, str(out_dir), "--threads", "1", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out_dir


def sanitize(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def rel_l2(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


MODELS = [os.path.join(SOURCE_DIR, "examples", "models", "tiny_cnn.onnx")] + sorted(
    p for p in glob.glob("/work/shared/onnx-tests/light/*.onnx") if os.path.getsize(p) < 64_000)


ENGINES = [e["name"] for e in hodu.runtime.engines() if e["name"] in ("interp", "cpu")]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model", MODELS, ids=os.path.basename)
def test_matches_onnxruntime(model, engine, tmp_path):
    if not os.path.exists(model):
        pytest.skip(f"{model} not found")
    proto = onnx.load(model, load_external_data=False)
    inits = {i.name for i in proto.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in proto.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
        feeds[inp.name] = rng.standard_normal(shape).astype(ONNX_TO_NUMPY[tt.elem_type])
    sess = hodu.InferenceSession(model, threads=1, engine=engine)
    outputs = sess.run(None, feeds)
    ort_dir = ort_run(model, feeds, tmp_path)
    for meta, got in zip(sess.get_outputs(), outputs):
        want = np.load(ort_dir / (sanitize(meta.name) + ".npy"))
        assert got.shape == want.shape and got.dtype == want.dtype
        err = rel_l2(got, want)
        assert err <= 1e-4, (meta.name, err)
