"""Policies are data: how a model should run (runtime/policy.h, docs/runtime.md).

    KernelPolicy(matmul="cublasLt", Conv=["onednn", "reference"])
        per-op preferred kernels, most preferred first (op names match case-insensitively);
        a key may name a family of ops (matmul, conv, attention, layer_norm, gelu, softmax);
        "auto" is the registered default, "hodu" hodu's own hand-written kernels;
        precision="fp32" (optional) overrides the execution policy's precision
    ExecutionPolicy(precision="fp32", cuda_graphs=False, threads=0, deterministic=False, engine="", device="cpu")
    Policy(execution=ExecutionPolicy(...), kernels=KernelPolicy(...))

Each validates on construction (InvalidArgumentError naming the field), compares
by value, and round-trips through JSON: to_json()/from_json(), save(path)/load(path).
save() writes the policy-file format that `hodu run --policy FILE` reads:
{"execution": {...}, "kernels": {...}} with the parts the object has.
Validation and normalization are done by hodu's C++ structs, so Python and
the CLI accept exactly the same policies.
"""
import json
import numbers
import os

from . import _hodu
from .errors import InvalidArgumentError


def _read_json_file(path):
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        from .errors import IoError
        raise IoError(f"cannot read policy file {path}: {e.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgumentError(f"{path}: not valid JSON: {e}") from None


def _write_json_file(path, obj):
    with open(os.fspath(path), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def _plain(value):
    """numpy scalars and other Integral/bool-likes as plain JSON values."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    return value


class _PolicyPart:
    """What KernelPolicy and ExecutionPolicy share: JSON text, and the policy
    file, where each is the part under its _FILE_KEY."""

    _FILE_KEY = None

    def to_json(self, indent=None):
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path):
        _write_json_file(path, {self._FILE_KEY: self.to_dict()})

    @classmethod
    def load(cls, path):
        d = _read_json_file(path)
        if isinstance(d, dict) and d.keys() <= {"execution", "kernels"} and d:
            d = d.get(cls._FILE_KEY, {})
        return cls.from_json(d)


class KernelPolicy(_PolicyPart):
    """Per-op (or per-family) preferred kernel names: KernelPolicy(matmul="onednn",
    softmax="hodu", precision="fp32"), KernelPolicy({"Conv": ["onednn", "reference"]}).

    Families (a key covers each of its ops that has one of the listed kernels; the
    others keep their default): matmul (MatMul, Gemm, FusedMatMul, FusedGemm), conv
    (Conv, FusedConv, ConvGrad), attention, layer_norm (LayerNormalization,
    LayerNorm, LayerNormGrad), gelu, softmax (Softmax, LogSoftmax, SoftmaxGrad).
    Kernel names: "onednn", "hodu" (hodu's own loops, registered as "cpu"),
    "reference" (the interpreter's), "auto" (the registered default)."""

    _FILE_KEY = "kernels"

    def __init__(self, preferred=None, **ops):
        merged = {}
        if preferred is not None:
            if not isinstance(preferred, dict):
                raise InvalidArgumentError(
                    f"kernel policy: expected a dict {{op: kernel or [kernels]}}, got {type(preferred).__name__}")
            merged.update(preferred)
        merged.update(ops)
        normalized = {}
        for op, names in merged.items():
            if isinstance(names, (list, tuple)):
                names = list(names)
            normalized[op] = names
        try:
            text = json.dumps(normalized)
        except TypeError as e:
            raise InvalidArgumentError(f"kernel policy: {e}") from None
        self._preferred = json.loads(_hodu.normalize_policy("kernels", text))
        self._precision = self._preferred.pop("precision", None)

    @property
    def precision(self):
        """The kernels' compute precision ("fp32", ...), or None (the execution policy's)."""
        return self._precision

    @property
    def preferred(self):
        """{op: [kernel names]} (a copy)."""
        return {op: list(names) for op, names in self._preferred.items()}

    def get(self, op, default=None):
        """The preference list for an op, matched case-insensitively."""
        for key, names in self._preferred.items():
            if key.lower() == op.lower():
                return list(names)
        return default

    def __getitem__(self, op):
        names = self.get(op)
        if names is None:
            raise KeyError(op)
        return names

    def __contains__(self, op):
        return self.get(op) is not None

    def __len__(self):
        return len(self._preferred)

    def to_dict(self):
        d = self.preferred
        if self._precision is not None:
            d["precision"] = self._precision
        return d

    @classmethod
    def from_json(cls, text_or_dict):
        d = json.loads(text_or_dict) if isinstance(text_or_dict, (str, bytes)) else text_or_dict
        return cls(d)

    def __eq__(self, other):
        return (isinstance(other, KernelPolicy) and self._preferred == other._preferred
                and self._precision == other._precision)

    def __repr__(self):
        return f"KernelPolicy({self.to_dict()!r})"


class ExecutionPolicy(_PolicyPart):
    """precision (fp32|tf32|fp16|bf16), cuda_graphs, threads (0 = physical
    cores), deterministic, engine ("" = best for the device), device ("cpu", "cuda:N")."""

    _FILE_KEY = "execution"
    _FIELDS = ("precision", "cuda_graphs", "threads", "deterministic", "engine", "device")

    def __init__(self, precision="fp32", cuda_graphs=False, threads=0, deterministic=False, engine="", device="cpu"):
        raw = {"precision": precision, "cuda_graphs": cuda_graphs, "threads": threads,
               "deterministic": deterministic, "engine": engine if engine is not None else "",
               "device": device}
        raw = {k: _plain(v) for k, v in raw.items()}
        try:
            text = json.dumps(raw)
        except TypeError as e:
            raise InvalidArgumentError(f"execution policy: {e}") from None
        self._fields = json.loads(_hodu.normalize_policy("execution", text))

    def __getattr__(self, name):
        fields = self.__dict__.get("_fields")
        if fields is not None and name in fields:
            return fields[name]
        raise AttributeError(name)

    @classmethod
    def _check_fields(cls, names):
        unknown = set(names) - set(cls._FIELDS)
        if unknown:
            raise InvalidArgumentError(f"execution policy: unknown field(s) {sorted(unknown)} "
                                       f"(fields: {', '.join(cls._FIELDS)})")

    def replace(self, **changes):
        """A copy with some fields changed (validated again)."""
        self._check_fields(changes)
        return ExecutionPolicy(**{**self._fields, **changes})

    def to_dict(self):
        return dict(self._fields)

    @classmethod
    def from_json(cls, text_or_dict):
        d = json.loads(text_or_dict) if isinstance(text_or_dict, (str, bytes)) else text_or_dict
        if not isinstance(d, dict):
            raise InvalidArgumentError(f"execution policy: expected an object, got {type(d).__name__}")
        cls._check_fields(d)
        return cls(**d)

    def __eq__(self, other):
        return isinstance(other, ExecutionPolicy) and self._fields == other._fields

    def __repr__(self):
        return "ExecutionPolicy(" + ", ".join(f"{k}={v!r}" for k, v in self._fields.items()) + ")"


class Policy:
    """Both policies, as in a policy file: Policy(execution=..., kernels=...)."""

    def __init__(self, execution=None, kernels=None):
        if execution is None:
            execution = ExecutionPolicy()
        elif isinstance(execution, dict):
            execution = ExecutionPolicy.from_json(execution)
        if kernels is None:
            kernels = KernelPolicy()
        elif isinstance(kernels, dict):
            kernels = KernelPolicy(kernels)
        if not isinstance(execution, ExecutionPolicy):
            raise InvalidArgumentError(f"policy: execution must be an ExecutionPolicy, got {type(execution).__name__}")
        if not isinstance(kernels, KernelPolicy):
            raise InvalidArgumentError(f"policy: kernels must be a KernelPolicy, got {type(kernels).__name__}")
        self.execution, self.kernels = execution, kernels

    def to_dict(self):
        return {"execution": self.execution.to_dict(), "kernels": self.kernels.to_dict()}

    def to_json(self, indent=None):
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text_or_dict):
        d = json.loads(text_or_dict) if isinstance(text_or_dict, (str, bytes)) else text_or_dict
        if not isinstance(d, dict):
            raise InvalidArgumentError(f"policy: expected an object {{\"execution\": ..., \"kernels\": ...}}, "
                                       f"got {type(d).__name__}")
        unknown = set(d) - {"execution", "kernels"}
        if unknown:
            raise InvalidArgumentError(f"policy: unknown key(s) {sorted(unknown)} (execution, kernels)")
        return cls(d.get("execution"), d.get("kernels"))

    def save(self, path):
        _write_json_file(path, self.to_dict())

    @classmethod
    def load(cls, path):
        return cls.from_json(_read_json_file(path))

    def check(self):
        """Checks the policy against this build's kernels and engines (what a
        session would refuse: a kernel not registered for the op on the device,
        an engine that cannot run the precision); returns the engine it would use."""
        return _hodu.check_policy(self.to_json())

    def __eq__(self, other):
        return isinstance(other, Policy) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return f"Policy(execution={self.execution!r}, kernels={self.kernels!r})"


def as_policy(value):
    """A Policy from a Policy, ExecutionPolicy, KernelPolicy, dict (policy-file
    form) or the path of a policy file."""
    if isinstance(value, Policy):
        return value
    if isinstance(value, ExecutionPolicy):
        return Policy(execution=value)
    if isinstance(value, KernelPolicy):
        return Policy(kernels=value)
    if isinstance(value, dict):
        return Policy.from_json(value)
    if isinstance(value, (str, os.PathLike)):
        return Policy.load(value)
    raise InvalidArgumentError(f"policy must be a Policy, ExecutionPolicy, KernelPolicy, dict or path, "
                               f"got {type(value).__name__}")


__all__ = ["KernelPolicy", "ExecutionPolicy", "Policy", "as_policy"]
