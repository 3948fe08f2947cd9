"""Every hodu::ErrorCode maps to its Python class, with the built-in base a Python user would catch."""
import pytest

import hodu
from hodu import _hodu

CASES = [
    ("InvalidModel", hodu.InvalidModelError, ValueError),
    ("InvalidArgument", hodu.InvalidArgumentError, ValueError),
    ("Unsupported", hodu.UnsupportedOperationError, NotImplementedError),
    ("OutOfMemory", hodu.OutOfMemoryError, MemoryError),
    ("Device", hodu.DeviceError, hodu.HoduError),
    ("Io", hodu.IoError, OSError),
    ("Internal", hodu.InternalError, hodu.HoduError),
]


@pytest.mark.parametrize("code,cls,builtin", CASES)
def test_error_code_mapping(code, cls, builtin):
    with pytest.raises(cls) as e:
        _hodu._raise(code, f"message for {code}")
    assert type(e.value) is cls
    assert isinstance(e.value, hodu.HoduError) and isinstance(e.value, builtin)
    assert str(e.value) == f"message for {code}"


def test_cuda_error_is_a_device_error():
    with pytest.raises(hodu.CudaError) as e:
        _hodu._raise("Device", "CUDA error: out of resources (cudaMalloc)")
    assert isinstance(e.value, hodu.DeviceError)
    with pytest.raises(hodu.DeviceError) as e:
        _hodu._raise("Device", "device lost")
    assert not isinstance(e.value, hodu.CudaError)


def test_all_classes_exported():
    for name in hodu.errors.__all__:
        assert getattr(hodu, name) is getattr(hodu.errors, name)
        assert issubclass(getattr(hodu, name), hodu.HoduError)


def test_session_on_absent_cuda_device_is_a_device_error():
    if any(d.kind == "cuda" for d in hodu.runtime.devices()):
        pytest.skip("a CUDA device is present: this checks the machine without one")
    import os
    model = os.path.join(os.environ.get("HODU_SOURCE_DIR", "."), "examples", "models", "tiny_cnn.onnx")
    with pytest.raises(hodu.DeviceError, match="cuda:0"):
        hodu.InferenceSession(model, device="cuda:0")
