"""hodu.torch.compile against eager PyTorch: training follows torch's losses and gradients,
parameters are shared without copies, the batch is symbolic, train/eval modes behave as in
torch, and what cannot be captured is named (or runs in PyTorch with fallback=True)."""
import copy
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hodu  # noqa: E402
import hodu.torch  # noqa: E402
from torch_models import CNN, Transformer, cnn_batches, token_batches  # noqa: E402


def rel(a, b):
    """||a - b|| / ||b|| in double."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm()) if float(b.norm()) else float(a.norm())


def train_both(make, batches, make_opt, steps, grad_check_every=10):
    """Trains `make()` compiled and eager from the same weights on the same batches; returns the
    per-step losses of both and the worst gradient difference seen. Every grad_check_every
    steps the gradients of the compiled module are compared with eager torch's at the same
    weights (a copy of the compiled module's), so the check does not mix in how far the
    two trainings have drifted apart."""
    torch.manual_seed(0)
    model = make()
    eager = copy.deepcopy(model)
    compiled = hodu.torch.compile(model, batches[0][0])
    opt_h, opt_t = make_opt(model.parameters()), make_opt(eager.parameters())
    losses_h, losses_t, worst_grad = [], [], 0.0
    for k in range(steps):
        x, y = batches[k % len(batches)]
        if k % grad_check_every == 0:
            twin = copy.deepcopy(model)
            twin.zero_grad()
            F.cross_entropy(twin(x), y).backward()
        opt_h.zero_grad()
        loss_h = F.cross_entropy(compiled(x), y)
        loss_h.backward()
        if k % grad_check_every == 0:
            for (name, p), q in zip(model.named_parameters(), twin.parameters()):
                d = rel(p.grad, q.grad)
                assert d < 1e-5, f"step {k}: gradient of {name} differs from torch's by {d:.2e} (relative)"
                worst_grad = max(worst_grad, d)
        opt_h.step()
        opt_t.zero_grad()
        loss_t = F.cross_entropy(eager(x), y)
        loss_t.backward()
        opt_t.step()
        losses_h.append(loss_h.item())
        losses_t.append(loss_t.item())
    return losses_h, losses_t, worst_grad


@pytest.mark.parametrize("model,batches,optimizer", [
    (CNN, cnn_batches(8, 32), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    (Transformer, token_batches(8, 16), lambda p: torch.optim.Adam(p, lr=1e-3)),
], ids=["cnn-sgd", "transformer-adam"])
def test_training_follows_torch(model, batches, optimizer):
    losses_h, losses_t, worst = train_both(model, batches, optimizer, steps=50)
    for k, (a, b) in enumerate(zip(losses_h, losses_t)):
        assert abs(a - b) / abs(b) < 1e-4, f"step {k}: loss {a} on hodu, {b} in torch"
    assert losses_t[-1] < losses_t[0]  # it trained


def test_first_step_gradients_match_every_parameter():
    torch.manual_seed(0)
    model = Transformer()
    eager = copy.deepcopy(model)
    x, y = token_batches(1, 8)[0]
    compiled = hodu.torch.compile(model, x)
    F.cross_entropy(compiled(x), y).backward()
    F.cross_entropy(eager(x), y).backward()
    names = [n for n, _ in model.named_parameters()]
    assert "embed.weight" in names and "pos" in names
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert p.grad is not None, name
        assert rel(p.grad, q.grad) < 1e-5, name


def test_parameters_shared_without_copy():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    x = torch.randn(2, 4)
    compiled = hodu.torch.compile(model, x)
    compiled(x)
    w = model[0].weight
    fed = compiled.state_feeds.get("0.weight", w)
    assert fed.data_ptr == w.data_ptr()  # hodu reads the parameter's own memory
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    compiled(x).sum().backward()
    opt.step()  # in place: hodu sees the new weights on the next run, with no copy
    assert compiled.state_feeds.get("0.weight", w).data_ptr == w.data_ptr()
    with torch.no_grad():
        w.mul_(2)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-6, atol=1e-6)
        model[0].weight.data = torch.ones(3, 4)  # a new storage is followed too
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-6, atol=1e-6)


def test_symbolic_batch_captures_once():
    torch.manual_seed(0)
    model = CNN()
    compiled = hodu.torch.compile(model, torch.randn(4, 1, 8, 8))
    for batch in (1, 7, 33, 4):
        x = torch.randn(batch, 1, 8, 8, requires_grad=True)
        y = compiled(x)
        assert y.shape == (batch, 10)
        torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
        y.sum().backward()
    assert len(compiled._captures) == 1  # one trace; hodu plans once per shape


def test_other_input_shape_is_traced_again():
    model = nn.Sequential(nn.Linear(6, 2))
    compiled = hodu.torch.compile(model, torch.randn(3, 5, 6))
    for shape in ((3, 5, 6), (2, 9, 6), (3, 6)):
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-6, atol=1e-6)


def test_batch_norm_train_and_eval_follow_torch():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4),
                             nn.BatchNorm1d(4, momentum=0.3))
    model, eager = make(), make()
    compiled = hodu.torch.compile(model, torch.randn(2, 3, 8, 8))
    opt_h = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(eager.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        x = torch.randn(6, 3, 8, 8, generator=g) * 2 + 1
        for m, opt in ((compiled, opt_h), (eager, opt_t)):
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
    for (name, a), b in zip(model.named_buffers(), eager.buffers()):
        if a.dtype.is_floating_point:  # running mean and unbiased running variance, as torch keeps them
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
        else:
            assert int(a) == int(b) == 5, name  # num_batches_tracked
    compiled.eval()
    eager.eval()
    assert not model.training  # the compiled module's mode is the module's
    x = torch.randn(3, 3, 8, 8)
    before = [b.clone() for b in model.buffers()]
    torch.testing.assert_close(compiled(x), eager(x), rtol=1e-5, atol=1e-5)
    for a, b in zip(model.buffers(), before):
        assert torch.equal(a, b)  # eval: statistics read, not updated


def test_dropout_masks_in_training_only():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.5))
    x = torch.randn(32, 64)
    compiled = hodu.torch.compile(model, x)
    y1, y2 = compiled(x), compiled(x)
    zeros = (y1 == 0).float().mean().item()
    assert 0.4 < zeros < 0.6
    assert not torch.equal(y1 == 0, y2 == 0)  # a new mask each step
    # The backward uses the forward's mask: d sum(y) / dW = (mask * 2)^T x.
    model.zero_grad()
    y = compiled(x)
    y.sum().backward()
    mask = (y != 0).float()
    torch.testing.assert_close(model[0].weight.grad, (mask * 2).t() @ x, rtol=1e-5, atol=1e-5)
    compiled.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-6, atol=1e-6)


def test_input_gradients_and_frozen_parameters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    eager = copy.deepcopy(model)
    for m in (model, eager):
        m[0].weight.requires_grad_(False)
    compiled = hodu.torch.compile(model, torch.randn(2, 5))
    x1 = torch.randn(6, 5, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    compiled(x1).pow(2).sum().backward()
    eager(x2).pow(2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-6)
    assert model[0].weight.grad is None
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        if p.requires_grad:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.a = nn.Linear(8, 3)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.body(x))
        logits = self.a(h)
        return {"logits": logits, "score": self.b(h), "label": logits.argmax(-1)}


def test_several_outputs_in_a_dict():
    torch.manual_seed(0)
    model = TwoHeads()
    eager = copy.deepcopy(model)
    x = torch.randn(5, 4)
    out = hodu.torch.compile(model, x)(x)
    ref = eager(x)
    assert set(out) == {"logits", "score", "label"}
    assert out["label"].dtype == torch.int64 and torch.equal(out["label"], ref["label"])
    assert not out["label"].requires_grad
    (out["logits"].sum() * 2 + out["score"].square().sum()).backward()
    (ref["logits"].sum() * 2 + ref["score"].square().sum()).backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_tied_weights_get_one_gradient():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 6)
            self.out = nn.Linear(6, 10, bias=False)
            self.out.weight = self.embed.weight

        def forward(self, t):
            return self.out(self.embed(t))

    torch.manual_seed(0)
    model = Tied()
    eager = copy.deepcopy(model)
    t = torch.randint(0, 10, (4, 3))
    hodu.torch.compile(model, t)(t).logsumexp(-1).sum().backward()
    eager(t).logsumexp(-1).sum().backward()
    torch.testing.assert_close(model.embed.weight.grad, eager.embed.weight.grad, rtol=1e-5, atol=1e-6)


def test_state_dict_is_the_modules():
    model = CNN()
    compiled = hodu.torch.compile(model, torch.randn(1, 1, 8, 8))
    assert list(compiled.state_dict()) == list(model.state_dict())
    other = CNN()
    compiled.load_state_dict(other.state_dict())
    x = torch.randn(2, 1, 8, 8)
    torch.testing.assert_close(compiled(x), other(x), rtol=1e-5, atol=1e-5)


class LogCumSumExp(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.logcumsumexp(self.lin(x), 1)  # aten::logcumsumexp: no ONNX export in torch 1.13


class CumSum(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.lin(x), 1)  # exports as CumSum, which hodu's autodiff has no rule for


class Net(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.blocks = nn.ModuleList([inner, nn.Linear(8, 8)])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = F.relu(self.a(x))
        for b in self.blocks:
            x = b(x)
        return self.head(x)


@pytest.mark.parametrize("inner,op", [(LogCumSumExp, "aten::logcumsumexp"), (CumSum, "CumSum")])
def test_uncapturable_part_is_named(inner, op):
    model = Net(inner())
    with pytest.raises(hodu.torch.CaptureError) as e:
        hodu.torch.compile(model, torch.randn(5, 4))
    assert e.value.module == "blocks.0" and e.value.op == op
    assert f"module 'blocks.0' ({inner.__name__})" in str(e.value) and op in str(e.value)
    assert "fallback=True" in str(e.value)


@pytest.mark.parametrize("inner", [LogCumSumExp, CumSum])
def test_fallback_runs_that_part_in_torch(inner):
    torch.manual_seed(0)
    model = Net(inner())
    eager = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = hodu.torch.compile(model, torch.randn(5, 4), fallback=True)
    eager_parts = {path for path, _, _ in compiled.eager_parts}
    assert eager_parts == {"", "blocks.0"}  # Net's own forward and the part with the op; the Linears run on hodu
    assert any("blocks.0" in str(w.message) for w in caught)
    opt_h = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(7, 4)
        for m, opt in ((compiled, opt_h), (eager, opt_t)):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


def test_bad_arguments():
    model = nn.Linear(3, 2)
    with pytest.raises(hodu.InvalidArgumentError, match="torch.nn.Module"):
        hodu.torch.compile(lambda x: x, torch.randn(1, 3))
    with pytest.raises(hodu.torch.CaptureError, match="input 1 is a int"):
        hodu.torch.compile(model, (torch.randn(1, 3), 4))
    compiled = hodu.torch.compile(model, torch.randn(1, 3))
    with pytest.raises(hodu.InvalidArgumentError, match="compiled for 1 inputs"):
        compiled(torch.randn(1, 3), torch.randn(1, 3))
    with pytest.raises(RuntimeError, match="dtype"):  # another signature is traced again: torch's own error
        compiled(torch.randn(1, 3, dtype=torch.float64))


def test_import_hodu_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import hodu\n"
            "try:\n"
            "    import hodu.torch\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "ImportError: hodu.torch needs PyTorch" in out


def test_inputs_with_other_leading_dims():
    """Inputs whose dim 0 is not the batch (a weight and a bias passed in) get symbols of their
    own; the backward reads each symbol from its own input (it once read the batch from w)."""
    class Linear(nn.Module):
        def forward(self, x, w, b):
            return F.linear(x, w, b)

    torch.manual_seed(0)
    x = torch.randn(4, 6, 16, requires_grad=True)
    compiled = hodu.torch.compile(Linear(), (x, torch.randn(48, 16), torch.randn(48)))
    for out_features in (48, 16):
        w = torch.randn(out_features, 16, requires_grad=True)
        b = torch.randn(out_features, requires_grad=True)
        g = torch.randn(4, 6, out_features)
        got = torch.autograd.grad(compiled(x, w, b), (x, w, b), g)
        want = torch.autograd.grad(F.linear(x, w, b), (x, w, b), g)
        for name, a, e in zip("xwb", got, want):
            assert rel(a, e) < 1e-5, (out_features, name, rel(a, e))


class _Recurrent(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = kind(8, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
def test_weights_the_exporter_bakes_are_refused(kind):
    """torch.onnx.export makes recurrent weights constants: no silent stale, untrained weights,
    but an error naming the module; with fallback=True that module runs in PyTorch and every
    parameter gets torch's gradient."""
    torch.manual_seed(0)
    model, x = _Recurrent(kind), torch.randn(2, 5, 8)
    with pytest.raises(hodu.torch.CaptureError, match=r"module 'rnn' \((LSTM|GRU)\).*baked parameter 'rnn.weight"):
        hodu.torch.compile(model, x)
    eager = copy.deepcopy(model)
    with pytest.warns(RuntimeWarning, match="'rnn'"):
        compiled = hodu.torch.compile(model, x, fallback=True)
    compiled(x).sum().backward()
    eager(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert p.grad is not None, name
        assert rel(p.grad, q.grad) < 1e-5, name


def test_fallback_part_whose_input_gradient_hodu_cannot_take():
    """GroupNorm's weight gradient needs no InstanceNormalization gradient but its input's does:
    inside a model (fed activations that require grad) it is found at compile time, and with
    fallback=True it runs in PyTorch instead of failing at the first backward."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.norm = nn.GroupNorm(2, 8)
            self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)

        def forward(self, x):
            return F.interpolate(self.up(F.silu(self.norm(self.conv(x)))), scale_factor=0.5, mode="bilinear")

    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 3, 8, 8)
    eager = copy.deepcopy(model)
    with pytest.warns(RuntimeWarning, match="'norm' \\(GroupNorm\\) runs in PyTorch"):
        compiled = hodu.torch.compile(model, x, fallback=True)
    assert "conv" not in [p for p, _, _ in compiled.eager_parts]
    g = torch.randn(2, 4, 8, 8)
    (compiled(x) * g).sum().backward()
    (eager(x) * g).sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert rel(p.grad, q.grad) < 1e-5, name
