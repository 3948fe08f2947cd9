"""Kernel policies with hodu.torch.compile: families of ops (matmul, conv, softmax, ...) pick
the kernels hodu runs, the choice shows in a profile, a policy round-trips through JSON,
and the same policy gives bit-identical results run to run (forward and gradients)."""
import json

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import hodu  # noqa: E402
import hodu.torch  # noqa: E402
from hodu.errors import InvalidArgumentError  # noqa: E402
from hodu.policies import KernelPolicy, Policy  # noqa: E402
from torch_models import CNN, Transformer, cnn_batches, dispatched, token_batches  # noqa: E402


def kernels_run(compiled, x, tmp_path):
    """{op: {kernels}} the dispatcher chose for one forward and backward."""
    return dispatched(lambda: F.cross_entropy(compiled(x), torch.zeros(x.shape[0], dtype=torch.long)).backward(),
                      tmp_path / "trace.json")


def test_kernel_policy_families_json(tmp_path):
    k = KernelPolicy(matmul="reference", conv=["onednn", "reference"], softmax="hodu", precision="fp32")
    assert k["MatMul"] == ["reference"] and k.precision == "fp32"
    assert KernelPolicy.from_json(k.to_json()) == k
    k.save(tmp_path / "k.json")
    assert KernelPolicy.load(tmp_path / "k.json") == k
    assert json.loads((tmp_path / "k.json").read_text())["kernels"]["precision"] == "fp32"
    with pytest.raises(InvalidArgumentError, match="precision"):
        KernelPolicy(matmul="onednn", precision="fp64")
    # Kernel names are checked against the registry when a session is made.
    torch.manual_seed(0)
    with pytest.raises(hodu.HoduError, match="no kernel 'cudnn' is registered for op family 'conv'"):
        hodu.torch.compile(CNN(), cnn_batches(1, 4)[0][0], policy=KernelPolicy(conv="cudnn"))
    with pytest.raises(hodu.HoduError, match="unknown op 'matmull'"):
        hodu.torch.compile(CNN(), cnn_batches(1, 4)[0][0], policy=KernelPolicy(matmull="onednn"))


def test_policy_chooses_the_kernels(tmp_path):
    torch.manual_seed(0)
    x = cnn_batches(1, 4)[0][0]
    model = CNN()
    default = kernels_run(hodu.torch.compile(model, x), x, tmp_path)
    assert default["FusedConv"] == {"onednn"} and default["ConvGrad"] == {"onednn"}, default
    ref = kernels_run(hodu.torch.compile(model, x, policy=KernelPolicy(conv="reference", matmul="reference")),
                      x, tmp_path)
    # The families: conv covers FusedConv and ConvGrad, matmul the Gemms and MatMuls.
    for op in ("FusedConv", "ConvGrad", "Gemm", "FusedGemm", "MatMul", "FusedMatMul"):
        if op in ref:
            assert ref[op] == {"reference"}, (op, ref)
    assert "FusedConv" in ref and "ConvGrad" in ref, ref
    assert ref["MaxPool"] == {"onednn"}, ref  # outside the policy: the default


@pytest.mark.parametrize("make,batches,policy", [
    (CNN, cnn_batches(1, 8), None),
    (CNN, cnn_batches(1, 8), KernelPolicy(conv="reference", matmul="auto")),
    (Transformer, token_batches(1, 8), KernelPolicy(matmul="onednn", softmax="hodu", layer_norm="hodu")),
    (Transformer, token_batches(1, 8), Policy(kernels=KernelPolicy(matmul="reference"))),
], ids=["cnn-default", "cnn-reference-conv", "transformer-onednn", "transformer-reference-matmul"])
def test_same_policy_bit_identical(make, batches, policy, tmp_path):
    """Two modules compiled with the same policy, each run twice: the same bits, forward and
    gradients; and close to eager torch whichever kernels the policy picks."""
    if policy is not None:
        policy.save(tmp_path / "p.json")
        policy = type(policy).load(tmp_path / "p.json")
    torch.manual_seed(0)
    model = make()
    x, y = batches[0]
    results = []
    for _ in range(2):
        compiled = hodu.torch.compile(model, x, policy=policy, threads=2)
        for _ in range(2):
            model.zero_grad()
            out = compiled(x)
            F.cross_entropy(out, y).backward()
            results.append([out.detach().clone()] + [p.grad.clone() for p in model.parameters()])
    for r in results[1:]:
        for a, b in zip(results[0], r):
            assert torch.equal(a, b)
    model.zero_grad()
    eager = model(x)
    assert float((results[0][0] - eager).abs().max()) < 1e-4
