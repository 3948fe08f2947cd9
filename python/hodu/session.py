"""hodu.InferenceSession: onnxruntime's InferenceSession call shape on hodu.

    sess = hodu.InferenceSession("model.onnx")          # was onnxruntime.InferenceSession(...)
    outputs = sess.run(None, {"input": x})               # list of numpy arrays

Feeds: numpy arrays (C-contiguous arrays of the model's dtype are not copied),
hodu.Tensor, or any DLPack object (torch tensors), lists for sequence inputs,
None for empty optionals. The GIL is released while the model runs; one
session may be run from many threads at once.
"""
import os

from . import _hodu
from .errors import InvalidArgumentError, UnsupportedOperationError


class NodeArg:
    """An input or output of the model: name, shape (ints, symbolic dims as str,
    None for unknown dims; shape None for unknown rank) and type ("tensor(float)")."""

    __slots__ = ("name", "shape", "type", "dtype")

    def __init__(self, name, shape, type, dtype=None):  # noqa: A002 (onnxruntime's field name)
        self.name, self.shape, self.type, self.dtype = name, shape, type, dtype

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"

    def __eq__(self, other):
        return isinstance(other, NodeArg) and (self.name, self.shape, self.type) == (other.name, other.shape,
                                                                                    other.type)


class ModelMetadata:
    """onnxruntime's ModelMetadata: producer_name, graph_name, domain, description,
    graph_description, version, custom_metadata_map."""

    def __init__(self, d):
        for k, v in d.items():
            setattr(self, k, v)

    def __repr__(self):
        return f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r})"


class SessionOptions:
    """The subset of onnxruntime.SessionOptions hodu honours:
    intra_op_num_threads (0 = physical cores), enable_profiling,
    profile_file_prefix and graph_optimization_level (onnxruntime's
    GraphOptimizationLevel or its int value: ORT_DISABLE_ALL runs hodu's graph
    passes at level 0, ORT_ENABLE_BASIC at 1, ORT_ENABLE_EXTENDED at 2,
    ORT_ENABLE_ALL and anything higher at the engine's default; None: the
    default). Other attributes are accepted and ignored so that existing
    onnxruntime code runs unchanged."""

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.enable_profiling = False
        self.profile_file_prefix = "hodu_profile"
        self.graph_optimization_level = None
        self.log_severity_level = 2
        self.execution_mode = None


_PROVIDERS = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda"}


def _opt_level(level):
    """hodu's pass level (-1: the engine's default) for onnxruntime's
    GraphOptimizationLevel (an enum member or its int value)."""
    if level is None:
        return -1
    value = getattr(level, "value", level)
    try:
        value = int(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"graph_optimization_level must be an onnxruntime GraphOptimizationLevel or an int, got {level!r}")
    if value < 0:
        raise InvalidArgumentError(f"graph_optimization_level must not be negative, got {level!r}")
    return value if value <= 2 else -1


def _device_from_providers(providers, provider_options):
    """The device of the first provider hodu knows and can use (onnxruntime
    also goes down the list)."""
    names = []
    for i, p in enumerate(providers):
        name, opts = (p if isinstance(p, (tuple, list)) else (p, None))
        if provider_options and i < len(provider_options) and provider_options[i]:
            opts = provider_options[i]
        names.append(name)
        kind = _PROVIDERS.get(name)
        if kind == "cpu":
            return "cpu"
        if kind == "cuda":
            index = int((opts or {}).get("device_id", 0))
            from . import runtime
            if any(d.kind == "cuda" and d.index == index for d in runtime.devices()):
                return f"cuda:{index}"
    raise InvalidArgumentError(
        f"none of the providers {names} can be used (hodu knows {', '.join(_PROVIDERS)}; "
        "CUDA needs a CUDA device); or pass device='cpu' / 'cuda:N'")


def _policy_json(policy):
    from . import policies
    if policy is None:
        return None
    return policies.as_policy(policy).to_json()


