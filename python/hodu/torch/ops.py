"""torch.ops.hodu.{matmul, linear, conv2d, attention, layer_norm, gelu, softmax}: hodu's cpu
kernels as PyTorch operators, with their backward, usable in an eager model.

    import hodu.torch                     # registers the ops (hodu.torch.ops.load_ops())
    y = torch.ops.hodu.linear(x, w, b)    # forward on hodu, backward on hodu too

The ops come from the C++ extension _hodu_torch_ops.so next to this file (python/torch_ops,
built when libtorch is found; backend() == "extension"): TORCH_LIBRARY(hodu)
with a kernel below autograd and an Autograd kernel per op that call hodu's kernels on core
tensors (oneDNN's matmul and convolution, hodu's loops) forward and backward. Without it (not built, or it fails to
load against this torch; HODU_TORCH_OPS=python forces it) they are registered here with
torch.library (backend() == "python") and run as below for every policy.

Which implementation runs is a kernel policy per family (set_policy): unset or "extension"
(the C++ kernels), hodu's engine kernel names ("onednn", "hodu", "reference", as
hodu.policies.KernelPolicy: the op runs as a one-op module compiled by hodu.torch.compile,
forward on hodu's cpu engine with those kernels, backward as hodu's autodiff graph of it,
cached per op, attributes and input shapes), "torch" (PyTorch's own kernel, the baseline),
or "auto": the first call of each shape times hodu's (the extension's, else the compiled
op's) and torch's forward (interleaved, a few runs each), keeps the faster and logs the
choice (the "hodu.torch" logger); choices() lists the decisions, so a run can be pinned by
writing them into a policy. Families the policy names run through the ops hodu::_engine_*,
whose kernels are registered here (the C++ op calls them).
"""
import logging
import math
import os
import threading
import time

import torch
import torch.nn.functional as F

from ..errors import InvalidArgumentError
from ..policies import KernelPolicy

log = logging.getLogger("hodu.torch")

# name -> (schema, the eager function of the op's tensors and attributes)
_SCHEMAS = {
    "matmul": "matmul(Tensor self, Tensor other) -> Tensor",
    "linear": "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "conv2d": ("conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
               "int[2] dilation=1, int groups=1) -> Tensor"),
    "attention": "attention(Tensor query, Tensor key, Tensor value, Tensor? mask=None, bool causal=False) -> Tensor",
    "layer_norm": ("layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
                   "float eps=1e-05) -> Tensor"),
    "gelu": "gelu(Tensor self, str approximate='none') -> Tensor",
    "softmax": "softmax(Tensor self, int dim) -> Tensor",
}
FAMILY = {"matmul": "matmul", "linear": "matmul", "conv2d": "conv", "attention": "attention",
          "layer_norm": "layer_norm", "gelu": "gelu", "softmax": "softmax"}


