"""torch.ops.hodu.*: hodu's kernels as PyTorch operators. gradcheck in float64 for every op,
float32 results close to PyTorch's, the work done by hodu (seen in a hodu profile), an eager
model built from the ops trained like its torch twin, and the per-family policy (hodu kernel
names, "torch", "auto" with its logged choice)."""
import logging

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hodu  # noqa: E402
import hodu.torch  # noqa: E402
from hodu.policies import KernelPolicy  # noqa: E402
from torch_models import dispatched  # noqa: E402

ops = torch.ops.hodu


@pytest.fixture(autouse=True)
def default_policy():
    hodu.torch.ops.set_policy(None)
    yield
    hodu.torch.ops.set_policy(None)


def r(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


# (id, hodu op call, torch equivalent, input shapes)
CASES = [
    ("matmul", lambda a, b: ops.matmul(a, b), torch.matmul, [(3, 4), (4, 5)]),
    ("matmul-batched", lambda a, b: ops.matmul(a, b), torch.matmul, [(2, 3, 4), (4, 5)]),
    ("linear", lambda x, w, b: ops.linear(x, w, b), F.linear, [(3, 4), (5, 4), (5,)]),
    ("linear-nobias", lambda x, w: ops.linear(x, w), F.linear, [(2, 3, 4), (5, 4)]),
    ("conv2d", lambda x, w, b: ops.conv2d(x, w, b, [2, 1], [1, 1]),
     lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 1)), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]),
    ("conv2d-groups", lambda x, w: ops.conv2d(x, w, None, 1, 0, 2, 2),
     lambda x, w: F.conv2d(x, w, None, 1, 0, 2, 2), [(1, 4, 7, 7), (6, 2, 3, 3)]),
    ("attention", lambda q, k, v: ops.attention(q, k, v),
     lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v, [(2, 2, 5, 8)] * 3),
    ("attention-causal-mask", lambda q, k, v, m: ops.attention(q, k, v, m, causal=True),
     lambda q, k, v, m: torch.softmax((q @ k.transpose(-1, -2) / 8 ** 0.5 + m).masked_fill(
         torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf")), -1) @ v, [(2, 2, 5, 8)] * 3 + [(5, 5)]),
    ("layer_norm", lambda x, w, b: ops.layer_norm(x, [6], w, b), lambda x, w, b: F.layer_norm(x, [6], w, b),
     [(3, 6), (6,), (6,)]),
    ("layer_norm-2d-noaffine", lambda x: ops.layer_norm(x, [3, 6], eps=1e-3),
     lambda x: F.layer_norm(x, [3, 6], eps=1e-3), [(2, 3, 6)]),
    ("gelu", lambda x: ops.gelu(x), F.gelu, [(3, 6)]),
    ("gelu-tanh", lambda x: ops.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"), [(3, 6)]),
    ("softmax", lambda x: ops.softmax(x, 1), lambda x: torch.softmax(x, 1), [(3, 6, 2)]),
]


@pytest.mark.parametrize("op,expected,shapes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gradcheck_f64(op, expected, shapes):
    torch.manual_seed(0)
    args = [r(*s) for s in shapes]
    assert torch.autograd.gradcheck(op, args)
    torch.testing.assert_close(op(*args), expected(*args), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("op,expected,shapes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_f32_follows_torch(op, expected, shapes):
    torch.manual_seed(0)
    args = [r(*s, dtype=torch.float32) for s in shapes]
    out = op(*args)
    want = expected(*args)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(want)
    got_grads = torch.autograd.grad(out, args, g)
    want_grads = torch.autograd.grad(want, args, g)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_hodu_does_the_work_and_policy_picks_kernels(tmp_path):
    x, w = torch.randn(2, 3, 8, 8, requires_grad=True), torch.randn(4, 3, 3, 3, requires_grad=True)
    # The default: the C++ extension's kernels (no engine, so no dispatch events), else (the op
    # registered from Python) the op compiled on hodu's engine, oneDNN's kernels by default.
    seen = dispatched(lambda: ops.conv2d(x, w).sum().backward(), tmp_path / "trace.json")
    if hodu.torch.ops.backend() == "extension":
        assert seen == {}, seen
        assert "hodu_torch_ops::Conv2dFn" in ops.conv2d(x, w).grad_fn.name()
    else:
        assert "onednn" in seen.get("Conv", set()) | seen.get("FusedConv", set()), seen
    # A kernel name: the op compiled on hodu's engine with that kernel, forward and backward.
    hodu.torch.ops.set_policy(KernelPolicy(conv="onednn"))
    seen = dispatched(lambda: ops.conv2d(x, w).sum().backward(), tmp_path / "trace.json")
    assert "onednn" in seen.get("Conv", set()) | seen.get("FusedConv", set()), seen
    assert seen.get("ConvGrad") == {"onednn"}, seen
    hodu.torch.ops.set_policy(KernelPolicy(conv="reference"))
    seen = dispatched(lambda: ops.conv2d(x, w).sum().backward(), tmp_path / "trace.json")
    assert seen.get("ConvGrad") == {"reference"}, seen
    assert (seen.get("Conv", set()) | seen.get("FusedConv", set())) == {"reference"}, seen
    # "torch": PyTorch's own kernel, nothing runs on hodu.
    hodu.torch.ops.set_policy({"conv": "torch"})
    assert dispatched(lambda: ops.conv2d(x, w).sum().backward(), tmp_path / "trace.json") == {}


def test_auto_times_and_logs_its_choice(caplog):
    hodu.torch.ops.set_policy({"matmul": "auto", "softmax": "auto"})
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    with caplog.at_level(logging.INFO, logger="hodu.torch"):
        y1 = ops.matmul(a, b)
        ops.softmax(a, -1)
        y2 = ops.matmul(a, b)  # the same shape: decided once
    chosen = hodu.torch.ops.choices()
    assert len(chosen) == 2, chosen
    key = next(k for k in chosen if k.startswith("matmul"))
    assert "float32[16, 32]xfloat32[32, 8]" in key and chosen[key] in ("hodu", "torch")
    assert sum("torch.ops.hodu auto" in m for m in caplog.messages) == 2, caplog.messages
    assert torch.equal(y1, y2)
    torch.testing.assert_close(y1, a @ b, rtol=1e-5, atol=1e-5)


def test_same_policy_bit_identical():
    x, w, b = torch.randn(8, 64), torch.randn(32, 64), torch.randn(32)
    for pol in (None, KernelPolicy(matmul="onednn"), KernelPolicy(matmul="reference")):
        hodu.torch.ops.set_policy(pol)
        first = ops.gelu(ops.linear(x, w, b))
        hodu.torch.ops.set_policy(pol)  # compiled afresh
        for _ in range(3):
            assert torch.equal(ops.gelu(ops.linear(x, w, b)), first)


class OpsBlock(nn.Module):
    """A transformer block written with torch.ops.hodu (use_hodu) or torch's functions."""

    def __init__(self, use_hodu, d=16, heads=2):
        super().__init__()
        self.use_hodu, self.heads = use_hodu, heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.ff = nn.Linear(d, d)
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        o = torch.ops.hodu if self.use_hodu else None
        b, s, d = x.shape
        h = o.layer_norm(x, [d], self.ln.weight, self.ln.bias) if o else self.ln(x)
        qkv = o.linear(h, self.qkv.weight, self.qkv.bias) if o else self.qkv(h)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in qkv.split(d, -1))
        a = (o.attention(q, k, v, causal=True) if o else
             F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention")
             else torch.softmax((q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5).masked_fill(
                 torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf")), -1) @ v)
        x = x + a.transpose(1, 2).reshape(b, s, d)
        f = o.gelu(o.linear(x, self.ff.weight, self.ff.bias)) if o else F.gelu(self.ff(x))
        logits = (o.linear(x + f, self.head.weight, self.head.bias) if o else self.head(x + f)).mean(1)
        return o.softmax(logits, -1) if o else torch.softmax(logits, -1)


def test_eager_model_with_ops_trains_like_torch():
    torch.manual_seed(0)
    hodu_model = OpsBlock(True)
    torch_model = OpsBlock(False)
    torch_model.load_state_dict(hodu_model.state_dict())
    opt_h = torch.optim.Adam(hodu_model.parameters(), lr=1e-2)
    opt_t = torch.optim.Adam(torch_model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for step in range(10):
        x, y = torch.randn(4, 6, 16, generator=g), torch.randint(0, 4, (4,), generator=g)
        losses = []
        for m, opt in ((hodu_model, opt_h), (torch_model, opt_t)):
            opt.zero_grad()
            loss = F.nll_loss(torch.log(m(x)), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-4 * abs(losses[1]), (step, losses)


def test_bad_calls():
    # RuntimeErrors naming the op (hodu.InvalidArgumentError is one), from either registration.
    with pytest.raises(RuntimeError, match="torch.ops.hodu.matmul: .*(input 0 is torch.int64|self is Long)"):
        ops.matmul(torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(RuntimeError, match="torch.ops.hodu.conv2d: input must be 4-D"):
        ops.conv2d(torch.randn(8, 8), torch.randn(4, 3, 3, 3))
    with pytest.raises(RuntimeError, match="torch.ops.hodu.gelu: approximate"):
        ops.gelu(torch.randn(3), approximate="fast")
    with pytest.raises(hodu.InvalidArgumentError, match="no family"):
        hodu.torch.ops.set_policy({"Relu": "onednn"})
    with pytest.raises(hodu.InvalidArgumentError, match="stand alone"):
        hodu.torch.ops.set_policy({"matmul": ["torch", "onednn"]})
    with pytest.raises(hodu.InvalidArgumentError, match="stand alone"):
        hodu.torch.ops.set_policy({"matmul": ["extension", "onednn"]})
    with pytest.raises(RuntimeError):  # the schema: torch's own error
        ops.softmax(torch.randn(3))
