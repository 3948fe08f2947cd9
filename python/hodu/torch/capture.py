"""Capturing a torch.nn.Module as a hodu graph whose parameters and buffers are graph inputs.

Why torch.onnx.export and not torch.fx: in torch 1.13 torch.fx.symbolic_trace stops at any
Python control flow on tensor values or shapes (`if x.shape[0] > 1`, `x.size(1) // heads` in a
reshape, list building from shapes), which real modules are full of, and its graph would need
a converter from aten/torch.nn.functional calls to hodu's ops written from scratch. The ONNX
exporter traces (runs the module once, so any Python is fine), records size() calls as shape
ops (a dynamic batch stays symbolic), and lowers over 300 aten ops to ONNX, which hodu imports
in full. What it cannot export (an aten op without an ONNX symbolic) is reported naming the op.

The module is traced with every parameter and buffer swapped for a tensor passed as an input
(by identity, so tied weights stay one input): the graph reads them as inputs named by their
state_dict names, never as initializers. So they are bound per run (an optimizer step is seen
by the next run, without a copy), and the exporter cannot merge or fold them (in eval mode it
merges equal-valued initializers, such as LayerNorm's ones, into one).
"""
import contextlib
import inspect
import io
import re
import warnings

import torch
from torch.utils._pytree import tree_flatten

from ..errors import UnsupportedOperationError

OPSET = 17


class CaptureError(UnsupportedOperationError):
    """A module (or part of one) that hodu.torch cannot capture or differentiate. `module` is
    the submodule's qualified name ("" for the root), `op` the op that failed when known, and
    `reason` what failed, without the module's name."""

    def __init__(self, message, module="", op=None, reason=None):
        super().__init__(message)
        self.module, self.op, self.reason = module, op, reason if reason is not None else message


@contextlib.contextmanager
def _swapped_state(root, replacements):
    """Every parameter/buffer slot of root's modules holding a tensor in `replacements`
    (id → tensor) reads the replacement inside the block (tied weights included)."""
    saved = []
    try:
        for mod in root.modules():
            for slots in (mod._parameters, mod._buffers):
                for key, value in list(slots.items()):
                    if value is not None and id(value) in replacements:
                        saved.append((slots, key, value))
                        slots[key] = replacements[id(value)]
        yield
    finally:
        for slots, key, value in saved:
            slots[key] = value


@contextlib.contextmanager
def _kept_modes(root):
    """Restores each submodule's training flag (the exporter sets the whole tree's)."""
    modes = [(m, m.training) for m in root.modules()]
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


class _StateAsInputs(torch.nn.Module):
    """module(*inputs) with the state tensors read from the trailing arguments, and the
    buffers that are not graph inputs (BatchNorm's integer count of batches) read from copies,
    so tracing changes none of the module's tensors."""

    def __init__(self, module, originals, n_inputs):
        super().__init__()
        self.module = module
        self._originals = originals
        self._n_inputs = n_inputs
        fed = {id(t) for t in originals}
        self._others = [b for b in module.buffers() if id(b) not in fed]

    def forward(self, *args):
        inputs, state = args[:self._n_inputs], args[self._n_inputs:]
        replacements = {id(o): t for o, t in zip(self._originals, state)}
        replacements.update({id(b): b.clone() for b in self._others})
        with _swapped_state(self.module, replacements):
            return self.module(*inputs)


