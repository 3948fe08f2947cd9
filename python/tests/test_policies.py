"""hodu.policies: construction, validation messages, JSON round trip, files, equality, use by sessions."""
import json
import os
import subprocess

import numpy as np
import pytest

import hodu
from hodu.policies import ExecutionPolicy, KernelPolicy, Policy


def test_kernel_policy():
    p = KernelPolicy(matmul="cublasLt", Conv=["onednn", "reference"])
    assert p["MatMul"] == ["cublasLt"] and p["conv"] == ["onednn", "reference"]
    assert "MATMUL" in p and "Relu" not in p and len(p) == 2
    assert p == KernelPolicy({"matmul": ["cublasLt"], "Conv": ["onednn", "reference"]})
    assert p != KernelPolicy(matmul="cublas")
    assert KernelPolicy.from_json(p.to_json()) == p


def test_kernel_policy_validation():
    with pytest.raises(hodu.InvalidArgumentError, match="'Conv' must be a kernel name or a list of names"):
        KernelPolicy(Conv=3)
    with pytest.raises(hodu.InvalidArgumentError):
        KernelPolicy(Conv="")
    with pytest.raises(hodu.InvalidArgumentError):
        KernelPolicy({"conv": "a", "CONV": "b"})  # the same op twice
    with pytest.raises(hodu.InvalidArgumentError, match="expected a dict"):
        KernelPolicy(["Conv"])


def test_execution_policy():
    p = ExecutionPolicy(threads=np.int64(2), precision="FP16")
    assert p.threads == 2 and p.precision == "fp16" and p.device == "cpu" and p.cuda_graphs is False
    assert ExecutionPolicy.from_json(p.to_json()) == p
    assert p.replace(threads=4).threads == 4 and p.threads == 2
    assert p != ExecutionPolicy()


@pytest.mark.parametrize("kwargs,message", [
    ({"precision": "fp8"}, "precision"),
    ({"threads": -1}, "threads"),
    ({"threads": "2"}, "'threads' must be an integer"),
    ({"cuda_graphs": "yes"}, "cuda_graphs"),
    ({"device": "tpu"}, "tpu"),
    ({"cuda_graphs": True, "device": "cpu"}, "cuda"),
])
def test_execution_policy_validation(kwargs, message):
    with pytest.raises(hodu.InvalidArgumentError, match=message):
        ExecutionPolicy(**kwargs)


def test_unknown_fields():
    with pytest.raises(hodu.InvalidArgumentError, match="unknown field"):
        ExecutionPolicy.from_json({"thread": 2})
    with pytest.raises(hodu.InvalidArgumentError, match="unknown key"):
        Policy.from_json({"execution": {}, "kernel": {}})
    with pytest.raises(TypeError):
        ExecutionPolicy(thread=2)


def test_files(tmp_path):
    k = KernelPolicy(MatMul="reference")
    e = ExecutionPolicy(threads=1, deterministic=True)
    both = Policy(e, k)
    for obj in (k, e, both):
        path = tmp_path / f"{type(obj).__name__}.json"
        obj.save(path)
        assert type(obj).load(path) == obj
        json.loads(path.read_text())  # plain JSON
    assert Policy.load(tmp_path / "KernelPolicy.json").kernels == k
    assert KernelPolicy.load(tmp_path / "Policy.json") == k
    assert ExecutionPolicy.load(tmp_path / "Policy.json") == e
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(hodu.InvalidArgumentError, match="not valid JSON"):
        Policy.load(tmp_path / "broken.json")
    with pytest.raises(hodu.IoError):
        Policy.load(tmp_path / "missing.json")


def test_session_uses_policy(add_model, tmp_path):
    x = np.ones((1, 3), np.float32)
    s = hodu.InferenceSession(add_model, policy=ExecutionPolicy(threads=1, engine="interp"))
    assert s.threads == 1 and s.engine == "interp"
    np.testing.assert_array_equal(s.run(None, {"x": x, "y": x})[0], 2 * x)
    # Explicit arguments win over the policy's fields.
    assert hodu.InferenceSession(add_model, threads=2, policy=ExecutionPolicy(threads=1)).threads == 2
    # A policy file path and a dict work too.
    Policy(ExecutionPolicy(threads=1)).save(tmp_path / "p.json")
    assert hodu.InferenceSession(add_model, policy=str(tmp_path / "p.json")).threads == 1
    assert hodu.InferenceSession(add_model, policy={"execution": {"threads": 1}}).threads == 1
    s = hodu.InferenceSession(add_model, policy=KernelPolicy(Add="reference"), engine="interp")
    assert s.policy.kernels == KernelPolicy(Add="reference")


def test_impossible_policies(add_model):
    with pytest.raises(hodu.InvalidArgumentError, match="no_such_kernel"):
        hodu.InferenceSession(add_model, policy=KernelPolicy(Add="no_such_kernel"))
    with pytest.raises(hodu.UnsupportedOperationError):
        hodu.InferenceSession(add_model, policy=ExecutionPolicy(precision="fp16", engine="interp"))
    with pytest.raises(hodu.InvalidArgumentError, match="policy must be"):
        hodu.InferenceSession(add_model, policy=42)
    assert Policy(kernels=KernelPolicy(Add="reference")).check() in [e["name"] for e in hodu.runtime.engines()]


def test_policy_file_works_with_cli(add_model, tmp_path):
    cli = os.environ.get("HODU_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("HODU_CLI (the hodu binary) not given")
    help_text = subprocess.run([cli, "run", "--help"], capture_output=True, text=True).stdout
    if "--policy" not in help_text:
        pytest.skip("this hodu binary has no --policy option")
    Policy(ExecutionPolicy(threads=1), KernelPolicy(Add="reference")).save(tmp_path / "p.json")
    np.save(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    r = subprocess.run([cli, "run", add_model, "-i", f"x={tmp_path / 'x.npy'}", "-i", f"y={tmp_path / 'x.npy'}",
                        "--policy", str(tmp_path / "p.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