class InferenceSession:
    """Loads a model once and runs it many times.

    model: path (.onnx, .hdss, .hodu), bytes, or hodu.Model.
    device: "cpu" or "cuda:N" (default: the policy's device, else cpu).
    threads: kernel threads (default: the policy's, else physical cores).
    engine: "interp", "cpu", ... (default: the best engine for the device).
    policy: hodu.policies.Policy / ExecutionPolicy / KernelPolicy, a dict, or
            the path of a policy JSON file.
    sess_options, providers, provider_options: onnxruntime's arguments, so that
            code written for onnxruntime works unchanged.
    remote: URL of a KServe v2 server (hodugaki serve) that runs the model: run()
            sends the feeds there and, when the server cannot be reached, times
            out or fails, warns (RuntimeWarning) and runs the local model instead.
    remote_model: the model's name on the server (default: the file name
            without extension). remote_timeout: seconds (default 10).
    """

    def __init__(self, path_or_bytes, device=None, threads=None, engine=None, policy=None, *, sess_options=None,
                 providers=None, provider_options=None, remote=None, remote_model=None, remote_timeout=10.0,
                 **unused_ort_kwargs):
        if isinstance(device, SessionOptions) or (device is not None and not isinstance(device, str)
                                                  and hasattr(device, "intra_op_num_threads")):
            # onnxruntime's positional form: InferenceSession(path, sess_options)
            sess_options, device = device, None
        self._sess_options = sess_options or SessionOptions()
        if providers and device is None:
            device = _device_from_providers(providers, provider_options)
        if threads is None and getattr(self._sess_options, "intra_op_num_threads", 0):
            threads = int(self._sess_options.intra_op_num_threads)
        if threads is not None and (not isinstance(threads, int) or threads < 0):
            raise InvalidArgumentError(f"threads must be a non-negative int (0 = physical cores), got {threads!r}")
        if device is not None and not isinstance(device, str):
            raise InvalidArgumentError(f"device must be a str such as 'cpu' or 'cuda:0', got {device!r}")
        if isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        self._model_path = path_or_bytes if isinstance(path_or_bytes, str) else None
        self._sess = _hodu.Session(path_or_bytes, device=device or "", threads=-1 if threads is None else threads,
                                   engine=engine or "", policy=_policy_json(policy) or "",
                                   opt_level=_opt_level(getattr(self._sess_options, "graph_optimization_level", None)))
        self._inputs = [NodeArg(d["name"], d["shape"], d["type"], d["dtype"]) for d in self._sess.inputs()]
        self._outputs = [NodeArg(d["name"], d["shape"], d["type"], d["dtype"]) for d in self._sess.outputs()]
        self._profile = None
        if getattr(self._sess_options, "enable_profiling", False):
            self._start_profiling()
        self._remote = None
        if remote is not None:
            from .client import InferenceClient
            if remote_model is None:
                if self._model_path is None:
                    raise InvalidArgumentError("remote= needs remote_model= when the model is not a file path")
                remote_model = os.path.splitext(os.path.basename(self._model_path))[0]
            self._remote = InferenceClient(remote, timeout=remote_timeout)
            self._remote_model = remote_model

    # ---- onnxruntime's API ----
    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []

    def get_modelmeta(self):
        return ModelMetadata(self._sess.metadata)

    def get_providers(self):
        return ["CUDAExecutionProvider" if self.device.startswith("cuda") else "CPUExecutionProvider"]

    def get_session_options(self):
        return self._sess_options

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model; returns the outputs named in `output_names` (all
        when None) as numpy arrays, sequences as lists, maps as dicts. With
        remote=URL the server runs it, and the local model when that fails."""
        feed = self._check_feed(input_feed)
        if self._remote is not None:
            outputs = self._run_remote(output_names, feed)
            if outputs is not None:
                return outputs
        return self._sess.run(output_names, feed, False)

    def run_dlpack(self, output_names, input_feed):
        """Like run(), but outputs are hodu.Tensor objects: DLPack providers
        (torch.from_dlpack(t), numpy.from_dlpack(t)) sharing hodu's buffers.
        Feeds may be any DLPack objects (torch tensors) or capsules; nothing is copied
        when their dtype and layout suit the model."""
        return self._sess.run(output_names, self._check_feed(input_feed), True)

    def io_binding(self):
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        iobinding._run()

    def end_profiling(self):
        """Stops profiling started by SessionOptions.enable_profiling and returns the trace file."""
        if self._profile is None:
            return ""
        profile, self._profile = self._profile, None
        profile.__exit__(None, None, None)
        return profile.path

    # ---- hodu's additions ----
    @property
    def device(self):
        return self._sess.device

    @property
    def engine(self):
        return self._sess.engine

    @property
    def threads(self):
        return self._sess.threads

    @property
    def policy(self):
        from . import policies
        return policies.Policy.from_json(self._sess.policy)

    def __repr__(self):
        where = self._model_path or "<bytes>"
        return f"hodu.InferenceSession({where!r}, device={self.device!r}, engine={self.engine!r})"

    def _run_remote(self, output_names, feed):
        """The outputs from the server, or None (after a RuntimeWarning) to run locally."""
        import warnings
        import numpy as np
        from .errors import HoduError
        try:
            arrays = {name: np.asarray(value) for name, value in feed.items()}
            names = list(output_names) if output_names else [o.name for o in self._outputs]
            result = self._remote.infer(self._remote_model, arrays, outputs=names)
            return [result[n] for n in names]
        except (HoduError, OSError, KeyError, ValueError, TypeError) as e:
            warnings.warn(f"remote run on {self._remote.url} failed, running locally: {e}", RuntimeWarning,
                          stacklevel=3)
            return None

    def _check_feed(self, feed):
        if not isinstance(feed, dict):
            raise InvalidArgumentError(f"input_feed must be a dict {{name: array}}, got {type(feed).__name__}")
        return feed

    def _start_profiling(self):
        from . import runtime
        prefix = getattr(self._sess_options, "profile_file_prefix", "hodu_profile")
        import datetime
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        self._profile = runtime.profile(f"{prefix}_{stamp}.json")
        self._profile.__enter__()


class IOBinding:
    """onnxruntime's IOBinding: bind inputs (numpy, hodu.Tensor, DLPack objects)
    and outputs by name, run, then take the outputs as hodu.Tensor (DLPack)
    or numpy arrays."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._output_names = []
        self._outputs = None

    def bind_input(self, name, value):
        self._inputs[name] = value

    def bind_cpu_input(self, name, arr):
        self._inputs[name] = arr

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None):
        if buffer_ptr is not None:
            raise UnsupportedOperationError("bind_output with a preallocated buffer is not supported; outputs are "
                                            "returned as hodu.Tensor (DLPack) without copies")
        if name not in self._output_names:
            self._output_names.append(name)

    def clear_binding_inputs(self):
        self._inputs = {}

    def clear_binding_outputs(self):
        self._output_names = []
        self._outputs = None

    def _run(self):
        self._outputs = self._session.run_dlpack(self._output_names or None, self._inputs)

    def get_outputs(self):
        """The outputs of the last run as hodu.Tensor objects (DLPack)."""
        if self._outputs is None:
            raise InvalidArgumentError("no outputs yet: call session.run_with_iobinding(binding) first")
        return list(self._outputs)

    def copy_outputs_to_cpu(self):
        """The outputs of the last run as numpy arrays (sharing memory where possible)."""
        return [t.numpy() if isinstance(t, _hodu.Tensor) else t for t in self.get_outputs()]


__all__ = ["InferenceSession", "SessionOptions", "IOBinding", "NodeArg", "ModelMetadata"]