def input_names(module, n):
    """Names for the module's positional inputs: its forward's parameter names where they
    are plain positional parameters, else input_<i>."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        if i < len(params) and params[i].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                  inspect.Parameter.POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        else:
            names.append(f"input_{i}")
    return names


def state_entries(module):
    """(name, tensor, is_parameter) for each parameter and buffer, tied tensors once."""
    entries, seen = [], set()
    for name, p in module.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            entries.append((name, p, True))
    for name, b in module.named_buffers():
        if id(b) not in seen and b.dtype.is_floating_point:
            seen.add(id(b))
            entries.append((name, b, False))
    return entries


_EXPORT_OP = re.compile(r"operator '?([\w:.]+)'?")


def _export_error_op(message):
    m = _EXPORT_OP.search(message)
    return m.group(1) if m else None


class Exported:
    """torch.onnx.export's graph and what the eager run of the same inputs gave."""

    def __init__(self, onnx, output_names, output_spec, eager_outputs):
        self.onnx, self.output_names, self.output_spec, self.eager_outputs = onnx, output_names, output_spec, eager_outputs


def export(module, inputs, names, state, dynamic_batch=True):
    """ONNX bytes of `module(*inputs)` with the state tensors as graph inputs, each submodule in
    the train/eval mode it is in (TrainingMode.PRESERVE).

    names: the data inputs' names; state: state_entries(module). The module runs once eagerly
    first (for its outputs' structure and values), on copies of its buffers and with torch's
    random state restored after, so neither its buffers nor the random stream change.
    Raises CaptureError naming the op the exporter refused."""
    originals = [t for _, t, _ in state]

    def values():
        # Buffers are copied: BatchNorm in training mode updates its running statistics in place.
        return [t.detach() if is_param else t.detach().clone() for _, t, is_param in state]

    wrapper = _StateAsInputs(module, originals, len(inputs))
    wrapper.training = any(m.training for m in module.modules())
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        eager = wrapper(*inputs, *values())
    flat_out, spec = tree_flatten(eager)
    for i, y in enumerate(flat_out):
        if not isinstance(y, torch.Tensor):
            raise CaptureError(f"output {i} is a {type(y).__name__}; compiled modules return tensors "
                               "(in tuples, lists or dicts)")
    out_names = [f"output_{i}" for i in range(len(flat_out))]
    dynamic_axes = {}
    if dynamic_batch:
        batch = next((x.shape[0] for x in inputs if x.dim() > 0), None)
        for name, x in zip(names, inputs):
            if x.dim() > 0:
                dynamic_axes[name] = {0: "batch" if x.shape[0] == batch else f"{name}.dim0"}
    for name, y in zip(out_names, flat_out):
        if y.dim() > 0:
            dynamic_axes[name] = {d: f"{name}.dim{d}" for d in range(y.dim())}
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings(), _kept_modes(module), torch.random.fork_rng(devices=[]):
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, (*inputs, *values()), buf,
                              input_names=list(names) + [n for n, _, _ in state], output_names=out_names,
                              opset_version=OPSET, training=torch.onnx.TrainingMode.PRESERVE,
                              do_constant_folding=False, dynamic_axes=dynamic_axes)
    except Exception as e:  # the exporter raises RuntimeError, SymbolicValueError, UnsupportedOperatorError...
        text = str(e).strip()
        message = text.splitlines()[0] if text else type(e).__name__
        raise CaptureError(f"torch.onnx.export failed: {message}", op=_export_error_op(text)) from e
    return Exported(buf.getvalue(), out_names, spec, flat_out)


_NODE_SCOPE = re.compile(r"^/(.*)/([^/]+)$")


def module_of_node(node_name):
    """The module path torch.onnx's node name carries: '/module/blocks.0/attn/MatMul_1' →
    'blocks.0.attn' (the first scope is _StateAsInputs' `module`)."""
    m = _NODE_SCOPE.match(node_name or "")
    if not m:
        return ""
    parts = [p for p in m.group(1).split("/") if p]
    if parts and parts[0] == "module":
        parts = parts[1:]
    return ".".join(parts)


_NODE_IN_MESSAGE = re.compile(r"node '([^']*)' \(([\w.]+)\)")


def locate(message):
    """(module path, op) named by a hodu error message about a node, or ("", None)."""
    m = _NODE_IN_MESSAGE.search(message)
    if not m:
        return "", None
    return module_of_node(m.group(1)), m.group(2)
