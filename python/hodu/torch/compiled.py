"""hodu.torch.compile's module: forward on hodu's cpu engine, backward as hodu's autodiff
graph, inside a torch.autograd.Function.

A capture (_Capture) is the module traced (capture.py) with the train/eval flags its
submodules have, for one input signature (dtypes, ranks, and dims but the batch), the batch
dim symbolic. For training it is split (passes/autodiff_split.h) into a forward graph, which
also outputs the activations the backward reads, and a backward graph fed the outputs'
gradients; each runs in a hodu Session, planned once per input shape. Parameters and buffers
are fed per run as hodu tensors over the torch tensors' memory (DLPack, no copy), so an
optimizer's in-place step is what the next run computes with.
"""
import threading
import warnings

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import _hodu
from ..errors import HoduError, InvalidArgumentError
from ..policies import as_policy
from . import capture as _capture
from .capture import CaptureError

_RANDOM_OPS = {"Dropout", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
               "Multinomial"}
_FLOAT_DTYPES = {"f16", "bf16", "f32", "f64"}


def capture_error(owner, where, op, reason):
    """CaptureError "hodu.torch.compile: module 'blocks.0' (Attn), op X: <reason> (...)"."""
    return CaptureError(f"hodu.torch.compile: {owner.what(where)}{', op ' + op if op else ''}: {reason} "
                        "(hodu.torch.compile(..., fallback=True) runs it in PyTorch)",
                        module=owner.path(where), op=op, reason=reason)


def _feed(t, what):
    """A torch tensor as a hodu feed (hodu packs strided ones)."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgumentError(f"hodu.torch: {what} is a {type(t).__name__}, not a torch.Tensor")
    if t.device.type != "cpu":
        raise InvalidArgumentError(f"hodu.torch runs on the CPU; {what} is on {t.device}")
    return t.detach()


class _StateFeeds:
    """hodu tensors over the parameters' and buffers' memory, made once and remade only when a
    tensor's storage, shape or strides change (after `p.data = ...`)."""

    def __init__(self):
        self._cache = {}

    def get(self, name, t):
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        hit = self._cache.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        if t.device.type != "cpu":
            raise InvalidArgumentError(f"hodu.torch runs on the CPU; '{name}' is on {t.device}")
        if not t.is_contiguous():
            return _hodu.Tensor.from_dlpack(t.detach().contiguous())  # a copy; strided state is rare
        h = _hodu.Tensor.from_dlpack(t.detach())
        self._cache[name] = (key, h)
        return h


class _TrainingPlan:
    """One capture's split graphs for one set of wanted gradients, and their sessions."""

    def __init__(self, cap, wrt):
        self.wrt = list(wrt)  # graph inputs whose gradients the backward outputs, in its output order
        try:
            split = _hodu.split_gradient_graph(cap.model, cap.diff_outputs, self.wrt)
        except HoduError as e:
            raise cap.error(e) from None
        self.forward_names = [o["name"] for o in split["forward"].outputs]
        self.seeds = split["seeds"]
        self.saved = split["saved"]
        self.reused = split["reused_inputs"]
        self.forward = cap.session(split["forward"])
        self.backward = cap.session(split["backward"], random=False)


