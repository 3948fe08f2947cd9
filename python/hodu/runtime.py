"""hodu.runtime: devices, memory statistics, streams and profiling.

    hodu.runtime.devices()                  # [DeviceInfo(kind='cpu', ...), DeviceInfo(kind='cuda', ...)]
    hodu.runtime.memory_stats("cpu")        # allocator statistics
    hodu.runtime.empty_cache()              # returns cached blocks to the device
    with hodu.runtime.profile("trace.json") as p:
        sess.run(None, feeds)                # chrome-trace JSON written on exit; p.summary()

These are thin views of hodu's C++ runtime services (src/runtime: DeviceManager,
MemoryManager, StreamManager, Profiler; docs/runtime.md).
"""
import os

from . import _hodu
from .errors import InvalidArgumentError


class DeviceInfo:
    """One device: kind ("cpu", "cuda"), index, name, memory (bytes, total),
    capabilities (a dict of what it supports: ISA flags, compute capability,
    fp16/bf16/fp8/int4...), and `details` with everything else hodu knows."""

    def __init__(self, kind, index, name, memory, capabilities, details=None):
        self.kind, self.index, self.name, self.memory = kind, index, name, memory
        self.capabilities = capabilities
        self.details = details or {}

    @property
    def device(self):
        """The device string sessions take: "cpu" or "cuda:N"."""
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    def __repr__(self):
        gib = self.memory / 2**30 if self.memory else 0
        return f"DeviceInfo(device={self.device!r}, name={self.name!r}, memory={gib:.1f} GiB)"

    def __eq__(self, other):
        return isinstance(other, DeviceInfo) and (self.kind, self.index, self.name) == (other.kind, other.index,
                                                                                      other.name)


def devices():
    """Every device hodu can run on (CPU first, then CUDA devices when a CUDA
    runtime and a GPU are present)."""
    return [DeviceInfo(**d) for d in _hodu.devices()]


def _device_string(device):
    if device is None:
        return "cpu"
    if isinstance(device, DeviceInfo):
        return device.device
    if not isinstance(device, str):
        raise InvalidArgumentError(f"device must be a str such as 'cpu' or 'cuda:0', got {device!r}")
    return _hodu.parse_device(device)


def memory_stats(device="cpu"):
    """Allocator statistics of a device as a dict: allocated / reserved / active
    bytes (current, peak) and allocation counts, per pool where the allocator
    has pools (the CUDA caching allocator)."""
    return _hodu.memory_stats(_device_string(device))


def empty_cache(device=None):
    """Returns the memory cached by hodu's allocators to the device (all
    devices when None); like torch.cuda.empty_cache()."""
    _hodu.empty_cache("" if device is None else _device_string(device))


class Stream:
    """A stream of work on a device. On the CPU, tasks run in order on a worker
    thread; on CUDA it is a CUDA stream. `synchronize()` waits for everything
    submitted so far."""

    def __init__(self, device="cpu"):
        self.device = _device_string(device)
        self._stream = _hodu.Stream(self.device)

    def submit(self, fn, *args, **kwargs):
        """Runs fn(*args, **kwargs) on the stream, after what was submitted before."""
        if not callable(fn):
            raise InvalidArgumentError("Stream.submit takes a callable")
        self._stream.submit(lambda: fn(*args, **kwargs))

    def synchronize(self):
        """Waits for everything submitted; re-raises the first error a task raised."""
        self._stream.synchronize()

    def query(self):
        """True when the stream is idle."""
        return self._stream.query()

    def record_event(self):
        """An event marking the current end of the stream (event.synchronize(), query(), elapsed_ms(start))."""
        return self._stream.record_event()

    def wait_event(self, event):
        """Work submitted later waits until `event` is reached."""
        self._stream.wait_event(event)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.synchronize()
        return False

    def __repr__(self):
        return f"hodu.runtime.Stream(device={self.device!r})"


class profile:  # noqa: N801 (a context manager used like a function, as torch.profiler.profile)
    """Profiles every hodu run inside the block (one span per node: op, node,
    engine, kernel, input shapes, output bytes) and writes a chrome-trace JSON
    (ONNX Runtime's event style; open it in Perfetto or chrome://tracing) to
    `path` when the block ends.

        with hodu.runtime.profile("trace.json") as p:
            sess.run(None, feeds)
        print(p.table())
    """

    def __init__(self, path):
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(f"profile(path): path must be a str or os.PathLike, got {path!r}")
        self.path = os.fspath(path)
        self._profiler = _hodu.Profiler()

    def __enter__(self):
        self._profiler.start()
        return self

    def __exit__(self, *exc):
        self._profiler.stop()
        self._profiler.write_chrome_trace(self.path)
        return False

    def summary(self):
        """Per-op totals, largest first: [{"op", "count", "total_ms", "percent"}]."""
        return self._profiler.summary()

    def table(self):
        """The per-op summary as a text table."""
        return self._profiler.summary_table()

    @property
    def run_ms(self):
        """Total time of the profiled runs in milliseconds."""
        return self._profiler.run_ms

    @property
    def event_count(self):
        return self._profiler.event_count


def engines():
    """The engines of this build: [{"name", "description"}], in order of preference."""
    return _hodu.engines()


def kernels(op=""):
    """Registered kernel implementations (all, or of one op type): name, engine,
    device, priority — the names a KernelPolicy may use."""
    return _hodu.kernels(op)


__all__ = ["DeviceInfo", "devices", "memory_stats", "empty_cache", "Stream", "profile", "engines", "kernels"]
