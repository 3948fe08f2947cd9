#!/usr/bin/env python3
"""Checks that run_wild.py can fail: its comparison, its classification of
refusals and crashes, the expected-failures bookkeeping, and, on a small model
run by the real hodu, that a reference off by 1% is reported WRONG on every
engine while the true reference passes. Offline; no ONNX Runtime needed.

usage: selftest.py --hodu BIN
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_wild as R  # noqa: E402
import wildlib as W  # noqa: E402

failures = []


def check(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        failures.append(what)


def test_compare():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    check(W.compare(a, a)[0] == 0.0, "compare: identical arrays have rel-L2 0")
    check(W.compare(a * 1.01, a)[0] > 5e-3, "compare: a 1% error is seen")
    check(W.compare(a.reshape(4, 3), a)[2] is not None, "compare: a shape mismatch is a problem")
    check(W.compare(a.astype(np.float64), a)[2] is not None, "compare: a dtype mismatch is a problem")
    b = a.copy()
    b[0, 0] = np.nan
    check(W.compare(a, b)[2] is not None, "compare: NaN where the reference has none is a problem")
    check(W.compare(b, b)[2] is None, "compare: NaN at the same places is fine")
    check(W.compare(np.array([1, 2], np.int64), np.array([1, 3], np.int64))[0] == 0.5,
          "compare: integer outputs count differing elements")


def test_classify():
    sh = ["/bin/sh", "-c"]
    check(R.run_cmd(sh + ["exit 0"], 10)[0] == "ok", "run_cmd: exit 0 is ok")
    s, msg, _ = R.run_cmd(sh + ["echo 'error: node n (Foo): op not supported' >&2; exit 1"], 10)
    check(s == "refused" and "Foo" in msg, "run_cmd: exit 1 with an error: line is a refusal naming the op")
    s, msg, _ = R.run_cmd(sh + ["echo 'error: input is used before node n produces it' >&2; exit 1"], 10)
    check(s == "rejected", "run_cmd: an error: that names nothing unsupported rejects a valid model")
    check(R.run_cmd(sh + ["echo oops >&2; exit 1"], 10)[0] == "crash", "run_cmd: exit 1 without error: is a crash")
    check(R.run_cmd(sh + ["kill -SEGV $$"], 10)[0] == "crash", "run_cmd: a signal is a crash")
    check(R.run_cmd(sh + ["sleep 5"], 1)[0] == "crash", "run_cmd: a timeout is a crash")


def test_expected():
    rs = [R.Result("m", {"batch": 1}, "O2", "WRONG"), R.Result("m", {"batch": 3}, "O2", "ok"),
          R.Result("m", {"batch": 3}, "O1", "ok")]
    R.apply_expected(rs, [("m", "O2", "*", "known", 7)])
    check([r.status for r in rs] == ["xfail", "XPASS", "ok"], "expected failures: WRONG -> xfail, ok -> XPASS")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("m O2 *\n")
    try:
        R.load_expected(f.name, {"m"})
        check(False, "expected failures: a line without a reason is refused")
    except W.WildError:
        check(True, "expected failures: a line without a reason is refused")
    os.remove(f.name)


def tiny_model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["out"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 5])], [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return w


def test_end_to_end(hodu):
    with tempfile.TemporaryDirectory() as cache:
        model = {"id": "tiny", "inputs": {"x": {"dtype": "float32", "shape": ["batch", 8], "gen": "normal"}},
                 "sizes": [{"batch": 3}], "tolerance": {"rel_l2": 1e-4, "reason": "test"}}
        os.makedirs(os.path.join(cache, "models"))
        path = W.model_path(cache, model)
        w = tiny_model(path)
        size = model["sizes"][0]
        folder = os.path.join(cache, "data", "tiny", W.size_tag(size))
        os.makedirs(os.path.join(folder, "inputs"))
        os.makedirs(os.path.join(folder, "ort"))
        x = W.make_input("tiny", "x", model["inputs"]["x"], size)
        np.save(os.path.join(folder, "inputs", "x.npy"), x)
        truth = np.maximum(x @ w, 0).astype(np.float32)
        with open(os.path.join(folder, "meta.json"), "w") as f:
            json.dump({"size": size, "outputs": ["out"]}, f)
        args = argparse.Namespace(hodu=hodu, python_dir=None, threads=1, timeout=120,
                                  engines=["interp", "O0", "O2", "so", "free"])
        runner = R.Runner(args, cache)
        np.save(os.path.join(folder, "ort", "out.npy"), truth)
        rs = runner.run_size(model, path, folder)
        check([r.status for r in rs] == ["ok"] * 5, f"end to end: the true reference passes ({[r.status for r in rs]})")
        np.save(os.path.join(folder, "ort", "out.npy"), truth * 1.01)
        rs = runner.run_size(model, path, folder)
        check([r.status for r in rs] == ["WRONG"] * 5 and "'out'" in rs[0].detail,
              f"end to end: a reference 1% off is WRONG on every engine ({[r.status for r in rs]})")
        np.save(os.path.join(folder, "ort", "out.npy"), truth[:2])
        rs = runner.run_size(model, path, folder)
        check(all(r.status == "WRONG" and "shape" in r.detail for r in rs), "end to end: a shape mismatch is WRONG")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hodu", required=True)
    args = ap.parse_args()
    test_compare()
    test_classify()
    test_expected()
    test_end_to_end(os.path.abspath(args.hodu))
    print(f"{len(failures)} failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