class _Capture:
    """The module traced with its current train/eval flags for one input signature."""

    def __init__(self, owner, inputs, dynamic_batch=True, check=False):
        self.owner = owner
        module = owner.module
        self.training = any(m.training for m in owner._submodules)
        self.input_names = owner.input_names
        self.dynamic_batch = dynamic_batch
        self.example_batch = next((x.shape[0] for x in inputs if x.dim() > 0), None)
        state = _capture.state_entries(module)
        failed = None
        try:
            exported = _capture.export(module, inputs, self.input_names, state, dynamic_batch=dynamic_batch)
        except CaptureError as e:
            failed = e
        if failed is not None:  # located outside the handler, once the failed export's frames are gone
            raise owner.localize(failed, inputs)
        self.out_names, self.out_spec = exported.output_names, exported.output_spec
        model = _hodu.load(exported.onnx)
        graph_inputs = {i["name"] for i in model.inputs}
        # The state the graph reads (the exporter drops inputs nothing reads).
        self.state = [(name, t) for name, t, _ in state if name in graph_inputs]
        self.state_names = {name for name, _ in self.state}
        self.data_inputs = {n for n in self.input_names if n in graph_inputs}
        self.graph_inputs = graph_inputs
        by_name = dict(self.state)
        model, pairs = _hodu.batch_norm_state_outputs(model, True)
        self.bn_state = [(by_name[i], o) for i, o in pairs]
        self.model = model
        outs = {o["name"]: o for o in model.outputs}
        self.out_dtypes = [outs[n].get("dtype") for n in self.out_names]
        self.diff_outputs = [n for n, dt in zip(self.out_names, self.out_dtypes) if dt in _FLOAT_DTYPES]
        self.random = bool(_RANDOM_OPS & set(model.info()["ops"]))
        self._infer = None
        self._plans = {}
        self._lock = threading.Lock()
        if check and not self.random and not self.bn_state:
            self._check(inputs, exported.eager_outputs)

    def _check(self, inputs, expected):
        """The capture computes what the module does on the example inputs (relative L2 error
        at most 1e-3 per output): a trace that is wrong for its own example is refused."""
        got = self.outputs(self.run(self.inference(), self.feeds(inputs)))
        for name, g, e in zip(self.out_names, got, expected):
            if tuple(g.shape) != tuple(e.shape):
                raise capture_error(self.owner, "", None, f"output {name} has shape {tuple(g.shape)} on hodu but "
                                    f"{tuple(e.shape)} in PyTorch")
            if e.is_floating_point() and e.numel():
                e64, g64 = e.double(), g.double()
                err = float((g64 - e64).norm() / max(float(e64.norm()), 1e-30))
                if not err <= 1e-3:
                    raise capture_error(self.owner, "", None, f"output {name} differs from PyTorch's on the "
                                        f"example inputs (relative L2 error {err:.2e})")
            elif not torch.equal(g, e):
                raise capture_error(self.owner, "", None, f"output {name} differs from PyTorch's on the example inputs")

    def error(self, e):
        """A hodu error about a node as a CaptureError naming the module it came from."""
        where, op = _capture.locate(str(e))
        if not where and not op:
            return e
        return capture_error(self.owner, where, op, str(e))

    def session(self, model, random=True):
        seed = 0
        if random and self.random and self.training:
            seed = int(torch.randint(0, 2**62, (1,)).item())  # dropout masks follow torch.manual_seed
        try:
            return _hodu.Session(model, "cpu", self.owner.threads, "cpu", self.owner.policy_json,
                                 reseed_each_run=self.training, seed=seed)
        except HoduError as e:
            raise self.error(e) from None

    def inference(self):
        with self._lock:
            if self._infer is None:
                self._infer = self.session(self.model)
            return self._infer

    def plan(self, wrt):
        with self._lock:
            p = self._plans.get(wrt)
            if p is None:
                p = self._plans[wrt] = _TrainingPlan(self, wrt)
            return p

    def state_tensors(self):
        return [t for _, t in self.state]

    def feeds(self, inputs, state=None):
        feeds = {}
        for name, x in zip(self.input_names, inputs):
            if name in self.data_inputs:
                feeds[name] = _feed(x, f"input '{name}'")
        cache = self.owner.state_feeds
        for (name, t), s in zip(self.state, state if state is not None else self.state_tensors()):
            feeds[name] = cache.get(name, s)
        return feeds

    def run(self, session, feeds):
        try:
            return session.run(None, feeds, as_tensors=True)
        except HoduError as e:
            raise self.error(e) from None

    def outputs(self, results, names=None):
        """The module's outputs (torch tensors over hodu's buffers) from a run's results."""
        by_name = dict(zip(names, results)) if names else dict(zip(self.out_names, results))
        return [torch.from_dlpack(by_name[n]) for n in self.out_names]

    def update_buffers(self, results, names):
        """BatchNorm's running statistics (and its count of batches) as PyTorch updates them."""
        if not self.bn_state:
            return
        by_name = dict(zip(names, results))
        with torch.no_grad():
            for buf, out in self.bn_state:
                buf.copy_(torch.from_dlpack(by_name[out]))
            for m in self.owner.batch_norms:
                if m.training and getattr(m, "num_batches_tracked", None) is not None:
                    m.num_batches_tracked.add_(1)