def _attention_math(q, k, v, mask, causal):
    # The scale as a Python number (a traced size would be divided in float32 in the graph).
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(int(q.shape[-1])))
    if mask is not None:
        scores = scores + mask
    if causal:
        s, t = scores.shape[-2], scores.shape[-1]
        scores = scores.masked_fill(torch.ones(s, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def reference(name, tensors, attrs):
    """What the op computes, in eager PyTorch (the "torch" implementation)."""
    a = dict(attrs)
    if name == "matmul":
        return torch.matmul(*tensors)
    if name == "linear":
        return F.linear(*tensors)
    if name == "conv2d":
        return F.conv2d(*tensors, stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                        groups=a["groups"])
    if name == "attention":
        q, k, v, *mask = tensors
        return _attention_math(q, k, v, mask[0] if mask else None, a["causal"])
    if name == "layer_norm":
        x, *wb = tensors
        # Explicit ones and zeros (the exporter cannot write LayerNormalization without a scale).
        w = wb[0] if a["has_weight"] else torch.ones(a["normalized_shape"], dtype=x.dtype)
        b = wb[-1] if a["has_bias"] else torch.zeros(a["normalized_shape"], dtype=x.dtype)
        return F.layer_norm(x, a["normalized_shape"], w, b, a["eps"])
    if name == "gelu":
        return F.gelu(tensors[0], approximate=a["approximate"])
    if name == "softmax":
        return torch.softmax(tensors[0], dim=a["dim"])
    raise InvalidArgumentError(f"torch.ops.hodu: unknown op '{name}'")


class _OneOp(torch.nn.Module):
    """One op over its tensor inputs, with its attributes fixed: what hodu.torch.compile captures."""

    def __init__(self, name, attrs):
        super().__init__()
        self.op, self.attrs = name, attrs

    def forward(self, *tensors):
        return reference(self.op, tensors, self.attrs)

    def extra_repr(self):
        return f"{self.op} {dict(self.attrs)}"


_EXTENSION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_hodu_torch_ops.so")
_backend = None       # "extension" or "python", once load_ops ran
_backend_note = ""    # why "python"
_lock = threading.RLock()
_compiled = {}   # (name, attrs, kernel names) -> CompiledModule
_choices = {}    # "family signature" -> "hodu" or "torch" (what "auto" chose)
_policy = KernelPolicy()


def backend():
    """"extension" (the C++ extension's kernels) or "python" (registered with torch.library)."""
    load_ops()
    return _backend


def backend_note():
    """Why the backend is "python" ("" with the extension)."""
    load_ops()
    return _backend_note


def _routes_to_extension(names):
    return not names or names == ["extension"]


def set_policy(policy):
    """The kernel policy of torch.ops.hodu (a hodu.policies.KernelPolicy, dict, or None for the
    defaults): per family (matmul covers matmul and linear; conv, attention, layer_norm, gelu,
    softmax), "extension" (the default), hodu engine kernel names, "torch" or "auto". Clears
    the compiled ops and auto's choices."""
    global _policy
    load_ops()
    if policy is None:
        policy = KernelPolicy()
    elif isinstance(policy, dict):
        policy = KernelPolicy(policy)
    elif not isinstance(policy, KernelPolicy):
        raise InvalidArgumentError(f"torch.ops.hodu: set_policy expects a KernelPolicy, dict or None, "
                                   f"got {type(policy).__name__}")
    for key, names in policy.preferred.items():
        if key.lower() not in set(FAMILY.values()):
            raise InvalidArgumentError(f"torch.ops.hodu: policy key '{key}' is no family of these ops "
                                       f"(families: {', '.join(sorted(set(FAMILY.values())))})")
        if any(n in names for n in ("torch", "auto", "extension")) and len(names) > 1:
            raise InvalidArgumentError(f"torch.ops.hodu: policy '{key}': \"torch\", \"auto\" and \"extension\" "
                                       f"stand alone, got {names}")
        if names == ["extension"] and _backend != "extension":
            raise InvalidArgumentError(f"torch.ops.hodu: policy '{key}': \"extension\", but the C++ extension is "
                                       f"not loaded ({_backend_note})")
    with _lock:
        _policy = policy
        _compiled.clear()
        _choices.clear()
        if _backend == "extension":
            for family in sorted(set(FAMILY.values())):
                route = "extension" if _routes_to_extension(policy.get(family) or []) else "python"
                torch.ops.hodu._set_route(family, route)


def policy():
    return _policy


def choices():
    """What "auto" chose so far: {"<family> <op> <dtype>[shape]x[shape]...": "hodu" or "torch"}."""
    with _lock:
        return dict(_choices)


def _hodu_module(name, attrs, tensors, names):
    """The compiled one-op module for these attributes and hodu kernel names (cached)."""
    from .compiled import CompiledModule
    key = (name, attrs, names)
    with _lock:
        m = _compiled.get(key)
        if m is None:
            pol = KernelPolicy({FAMILY[name]: list(names)}) if names else None
            # Static shapes: an op's inputs (a weight's dim 0 beside a batch) share no batch dim.
            m = _compiled[key] = CompiledModule(_OneOp(name, attrs), tuple(t.detach() for t in tensors), pol,
                                                static_shapes=True)
        return m


def _timed(fn, runs=3):
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _call(op, name, tensors, attrs):
    """op (a torch.ops.hodu function of `name`'s schema) on the op's tensors and attributes."""
    a = dict(attrs)
    t = list(tensors)
    if name in ("matmul", "softmax", "gelu"):
        return op(*t, *(a[k] for k in ("dim", "approximate") if k in a))
    if name == "linear":
        return op(t[0], t[1], t[2] if a["has_bias"] else None)
    if name == "conv2d":
        return op(t[0], t[1], t[2] if a["has_bias"] else None, a["stride"], a["padding"], a["dilation"], a["groups"])
    if name == "attention":
        return op(t[0], t[1], t[2], t[3] if a["has_mask"] else None, a["causal"])
    if name == "layer_norm":
        w = t[1] if a["has_weight"] else None
        b = t[-1] if a["has_bias"] else None
        return op(t[0], list(a["normalized_shape"]), w, b, a["eps"])
    raise InvalidArgumentError(f"torch.ops.hodu: unknown op '{name}'")


def _run(name, tensors, attrs):
    names = _policy.get(FAMILY[name]) or []
    ext = getattr(torch.ops.hodu, "_ext_" + name) if _backend == "extension" else None
    if names == ["torch"]:
        return reference(name, tensors, attrs)
    if names == ["auto"]:
        sig = f"{FAMILY[name]} {name} " + "x".join(
            f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}" for t in tensors) + (
            f" {dict(attrs)}" if attrs else "")
        with _lock:
            chosen = _choices.get(sig)
        if chosen is None:
            detached = tuple(t.detach() for t in tensors)
            if ext is not None:
                def hodu_fn():
                    return _call(ext, name, detached, attrs)
            else:
                m = _hodu_module(name, attrs, tensors, ())

                def hodu_fn():
                    return m(*detached)
            with torch.no_grad():
                hodu_fn()  # plans the shape (or warms the primitive caches) before it is timed
                h, t = [], []
                for _ in range(3):  # interleaved
                    h.append(_timed(hodu_fn))
                    t.append(_timed(lambda: reference(name, detached, attrs)))
            chosen = "hodu" if min(h) <= min(t) else "torch"
            with _lock:
                _choices[sig] = chosen
            log.info("torch.ops.hodu auto: %s -> %s (hodu %.3f ms, torch %.3f ms)", sig, chosen,
                     min(h) * 1e3, min(t) * 1e3)
        if chosen == "torch":
            return reference(name, tensors, attrs)
        if ext is not None:
            return _call(ext, name, tensors, attrs)
        names = []
    return _hodu_module(name, attrs, tensors, tuple(names))(*tensors)


def _check(name, tensors):
    for i, t in enumerate(tensors):
        if t.device.type != "cpu":
            raise InvalidArgumentError(f"torch.ops.hodu.{name}: input {i} is on {t.device}; hodu's ops run on cpu")
        if not t.is_floating_point():
            raise InvalidArgumentError(f"torch.ops.hodu.{name}: input {i} is {t.dtype}; the ops take float tensors")


def _matmul(a, b):
    _check("matmul", (a, b))
    return _run("matmul", (a, b), ())


def _linear(x, w, b=None):
    tensors = (x, w) if b is None else (x, w, b)
    _check("linear", tensors)
    return _run("linear", tensors, (("has_bias", b is not None),))


def _conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    tensors = (x, w) if b is None else (x, w, b)
    _check("conv2d", tensors)
    if x.dim() != 4:
        raise InvalidArgumentError(f"torch.ops.hodu.conv2d: input must be 4-D (N, C, H, W), got {x.dim()}-D")
    attrs = (("has_bias", b is not None), ("stride", tuple(stride)), ("padding", tuple(padding)), ("dilation", tuple(dilation)),
             ("groups", int(groups)))
    return _run("conv2d", tensors, attrs)


def _attention(q, k, v, mask=None, causal=False):
    tensors = (q, k, v) if mask is None else (q, k, v, mask)
    _check("attention", tensors)
    return _run("attention", tensors, (("has_mask", mask is not None), ("causal", bool(causal))))


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    tensors = (x,) + tuple(t for t in (weight, bias) if t is not None)
    _check("layer_norm", tensors)
    attrs = (("normalized_shape", tuple(normalized_shape)), ("has_weight", weight is not None),
             ("has_bias", bias is not None), ("eps", float(eps)))
    return _run("layer_norm", tensors, attrs)


def _gelu(x, approximate="none"):
    _check("gelu", (x,))
    if approximate not in ("none", "tanh"):
        raise InvalidArgumentError(f"torch.ops.hodu.gelu: approximate must be 'none' or 'tanh', got '{approximate}'")
    return _run("gelu", (x,), (("approximate", approximate),))


def _softmax(x, dim):
    _check("softmax", (x,))
    return _run("softmax", (x,), (("dim", int(dim)),))


_KERNELS = {"matmul": _matmul, "linear": _linear, "conv2d": _conv2d, "attention": _attention,
            "layer_norm": _layer_norm, "gelu": _gelu, "softmax": _softmax}
_library = None


def _read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _load_extension():
    """Loads the C++ extension; gives "" or why it is not used."""
    if os.environ.get("HODU_TORCH_OPS", "") == "python":
        return "HODU_TORCH_OPS=python"
    if not os.path.exists(_EXTENSION):
        return (f"{_EXTENSION} was not built (hodu's build found no libtorch; on Debian: apt install "
                f"libtorch-dev, then rebuild)")
    # Only into the torch it was built against: its libtorch beside another torch's would be two.
    built = _read_text(os.path.splitext(_EXTENSION)[0] + ".torch_version")
    running = ".".join(torch.__version__.split(".")[:2])
    if built != running:
        return f"{_EXTENSION} was built against libtorch {built or '(unknown)'}, this is torch {torch.__version__}"
    try:
        torch.ops.load_library(_EXTENSION)
    except (OSError, RuntimeError) as e:
        return f"{_EXTENSION} does not load into torch {torch.__version__}: {e}"
    return ""


def load_ops():
    """Registers torch.ops.hodu.* (once per process; importing hodu.torch does it) and returns
    torch.ops.hodu: the C++ extension's ops when it loads, else the same ops from Python."""
    global _library, _backend, _backend_note
    with _lock:
        if _library is None:
            _backend_note = _load_extension()
            if not _backend_note:
                _backend = "extension"
                lib = torch.library.Library("hodu", "IMPL")
                for name in _SCHEMAS:
                    lib.impl("_engine_" + name, _KERNELS[name], "CompositeImplicitAutograd")
            else:
                _backend = "python"
                if _backend_note != "HODU_TORCH_OPS=python":
                    log.warning("torch.ops.hodu: registered from Python, not the C++ extension: %s", _backend_note)
                lib = torch.library.Library("hodu", "DEF")
                for name, schema in _SCHEMAS.items():
                    lib.define(schema)
                    lib.impl(name, _KERNELS[name], "CompositeImplicitAutograd")
            _library = lib
    return torch.ops.hodu
