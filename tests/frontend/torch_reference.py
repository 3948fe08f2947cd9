#!/usr/bin/env python3
"""PyTorch 1.13 references for hodu's C++ frontend (tests/frontend/torch_check.cc).

Writes into OUT_DIR:
  ops.npz       for each op case NAME: NAME.in0, NAME.in1, ... (inputs), NAME.gy (upstream
                gradient), NAME.y (output), NAME.g0, NAME.g1, ... (gradients of sum(y * gy)
                with respect to the float inputs), all in float32 unless the case says f64.
  train_<model>_<opt>.npz   init.<param> (initial state_dict), x.<step>, y.<step> (batches),
                losses (the loss before each of the 100 updates), final.<param> (state after).

Usage: torch_reference.py OUT_DIR
Exit 77 (skip) when torch is not importable.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}")
    sys.exit(77)

torch.set_num_threads(1)
out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
gen = torch.Generator().manual_seed(1234)


def rnd(*shape, lo=-1.0, hi=1.0, dtype=torch.float32):
    return (torch.rand(tuple(shape), generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def ints(hi, *shape):
    return torch.randint(0, hi, shape, generator=gen)


# name -> (inputs, function). Float inputs get gradients; integer ones are indices/targets.
cases = {}


def case(name, inputs, fn):
    cases[name] = (inputs, fn)


case("add_broadcast", [rnd(3, 4), rnd(4)], lambda a, b: a + b)
case("mul_div", [rnd(3, 4), rnd(3, 1, lo=0.5, hi=2)], lambda a, b: a * b / (b + 1))
case("pow", [rnd(5, lo=0.5, hi=2), rnd(5)], lambda a, b: torch.pow(a, b))
case("maximum", [rnd(6), rnd(6)], lambda a, b: torch.maximum(a, b))
case("exp_log_sqrt", [rnd(7, lo=0.2, hi=2)], lambda a: a.exp() + a.log() + a.sqrt() + a.rsqrt())
case("tanh_sigmoid", [rnd(7, lo=-3, hi=3)], lambda a: a.tanh() * a.sigmoid())
case("relu_gelu_silu", [rnd(9, lo=-3, hi=3)], lambda a: F.relu(a) + F.gelu(a) + F.silu(a) + F.gelu(a, approximate="tanh"))
case("leaky_elu_softplus", [rnd(9, lo=-3, hi=3)], lambda a: F.leaky_relu(a, 0.1) + F.elu(a) + F.softplus(a))
case("clamp", [rnd(9, lo=-2, hi=2)], lambda a: a.clamp(-0.5, 0.7))
case("sum_mean", [rnd(3, 4, 5)], lambda a: a.sum((0, 2), keepdim=True) * a.mean(1, keepdim=True))
case("amax", [rnd(4, 6)], lambda a: a.amax(1))
case("max_dim", [rnd(4, 6)], lambda a: a.max(0)[0])
case("var_std", [rnd(4, 6)], lambda a: a.var(1, keepdim=True) + a.std(0, unbiased=False))
case("logsumexp", [rnd(4, 6)], lambda a: a.logsumexp(1))
case("softmax", [rnd(3, 7)], lambda a: F.softmax(a, 1))
case("log_softmax_dim0", [rnd(5, 3)], lambda a: F.log_softmax(a, 0))
case("matmul", [rnd(2, 3, 5), rnd(5, 4)], lambda a, b: a @ b)
case("matmul_batched", [rnd(2, 1, 3, 5), rnd(4, 5, 2)], lambda a, b: a @ b)
case("linear", [rnd(6, 5), rnd(3, 5), rnd(3)], lambda x, w, b: F.linear(x, w, b))
case("linear_3d", [rnd(2, 6, 5), rnd(3, 5), rnd(3)], lambda x, w, b: F.linear(x, w, b))
case("conv2d", [rnd(2, 3, 7, 7), rnd(5, 3, 3, 3), rnd(5)], lambda x, w, b: F.conv2d(x, w, b, padding=1))
case("conv2d_stride_groups", [rnd(2, 4, 9, 8), rnd(6, 2, 3, 2), rnd(6)],
     lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2))
case("conv1d", [rnd(2, 3, 10), rnd(4, 3, 3), rnd(4)], lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1))
case("max_pool2d", [torch.randperm(2 * 3 * 8 * 7, generator=gen).float().reshape(2, 3, 8, 7) / 10],
     lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True))
case("avg_pool2d", [rnd(2, 3, 8, 7)], lambda x: F.avg_pool2d(x, 3, 2, 1))
case("avg_pool2d_ceil", [rnd(2, 3, 8, 7)], lambda x: F.avg_pool2d(x, 2, 2, 1, ceil_mode=True, count_include_pad=False))
case("adaptive_avg_pool2d", [rnd(2, 3, 4, 4)], lambda x: F.adaptive_avg_pool2d(x, 1))
case("layer_norm", [rnd(4, 6), rnd(6), rnd(6)], lambda x, w, b: F.layer_norm(x, (6,), w, b))
case("batch_norm_train", [rnd(4, 3, 5, 5), rnd(3), rnd(3)],
     lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True))
case("batch_norm_eval", [rnd(4, 3, 5, 5), rnd(3), rnd(3)],
     lambda x, w, b: F.batch_norm(x, torch.linspace(-0.5, 0.5, 3), torch.linspace(0.5, 2, 3), w, b, training=False))
case("embedding", [rnd(10, 4), ints(10, 3, 5)], lambda w, i: F.embedding(i, w, padding_idx=2))
case("gather", [rnd(4, 6), ints(6, 4, 3)], lambda a, i: a.gather(1, i))
case("index_select", [rnd(5, 3), ints(5, 7)], lambda a, i: a.index_select(0, i))
case("where_cat_stack", [rnd(3, 4), rnd(3, 4)],
     lambda a, b: torch.cat([torch.where(a > 0, a, b), torch.stack([a, b], 0).sum(0)], 1))
case("reshape_permute_slice", [rnd(2, 3, 4)], lambda a: a.permute(2, 0, 1).reshape(4, 6)[1:, ::2] * 2)
case("cross_entropy", [rnd(8, 5), ints(5, 8)], lambda x, t: F.cross_entropy(x, t))
case("cross_entropy_smooth", [rnd(8, 5), ints(5, 8)], lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1))
class_weight = torch.tensor([0.5, 1.0, 1.5, 2.0, 0.75])  # torch refuses gradients for it
case("cross_entropy_weight", [rnd(8, 5), ints(5, 8)],
     lambda x, t: F.cross_entropy(x, t, weight=class_weight, label_smoothing=0.2))
case("nll_sum", [rnd(8, 5), ints(5, 8)], lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, reduction="sum"))
case("mse", [rnd(4, 3), rnd(4, 3)], lambda a, b: F.mse_loss(a, b))
pos_weight = torch.tensor([0.5, 1.0, 2.0])
case("bce_with_logits", [rnd(4, 3, lo=-3, hi=3), rnd(4, 3, lo=0, hi=1)],
     lambda x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=pos_weight))


def mha(q, k, v, w_in, b_in, w_out, b_out):
    out, weights = F.multi_head_attention_forward(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), 8, 2, w_in, b_in, None, None, False, 0.0,
        w_out, b_out, training=False, need_weights=True)
    return out.transpose(0, 1) + weights.sum()


case("multihead_attention", [rnd(2, 3, 8), rnd(2, 4, 8), rnd(2, 4, 8), rnd(24, 8), rnd(24), rnd(8, 8), rnd(8)], mha)


def mha_masked(q, w_in, b_in, w_out, b_out):
    # Self-attention, a causal float mask and padded keys (batch 1 pads its last two).
    L = q.shape[1]
    causal = torch.triu(torch.full((L, L), float("-inf")), 1)
    padding = torch.tensor([[False] * L, [False] * (L - 2) + [True] * 2])
    x = q.transpose(0, 1)
    out, weights = F.multi_head_attention_forward(
        x, x, x, 8, 2, w_in, b_in, None, None, False, 0.0, w_out, b_out, training=False,
        key_padding_mask=padding, need_weights=True, attn_mask=causal)
    return out.transpose(0, 1) + weights.sum()


case("multihead_attention_masked", [rnd(2, 5, 8), rnd(24, 8), rnd(24), rnd(8, 8), rnd(8)], mha_masked)
ignored_targets = torch.where(torch.arange(8) % 3 == 0, torch.tensor(-100), ints(5, 8))
case("cross_entropy_ignore", [rnd(8, 5), ignored_targets],
     lambda x, t: F.cross_entropy(x, t, weight=class_weight, label_smoothing=0.1))
case("cross_entropy_spatial", [rnd(2, 5, 3, 2), ints(5, 2, 3, 2)], lambda x, t: F.cross_entropy(x, t))
case("layer_norm_2d", [rnd(2, 3, 4), rnd(3, 4), rnd(3, 4)], lambda x, w, b: F.layer_norm(x, (3, 4), w, b))
case("max_pool2d_dilation", [torch.randperm(2 * 2 * 7 * 6, generator=gen).float().reshape(2, 2, 7, 6) / 10],
     lambda x: F.max_pool2d(x, 2, 1, 1, dilation=2))
case("conv2d_depthwise", [rnd(2, 4, 6, 5), rnd(4, 1, 3, 3)], lambda x, w: F.conv2d(x, w, None, 2, 2, 1, 4))
softmax_mask = torch.tensor([[False, True, False, True, False, False]] * 3)
case("softmax_masked", [rnd(3, 6)], lambda a: F.softmax(a.masked_fill(softmax_mask, float("-inf")), 1))
case("unary_more", [rnd(7, lo=-0.9, hi=2)],
     lambda a: a.log1p() + a.abs() * a.sin() + a.cos() + a.square() + (a + 2).reciprocal() + a.erf())
case("prod_norm", [rnd(3, 4, lo=0.5, hi=1.5)], lambda a: a.prod(1) * a.norm())
case("matmul_transposed", [rnd(2, 3, 4), rnd(2, 5, 4)], lambda a, b: a @ b.transpose(-1, -2))

arrays = {}
for name, (inputs, fn) in cases.items():
    ins = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    y = fn(*ins)
    gy = rnd(*y.shape)
    floats = [t for t in ins if t.requires_grad]
    grads = torch.autograd.grad((y * gy).sum(), floats, allow_unused=True)
    for i, t in enumerate(inputs):
        arrays[f"{name}.in{i}"] = t.numpy()
    arrays[f"{name}.gy"] = gy.numpy()
    arrays[f"{name}.y"] = y.detach().numpy()
    for i, g in enumerate(grads):
        arrays[f"{name}.g{i}"] = (g if g is not None else torch.zeros_like(floats[i])).numpy()
np.savez(os.path.join(out_dir, "ops.npz"), **arrays)


# ---- training runs ---------------------------------------------------------------

class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        return self.fc(F.relu(self.conv2(h)).flatten(1))


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(12, 16)
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.ln = torch.nn.LayerNorm(16)
        self.fc = torch.nn.Linear(16, 12)

    def forward(self, x):
        h = self.embed(x)
        h = self.ln(h + self.attn(h, h, h, need_weights=False)[0])
        return self.fc(F.gelu(h))


# Learnable targets, so that the losses fall over the 100 steps: a fixed random linear
# teacher labels the images; the attention model learns to reverse its sequences.
teacher = rnd(64, 10)


def batches(model):
    if model == "cnn":
        out = []
        for _ in range(100):
            x = rnd(16, 1, 8, 8, lo=0, hi=1)
            out.append((x, (x.reshape(16, 64) @ teacher).argmax(1)))
        return out
    out = []
    for _ in range(100):
        x = ints(12, 8, 6)
        out.append((x, x.flip(1)))
    return out


def optimizer(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)
    if kind == "nesterov":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)
    if kind == "adam":
        return torch.optim.Adam(params, lr=2e-3)
    return torch.optim.AdamW(params, lr=2e-3, weight_decay=0.05)


for model in ("cnn", "attn"):
    data = batches(model)
    for kind in ("sgd", "nesterov", "adam", "adamw"):
        torch.manual_seed(7)
        net = Cnn() if model == "cnn" else Attn()
        arrays = {f"init.{k}": v.detach().clone().numpy() for k, v in net.state_dict().items()}
        opt = optimizer(kind, net.parameters())
        losses = []
        for step, (x, y) in enumerate(data):
            arrays[f"x.{step}"] = x.numpy()
            arrays[f"y.{step}"] = y.numpy()
            opt.zero_grad()
            out = net(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), label_smoothing=0.1)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        arrays["losses"] = np.array(losses, dtype=np.float64)
        arrays.update({f"final.{k}": v.detach().numpy() for k, v in net.state_dict().items()})
        np.savez(os.path.join(out_dir, f"train_{model}_{kind}.npz"), **arrays)
print(f"wrote {len(cases)} op cases and 8 training runs to {out_dir}")
