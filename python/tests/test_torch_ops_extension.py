"""torch.ops.hodu from the C++ extension (python/torch_ops/hodu_torch_ops.cc): every op's forward
against torch's own function (float32, relative 1e-5, batched, broadcast, strided and
non-contiguous inputs), gradients in float64 by gradcheck and in float32 against torch's
autograd, no-grad and inference-mode calls, eager modules trained with torch.optim like their
torch twins, bad arguments as RuntimeErrors naming the op, and the Python registration that
takes over without the extension. Skipped (with the reason) where the extension was not built."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hodu.torch  # noqa: E402

ops = torch.ops.hodu
pytestmark = pytest.mark.skipif(hodu.torch.ops.backend() != "extension",
                                reason=f"torch.ops.hodu C++ extension not in use: {hodu.torch.ops.backend_note()}")


@pytest.fixture(autouse=True)
def default_policy():
    hodu.torch.ops.set_policy(None)
    yield
    hodu.torch.ops.set_policy(None)


def attention_ref(q, k, v, mask=None, causal=False):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if mask is not None:
        s = s + mask
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def strided(*shape):
    """A non-contiguous view of `shape`: every other element of a wider last dim."""
    return torch.randn(*shape[:-1], shape[-1] * 2)[..., ::2]


def transposed(*shape):
    """A view of `shape` whose last two dims are swapped in memory."""
    return torch.randn(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)


# (id, hodu call, torch's function, the inputs' makers): shapes with batches, broadcasts,
# 1-D promotion, strided, transposed and expanded (stride 0) inputs.
def R(*s):
    return lambda: torch.randn(*s)


CASES = [
    ("matmul-2d", ops.matmul, torch.matmul, [R(7, 5), R(5, 3)]),
    ("matmul-batch-broadcast", ops.matmul, torch.matmul, [R(2, 1, 4, 6), R(3, 6, 5)]),
    ("matmul-vec-mat", ops.matmul, torch.matmul, [R(6), R(2, 6, 4)]),
    ("matmul-mat-vec", ops.matmul, torch.matmul, [R(2, 3, 6), R(6)]),
    ("matmul-dot", ops.matmul, torch.matmul, [R(6), R(6)]),
    ("matmul-transposed", ops.matmul, torch.matmul, [lambda: transposed(2, 5, 6), lambda: transposed(6, 4)]),
    ("matmul-strided", ops.matmul, torch.matmul, [lambda: strided(3, 5, 6), lambda: strided(6, 4)]),
    ("matmul-expanded", ops.matmul, torch.matmul, [lambda: torch.randn(1, 5, 6).expand(3, 5, 6), R(6, 2)]),
    ("linear", ops.linear, F.linear, [R(4, 6), R(3, 6), R(3)]),
    ("linear-3d-nobias", ops.linear, F.linear, [R(2, 5, 6), R(3, 6)]),
    ("linear-1d", ops.linear, F.linear, [R(6), R(3, 6), R(3)]),
    ("linear-strided-weight-t", ops.linear, F.linear, [lambda: strided(2, 3, 6), lambda: transposed(3, 6), R(3)]),
    ("conv2d", lambda x, w, b: ops.conv2d(x, w, b, [2, 1], [1, 2]),
     lambda x, w, b: F.conv2d(x, w, b, (2, 1), (1, 2)), [R(2, 3, 9, 8), R(5, 3, 3, 2), R(5)]),
    ("conv2d-groups-dilation", lambda x, w: ops.conv2d(x, w, None, 1, 1, 2, 2),
     lambda x, w: F.conv2d(x, w, None, 1, 1, 2, 2), [R(1, 4, 9, 9), R(6, 2, 3, 3)]),
    ("conv2d-unbatched", lambda x, w, b: ops.conv2d(x, w, b, 1, 1), lambda x, w, b: F.conv2d(x, w, b, 1, 1),
     [R(3, 7, 7), R(4, 3, 3, 3), R(4)]),
    ("conv2d-channels-last", lambda x, w: ops.conv2d(x, w), lambda x, w: F.conv2d(x, w),
     [lambda: torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last), R(4, 3, 3, 3)]),
    ("attention", ops.attention, attention_ref, [R(2, 3, 5, 8), R(2, 3, 7, 8), R(2, 3, 7, 4)]),
    ("attention-mask-causal", lambda q, k, v, m: ops.attention(q, k, v, m, causal=True),
     lambda q, k, v, m: attention_ref(q, k, v, m, causal=True), [R(2, 2, 6, 8), R(2, 2, 6, 8), R(2, 2, 6, 8), R(6, 6)]),
    ("attention-3d-broadcast-mask", ops.attention, attention_ref, [R(3, 5, 8), R(3, 4, 8), R(3, 4, 8), R(1, 5, 4)]),
    ("attention-head-views", ops.attention, attention_ref,
     [lambda: torch.randn(2, 5, 2, 8).transpose(1, 2)] * 3),
    ("layer_norm", lambda x, w, b: ops.layer_norm(x, [6], w, b), lambda x, w, b: F.layer_norm(x, [6], w, b),
     [R(3, 4, 6), R(6), R(6)]),
    ("layer_norm-2d-noaffine-eps", lambda x: ops.layer_norm(x, [3, 6], eps=1e-3),
     lambda x: F.layer_norm(x, [3, 6], eps=1e-3), [R(2, 3, 6)]),
    ("layer_norm-bias-only-strided", lambda x, b: ops.layer_norm(x, [5], None, b),
     lambda x, b: F.layer_norm(x, [5], None, b), [lambda: strided(4, 5), R(5)]),
    ("gelu", ops.gelu, F.gelu, [R(3, 70)]),
    ("gelu-tanh-transposed", lambda x: ops.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"),
     [lambda: transposed(4, 9)]),
    ("softmax-last", lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1), [R(4, 33)]),
    ("softmax-dim1-strided", lambda x: ops.softmax(x, 1), lambda x: torch.softmax(x, 1), [lambda: strided(3, 6, 4)]),
    ("softmax-dim0", lambda x: ops.softmax(x, 0), lambda x: torch.softmax(x, 0), [R(5, 3)]),
]
IDS = [c[0] for c in CASES]


def rel_err(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("op,ref,makers", [c[1:] for c in CASES], ids=IDS)
def test_forward_f32_matches_torch(op, ref, makers):
    torch.manual_seed(0)
    args = [m() for m in makers]
    got, want = op(*args), ref(*args)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert rel_err(got, want) <= 1e-5, rel_err(got, want)
    with torch.no_grad():  # the same kernels without autograd
        assert torch.equal(op(*args), got)
    with torch.inference_mode():  # below autograd: the CPU kernel
        assert torch.equal(op(*args), got)


@pytest.mark.parametrize("op,ref,makers", [c[1:] for c in CASES], ids=IDS)
def test_gradcheck_f64(op, ref, makers):
    torch.manual_seed(0)
    args = [m().double().requires_grad_() for m in makers]
    assert torch.autograd.gradcheck(op, args)


@pytest.mark.parametrize("op,ref,makers", [c[1:] for c in CASES], ids=IDS)
def test_gradients_f32_match_torch(op, ref, makers):
    torch.manual_seed(0)
    args = [m().requires_grad_() for m in makers]
    got, want = op(*args), ref(*args)
    assert got.grad_fn is not None and "hodu_torch_ops::" in got.grad_fn.name(), got.grad_fn.name()
    g = torch.randn_like(want)
    for a, b in zip(torch.autograd.grad(got, args, g), torch.autograd.grad(want, args, g)):
        assert a.shape == b.shape
        assert rel_err(a, b) <= 1e-4, rel_err(a, b)


def test_only_needed_gradients_and_outputs_are_plain_tensors():
    x, w = torch.randn(4, 6, requires_grad=True), torch.randn(3, 6)
    b = torch.randn(3, requires_grad=True)
    y = ops.linear(x, w, b)
    y.relu_()  # an output of the op can be changed in place (it is no view)
    y.sum().backward()
    assert x.grad is not None and b.grad is not None and w.grad is None
    torch.testing.assert_close(b.grad, (F.linear(x, w, b) > 0).float().sum(0))


def test_double_backward_is_refused_not_silently_wrong():
    x = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="torch.ops.hodu.gelu: backward with create_graph=True"):
        torch.autograd.grad(ops.gelu(x).sum(), x, create_graph=True)
    (g,) = torch.autograd.grad(ops.gelu(x).sum(), x)  # once is fine
    torch.testing.assert_close(g, torch.autograd.grad(F.gelu(x).sum(), x)[0], rtol=1e-5, atol=1e-6)


@torch.jit.script
def scripted_block(x, w, b):
    return torch.ops.hodu.softmax(torch.ops.hodu.gelu(torch.ops.hodu.linear(x, w, b), "tanh"), -1)


def test_ops_in_torchscript():
    # The schemas are C++ ones, so TorchScript compiles calls to them; autograd still works.
    x, w, b = torch.randn(4, 8, requires_grad=True), torch.randn(3, 8), torch.randn(3)
    y = scripted_block(x, w, b)
    assert rel_err(y, torch.softmax(F.gelu(F.linear(x, w, b), approximate="tanh"), -1)) <= 1e-5
    y[:, 0].sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_empty_inputs():
    assert ops.linear(torch.randn(0, 4), torch.randn(3, 4)).shape == (0, 3)
    assert ops.matmul(torch.randn(2, 0, 4), torch.randn(4, 3)).shape == (2, 0, 3)
    assert ops.softmax(torch.randn(0, 5), 1).shape == (0, 5)
    assert ops.conv2d(torch.randn(0, 3, 5, 5), torch.randn(2, 3, 3, 3)).shape == (0, 2, 3, 3)
    x = torch.randn(0, 6, requires_grad=True)
    ops.layer_norm(x, [6]).sum().backward()
    assert x.grad.shape == (0, 6)


class Net(nn.Module):
    """A small CNN + attention head written with torch.ops.hodu (use_hodu) or torch's functions."""

    def __init__(self, use_hodu):
        super().__init__()
        self.use_hodu = use_hodu
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.ln = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        o = torch.ops.hodu if self.use_hodu else None
        conv = o.conv2d if o else F.conv2d
        x = F.relu(conv(x, self.conv1.weight, self.conv1.bias, [1, 1], [1, 1]))
        x = conv(x, self.conv2.weight, self.conv2.bias, [2, 2], [1, 1])
        x = x.flatten(2).transpose(1, 2)  # [b, 16 positions, 16], a transposed view
        # (gelu after the transpose: Debian's torch 1.13 gets F.gelu's float32 backward wrong
        # when its incoming gradient is strided unlike its input, as a transpose after it makes.)
        x = o.gelu(x) if o else F.gelu(x)
        x = o.layer_norm(x, [16], self.ln.weight, self.ln.bias) if o else self.ln(x)
        q, k, v = (o.linear(x, self.qkv.weight, self.qkv.bias) if o else self.qkv(x)).split(16, -1)
        a = o.attention(q, k, v) if o else attention_ref(q, k, v)
        logits = (o.matmul(a.mean(1), self.head.weight.t()) if o else a.mean(1) @ self.head.weight.t()) + self.head.bias
        return o.softmax(logits, 1) if o else torch.softmax(logits, 1)