class _HoduFunction(torch.autograd.Function):
    """forward: the split forward graph; backward: the backward graph fed dL/d(outputs)."""

    @staticmethod
    def forward(ctx, cap, n_inputs, *tensors):
        inputs, state = tensors[:n_inputs], tensors[n_inputs:]
        names = list(cap.input_names) + [n for n, _ in cap.state]
        needs = ctx.needs_input_grad[2:]
        wrt = tuple(n for n, need in zip(names, needs) if need and n in cap.graph_inputs)
        plan = cap.plan(wrt)
        results = cap.run(plan.forward, cap.feeds(inputs, state))
        cap.update_buffers(results, plan.forward_names)
        outs = cap.outputs(results, plan.forward_names)
        # What the backward reads: torch tensors where they are the module's outputs, inputs or
        # state (save_for_backward refuses a backward after they changed in place, as torch
        # does), hodu tensors for the activations only the backward sees.
        by_name = dict(zip(names, tensors))
        out_pos = {n: i for i, n in enumerate(cap.out_names)}
        result_of = dict(zip(plan.forward_names, results))
        keep, keep_names, ctx.hodu_saved = [], [], {}
        for n in plan.saved:
            if n in out_pos:
                keep.append(outs[out_pos[n]])
                keep_names.append(n)
            else:
                ctx.hodu_saved[n] = result_of[n]
        for n in plan.reused:
            keep.append(by_name[n])
            keep_names.append(n)
        ctx.save_for_backward(*keep)
        ctx.keep_names, ctx.plan, ctx.cap, ctx.names = keep_names, plan, cap, names
        ctx.mark_non_differentiable(*[o for o, dt in zip(outs, cap.out_dtypes) if dt not in _FLOAT_DTYPES])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        plan, cap = ctx.plan, ctx.cap
        feeds = dict(ctx.hodu_saved)
        state = cap.owner.state_feeds
        for n, t in zip(ctx.keep_names, ctx.saved_tensors):
            feeds[n] = state.get(n, t) if n in cap.state_names else t.detach()
        grad_of = dict(zip(cap.out_names, grads))
        for seed in plan.seeds:
            g = grad_of[seed[len("grad."):]]
            feeds[seed] = g.detach()
        results = cap.run(plan.backward, feeds)
        by_wrt = {w: torch.from_dlpack(r) for w, r in zip(plan.wrt, results)}
        return (None, None, *[by_wrt.get(n) for n in ctx.names])


def _signature(inputs):
    return tuple((x.dtype, x.dim(), tuple(x.shape[1:])) for x in inputs)


