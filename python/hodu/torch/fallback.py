"""hodu.torch.compile, and what happens to a module hodu cannot capture whole.

Without fallback, the error names the innermost submodule whose own capture fails and the op.
With fallback=True that submodule's forward runs in eager PyTorch, and the submodules it
calls are compiled in turn (the same rule, recursively): a module with one op hodu cannot
handle still runs its convolutions, products and normalizations on hodu.

The submodules' example inputs come from one eager run of the whole module on the example
inputs (on copies of the buffers, with torch's random state restored after).
"""
import threading
import warnings

import torch

from . import capture as _capture
from .capture import CaptureError
from .compiled import CompiledModule, capture_error


def compile(module, example_inputs, policy=None, fallback=False, threads=None):
    """A torch.nn.Module computing what `module` does, forward on hodu's cpu engine and
    backward as hodu's autodiff graph (docs/python.md, "Training with PyTorch").

    module: a torch.nn.Module (CPU, float parameters). example_inputs: a tensor or a tuple of
    tensors as the module's forward takes them; the batch (dim 0) stays symbolic, other dims
    and dtypes are those the module is compiled for (other ones trace it again, once each).
    policy: a hodu.policies.Policy, KernelPolicy, ExecutionPolicy, dict or JSON path.
    fallback: run what hodu cannot capture in eager PyTorch instead of raising CaptureError.
    threads: hodu's kernel threads (default torch.get_num_threads()).

    The result shares the module's parameters (module.parameters(), the optimizer's), its
    buffers and train/eval flags; module.train()/eval() on either switches both."""
    if not isinstance(module, torch.nn.Module):
        from ..errors import InvalidArgumentError
        raise InvalidArgumentError(f"hodu.torch.compile: expected a torch.nn.Module, got {type(module).__name__}")
    inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    try:
        return CompiledModule(module, example_inputs, policy, threads)
    except CaptureError as e:
        if not fallback:
            raise
        records = _record_calls(module, tuple(inputs), {})
        compiled, eager = _compile_or_split(module, "", tuple(inputs), {}, records, policy, threads, e)
        for path, kind, reason in eager:
            where = f"'{path}' ({kind})" if path else kind
            warnings.warn(f"hodu.torch.compile: {where} runs in PyTorch: {reason}", RuntimeWarning, stacklevel=2)
        return compiled


class PartlyCompiled(torch.nn.Module):
    """A module whose own forward runs in PyTorch, calling compiled versions of its submodules.
    `eager_parts` lists (path, type, reason) for each part that runs in PyTorch."""

    def __init__(self, module, swaps, eager_parts):
        super().__init__()
        self.module = module
        self._swaps = swaps  # (container module, child name, compiled child)
        self.eager_parts = eager_parts
        self._lock = threading.RLock()

    def forward(self, *args, **kwargs):
        with self._lock:
            originals = [(c, name, c._modules[name]) for c, name, _ in self._swaps]
            try:
                for c, name, compiled in self._swaps:
                    c._modules[name] = compiled
                return self.module(*args, **kwargs)
            finally:
                for c, name, original in originals:
                    c._modules[name] = original

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        return self.module.load_state_dict(state_dict, strict=strict)


def _record_calls(module, args, kwargs):
    """{path: (module, args, kwargs)} of each submodule's first call in one eager run."""
    paths = {}
    for name, m in module.named_modules():
        paths.setdefault(id(m), (name, m))
    records = {}
    patched = []

    def recorder(path, m, forward):
        def record(*a, **k):
            records.setdefault(path, (m, a, k))
            return forward(*a, **k)
        return record

    for path, m in paths.values():
        if path and not isinstance(m, torch.jit.ScriptModule):
            patched.append(m)
            m.forward = recorder(path, m, m.forward)
    copies = {id(b): b.detach().clone() for b in module.buffers()}
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]), _capture._swapped_state(module, copies):
            module(*args, **kwargs)
    finally:
        for m in patched:
            del m.forward
    return records


def _frontier(module, path, records):
    """The submodules under `module` its own forward calls: called children, and the called
    descendants of children that are only containers (ModuleList, ModuleDict, ...)."""
    out = []
    for name, child in module._modules.items():
        if child is None:
            continue
        p = f"{path}.{name}" if path else name
        if p in records:
            out.append((module, name, p))
        else:
            out.extend((c, n, q) for c, n, q in _frontier(child, p, records))
    return out


def _tensor_call(args, kwargs):
    return not kwargs and all(isinstance(a, torch.Tensor) for a in args)


def _compile_or_split(module, path, args, kwargs, records, policy, threads, error=None):
    if error is None:
        if _tensor_call(args, kwargs):
            try:
                compiled = CompiledModule(module, args, policy, threads, path=path)
                if path:  # a part of a model: fed activations that require grad
                    compiled.plan_input_gradients(args)
                return compiled, []
            except CaptureError as e:
                error = e
        else:
            error = "called with arguments that are not tensors"
    eager = [(path, type(module).__name__, getattr(error, "reason", str(error)))]
    swaps = []
    for container, name, p in _frontier(module, path, records):
        child, a, k = records[p]
        if not any(True for _ in child.parameters()):
            continue  # parameter-free parts (activations, pooling) stay in PyTorch with their caller
        compiled, sub_eager = _compile_or_split(child, p, a, k, records, policy, threads)
        swaps.append((container, name, compiled))
        eager.extend(sub_eager)
    return PartlyCompiled(module, swaps, eager), eager


def _forget(error):
    """Drops the tracebacks of a failed export: while its frames (and the half-converted graph
    they hold) live, the next torch.onnx.export in this process fails in its shape inference."""
    while error is not None:
        error.__traceback__ = None
        error = error.__cause__ or error.__context__


def localize(owner, error, inputs):
    """`error` (the whole module's capture failed) as a CaptureError naming the innermost
    submodule whose own capture fails the same way."""
    path, op = "", error.op
    _forget(error)
    try:
        records = _record_calls(owner.module, tuple(inputs), {})
        module = owner.module
        while True:
            found = None
            for _, _, p in _frontier(module, path, records):
                child, a, k = records[p]
                if not _tensor_call(a, k):
                    continue
                try:
                    _capture.export(child, a, _capture.input_names(child, len(a)), _capture.state_entries(child))
                except CaptureError as e:
                    found, op = (p, child), e.op or op
                    _forget(e)
                    break
            if found is None:
                break
            path, module = found
    except Exception:  # locating is best effort: the original error still says what failed
        pass
    return capture_error(owner, path, op, error.reason)