def test_eager_module_trains_like_torch():
    torch.manual_seed(0)
    hodu_net, torch_net = Net(True), Net(False)
    torch_net.load_state_dict(hodu_net.state_dict())
    opt_h = torch.optim.SGD(hodu_net.parameters(), lr=0.1, momentum=0.9)
    opt_t = torch.optim.SGD(torch_net.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(3)
    for step in range(8):
        x, y = torch.randn(6, 1, 8, 8, generator=g), torch.randint(0, 10, (6,), generator=g)
        losses = []
        for net, opt in ((hodu_net, opt_h), (torch_net, opt_t)):
            opt.zero_grad()
            loss = F.nll_loss(torch.log(net(x)), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-4 * abs(losses[1]), (step, losses)
    for (name, p), q in zip(hodu_net.named_parameters(), torch_net.parameters()):
        assert rel_err(p.detach(), q.detach()) <= 1e-4, name


BAD = [
    ("matmul", lambda: ops.matmul(torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2, dtype=torch.long)),
     "torch.ops.hodu.matmul: self is Long"),
    ("matmul", lambda: ops.matmul(torch.randn(3, 4), torch.randn(5, 2)), "torch.ops.hodu.matmul: shapes .* cannot"),
    ("matmul", lambda: ops.matmul(torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2)), "one dtype"),
    ("matmul", lambda: ops.matmul(torch.tensor(1.0), torch.randn(2)), "at least 1 dimension"),
    ("matmul", lambda: ops.matmul(torch.randn(2, 3, 4), torch.randn(5, 4, 6)),
     r"torch.ops.hodu.matmul: .*\[2\] and \[5\] do not broadcast"),
    ("linear", lambda: ops.linear(torch.randn(3, 4), torch.randn(4)), "torch.ops.hodu.linear: weight must be 2-D"),
    ("linear", lambda: ops.linear(torch.randn(3, 4), torch.randn(2, 5)), "torch.ops.hodu.linear: input's last dim"),
    ("linear", lambda: ops.linear(torch.randn(3, 4), torch.randn(2, 4), torch.randn(3)), "bias must be"),
    ("conv2d", lambda: ops.conv2d(torch.randn(8, 8), torch.randn(4, 3, 3, 3)), "torch.ops.hodu.conv2d: input must be 4-D"),
    ("conv2d", lambda: ops.conv2d(torch.randn(1, 4, 8, 8), torch.randn(4, 3, 3, 3)), "does not fit an input of 4"),
    ("conv2d", lambda: ops.conv2d(torch.randn(1, 3, 2, 2), torch.randn(4, 3, 3, 3)), "larger than the padded input"),
    ("conv2d", lambda: ops.conv2d(torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3), None, [0, 1]), "stride must be >= 1"),
    ("attention", lambda: ops.attention(torch.randn(5), torch.randn(5, 2), torch.randn(5, 2)), "at least 2-D"),
    ("attention", lambda: ops.attention(torch.randn(2, 4), torch.randn(3, 5), torch.randn(3, 5)), "last dim 4"),
    ("attention", lambda: ops.attention(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 4),
                                        torch.ones(2, 3, dtype=torch.bool)), "mask is Bool"),
    ("layer_norm", lambda: ops.layer_norm(torch.randn(3, 5), [4]), "does not end with normalized_shape"),
    ("layer_norm", lambda: ops.layer_norm(torch.randn(3, 4), [4], torch.randn(5)), "weight must have normalized_shape"),
    ("gelu", lambda: ops.gelu(torch.randn(3), approximate="fast"), "torch.ops.hodu.gelu: approximate"),
    ("gelu", lambda: ops.gelu(torch.randn(3).to(torch.float16)), "Half; the ops take float32 or float64"),
    ("softmax", lambda: ops.softmax(torch.randn(3, 4), 2), "torch.ops.hodu.softmax: dim 2 is out of range"),
    ("softmax", lambda: ops.softmax(torch.randn(3, 4, device="meta"), 1), "is on meta; hodu's ops run on the CPU"),
]