class CompiledModule(torch.nn.Module):
    """A module running on hodu (hodu.torch.compile's result). Its parameters, buffers, modes
    and state_dict are the wrapped module's: optimizers, train()/eval(), load_state_dict and
    torch.save work as on the module itself."""

    def __init__(self, module, example_inputs, policy=None, threads=None, path="", static_shapes=False):
        super().__init__()
        self._static_shapes = static_shapes  # every input shape traced and planned on its own (torch.ops.hodu)
        if not isinstance(module, torch.nn.Module):
            raise InvalidArgumentError(f"hodu.torch.compile: expected a torch.nn.Module, got {type(module).__name__}")
        self.module = module
        inputs = _as_inputs(example_inputs, module)
        self._path = path
        self.input_names = _capture.input_names(module, len(inputs))
        p = as_policy(policy) if policy is not None else None
        self.threads = threads if threads is not None else (
            p.execution.threads if p is not None and p.execution.threads else torch.get_num_threads())
        self.policy_json = p.to_json() if p is not None else ""
        self.state_feeds = _StateFeeds()
        self._submodules = list(module.modules())  # their train/eval flags pick the capture
        self.batch_norms = [m for m in self._submodules if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        for m in self.batch_norms:
            if m.training and m.track_running_stats and m.momentum is None:
                raise capture_error(self, self._sub_path(m), None, "BatchNorm with momentum=None (a cumulative "
                                    "average) is not supported; give it a momentum")
        self._captures = {}
        self._lock = threading.Lock()
        self._warned_static = False
        self._n_inputs = len(inputs)
        cap = self._capture(inputs, check=True)
        baked = _baked_parameters(module, inputs, {id(t) for _, t in cap.state})
        if baked:
            name = baked[0]
            where = name.rsplit(".", 1)[0] if "." in name else ""
            sub = module.get_submodule(where) if where else module
            raise capture_error(self, where, type(sub).__name__,
                                f"torch.onnx.export baked parameter '{name}' into the graph as a constant (it "
                                "does so with LSTM, GRU and RNN weights), so hodu would neither train it nor "
                                "see an optimizer's step")
        if any(p.requires_grad for _, p in cap.state) and cap.diff_outputs:
            cap.plan(tuple(n for n, t in cap.state if t.requires_grad))  # autodiff errors now, not at backward

    def plan_input_gradients(self, inputs):
        """Differentiates the capture for `inputs` with respect to its float inputs too, now (a
        submodule inside a model gets activations that require grad): a CaptureError here
        rather than at the first backward."""
        cap = self._capture(inputs)
        if not cap.diff_outputs:
            return
        names = list(cap.input_names) + [n for n, _ in cap.state]
        needs = [x.is_floating_point() for x in inputs] + [t.requires_grad for _, t in cap.state]
        wrt = tuple(n for n, need in zip(names, needs) if need and n in cap.graph_inputs)
        if wrt:
            cap.plan(wrt)

    # ---- names for messages ----
    def path(self, where=""):
        return ".".join(p for p in (self._path, where) if p)

    def what(self, where=""):
        try:
            sub = self.module.get_submodule(where) if where else self.module
        except AttributeError:  # a scope name that is not a submodule's path
            sub, where = self.module, ""
        name = self.path(where)
        return f"module '{name}' ({type(sub).__name__})" if name else f"module {type(sub).__name__}"

    def _sub_path(self, target):
        for name, m in self.module.named_modules():
            if m is target:
                return name
        return ""

    def localize(self, error, inputs):
        from .fallback import localize
        return localize(self, error, inputs)

    # ---- captures ----
    def _capture(self, inputs, check=False):
        if self._static_shapes:
            return self._static_capture(inputs)
        return self._cached_capture(_signature(inputs), lambda: _Capture(self, inputs, check=check))

    def _static_capture(self, inputs):
        """For a module whose trace depends on the batch size (a reshape to a number): a capture
        for these exact shapes."""
        return self._cached_capture(("static", tuple((x.dtype, tuple(x.shape)) for x in inputs)),
                                    lambda: _Capture(self, inputs, dynamic_batch=False))

    def _cached_capture(self, key, make):
        """The capture for `key` under the submodules' current train/eval modes, made by make()
        (outside the lock: tracing is slow) when there is none yet."""
        key = (tuple(m.training for m in self._submodules), key)
        with self._lock:
            cap = self._captures.get(key)
        if cap is None:
            cap = make()
            with self._lock:
                self._captures.setdefault(key, cap)
        return cap

    def forward(self, *inputs):
        if len(inputs) != self._n_inputs:
            raise InvalidArgumentError(f"hodu.torch: {self.what()} was compiled for {self._n_inputs} inputs, "
                                       f"called with {len(inputs)}")
        for name, x in zip(self.input_names, inputs):
            _feed(x, f"input '{name}'")
        cap = self._capture(inputs)
        try:
            return self._run(cap, inputs)
        except HoduError:
            batch = next((x.shape[0] for x in inputs if x.dim() > 0), None)
            if not cap.dynamic_batch or batch == cap.example_batch:
                raise
        # The graph traced at another batch size does not run at this one: trace at this one.
        cap = self._static_capture(inputs)
        if not self._warned_static:
            self._warned_static = True
            warnings.warn(f"hodu.torch: {self.what()} traced with a symbolic batch does not run with batch "
                          f"{inputs[0].shape[0] if inputs[0].dim() else '?'}; traced again for these shapes "
                          "(its trace depends on the batch size)", RuntimeWarning, stacklevel=2)
        return self._run(cap, inputs)

    def _run(self, cap, inputs):
        state = cap.state_tensors()
        if torch.is_grad_enabled() and cap.diff_outputs and any(t.requires_grad for t in (*inputs, *state)):
            outs = _HoduFunction.apply(cap, len(inputs), *inputs, *state)
        else:
            results = cap.run(cap.inference(), cap.feeds(inputs, state))
            names = [o["name"] for o in cap.model.outputs]
            cap.update_buffers(results, names)
            outs = cap.outputs(results, names)
        return tree_unflatten(list(outs), cap.out_spec)

    # The wrapped module's state, under its own names (not prefixed with "module.").
    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        return self.module.load_state_dict(state_dict, strict=strict)

    def extra_repr(self):
        return f"threads={self.threads}"


def _baked_parameters(module, inputs, fed):
    """Names of the parameters the module's forward differentiates through that the capture does
    not feed (ids in `fed`): the exporter made them constants. One eager forward and backward
    finds them, and only when some trainable parameter is not fed (the buffers are restored)."""
    missing = [(n, p) for n, p in module.named_parameters() if p.requires_grad and id(p) not in fed]
    if not missing:
        return []
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    try:
        with torch.enable_grad(), torch.random.fork_rng(devices=[]):
            flat = [y for y in tree_flatten(module(*inputs))[0]
                    if isinstance(y, torch.Tensor) and y.requires_grad and y.is_floating_point()]
            if not flat:
                return []
            grads = torch.autograd.grad(sum(y.sum() for y in flat), [p for _, p in missing], allow_unused=True)
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
    return [n for (n, _), g in zip(missing, grads) if g is not None]


def _as_inputs(example_inputs, module):
    if isinstance(example_inputs, torch.Tensor):
        inputs = (example_inputs,)
    elif isinstance(example_inputs, (tuple, list)):
        inputs = tuple(example_inputs)
    else:
        raise InvalidArgumentError("hodu.torch.compile: example_inputs is a tensor or a tuple of tensors, "
                                   f"not {type(example_inputs).__name__}")
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise CaptureError(f"hodu.torch.compile: module {type(module).__name__}: input {i} is a "
                               f"{type(x).__name__}; compiled modules take tensors only (pass fallback=True "
                               "to run such a module in PyTorch)", reason=f"input {i} is a {type(x).__name__}")
        if x.device.type != "cpu":
            raise InvalidArgumentError(f"hodu.torch runs on the CPU; example input {i} is on {x.device}")
    return inputs