@pytest.mark.parametrize("op,call,message", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_arguments_raise_runtime_errors_naming_the_op(op, call, message):
    with pytest.raises(RuntimeError, match=message):
        call()
    with torch.inference_mode(), pytest.raises(RuntimeError, match=message.split(":")[0]):
        call()


def test_policy_routes_between_extension_engine_and_torch():
    x, w = torch.randn(2, 3, 8, 8, requires_grad=True), torch.randn(4, 3, 3, 3, requires_grad=True)
    assert "hodu_torch_ops::Conv2dFn" in ops.conv2d(x, w).grad_fn.name()
    assert ops._get_route("conv") == "extension"
    hodu.torch.ops.set_policy({"conv": "torch", "matmul": "onednn"})
    assert (ops._get_route("conv"), ops._get_route("matmul"), ops._get_route("gelu")) == ("python", "python", "extension")
    assert ops.conv2d(x, w).grad_fn.name() == "ConvolutionBackward0"  # torch's own kernel
    assert type(ops.linear(x.flatten(1), torch.randn(5, 192)).grad_fn).__name__ == "_HoduFunctionBackward"  # engine
    hodu.torch.ops.set_policy({"conv": "extension"})
    assert ops._get_route("conv") == ops._get_route("matmul") == "extension"
    with pytest.raises(RuntimeError, match="route must be"):
        ops._set_route("conv", "gpu")


def test_extension_is_not_loaded_into_another_torch():
    # Built against libtorch 1.13: loading it beside a torch of another version would bring a
    # second libtorch into the process, so hodu.torch registers the ops from Python and says why.
    code = ("import logging; logging.basicConfig()\n"
            "import torch; torch.__version__ = '9.9.0'\n"
            "import hodu.torch\n"
            "print(hodu.torch.ops.backend(), '|', hodu.torch.ops.backend_note())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("python |") and "was built against libtorch 1." in r.stdout, r.stdout
    assert "this is torch 9.9.0" in r.stdout and "registered from Python" in r.stderr, r.stderr


def test_python_registration_without_the_extension():
    # HODU_TORCH_OPS=python: what a torch without libtorch's headers gets; the same ops, registered from Python.
    code = ("import torch, hodu.torch\n"
            "assert hodu.torch.ops.backend() == 'python', hodu.torch.ops.backend()\n"
            "x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)\n"
            "w = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)\n"
            "assert torch.autograd.gradcheck(lambda x, w: torch.ops.hodu.linear(x, w), (x, w))\n"
            "print('ok', type(torch.ops.hodu.linear(x, w).grad_fn).__name__)\n")
    env = dict(os.environ, HODU_TORCH_OPS="python")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ok _HoduFunctionBackward" in r.stdout, r.stdout
