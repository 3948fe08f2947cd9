"""Zero-copy: numpy inputs wrapped in place, outputs owning hodu's buffers, DLPack both ways."""
import gc
import sys
import weakref

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import hodu
from hodu import _hodu
from conftest import identity_model, make_model, save


def test_numpy_input_not_copied():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = hodu.Tensor.from_numpy(a)
    assert t.data_ptr == a.ctypes.data  # the same memory
    assert t.shape == (3, 4) and t.dtype == "f32" and t.device == "cpu"
    a[0, 0] = 42
    assert t.numpy()[0, 0] == 42


def test_numpy_input_kept_alive():
    a = np.arange(1000, dtype=np.int64)
    ref = sys.getrefcount(a)
    t = hodu.Tensor.from_numpy(a)
    assert sys.getrefcount(a) == ref + 1  # the hodu Storage holds the array
    addr = a.ctypes.data
    del a
    gc.collect()
    assert t.data_ptr == addr
    np.testing.assert_array_equal(t.numpy(), np.arange(1000))


def test_array_released_with_tensor():
    class Holder(np.ndarray):
        pass

    a = np.zeros(10, np.float32).view(Holder)
    alive = weakref.ref(a)
    t = hodu.Tensor.from_numpy(a)
    del a
    gc.collect()
    assert alive() is not None
    del t
    gc.collect()
    assert alive() is None


def test_non_contiguous_input_is_copied():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = a[:, ::2]
    t = hodu.Tensor.from_numpy(view)
    assert t.data_ptr != view.ctypes.data and t.is_contiguous
    np.testing.assert_array_equal(t.numpy(), view)
    big_endian = np.arange(5, dtype=">i4")
    np.testing.assert_array_equal(hodu.Tensor.from_numpy(big_endian).numpy(), np.arange(5))


def test_run_feeds_are_not_copied_or_leaked(add_model):
    s = hodu.InferenceSession(add_model)
    x = np.ones((2, 3), np.float32)
    before = sys.getrefcount(x)
    for _ in range(5):
        s.run(None, {"x": x, "y": x})
    assert sys.getrefcount(x) == before  # the wrapper released its reference after each run


def test_outputs_own_hodu_buffers(add_model):
    s = hodu.InferenceSession(add_model, engine="interp")
    x = np.ones((2, 3), np.float32)
    (z,) = s.run(None, {"x": x, "y": x})
    # The array's base is the capsule holding hodu's Tensor and its memory is that tensor's: no copy.
    assert type(z.base).__name__ == "PyCapsule"
    assert _hodu._hodu_buffer_address(z) == z.ctypes.data
    assert not z.flags.owndata and z.flags.writeable
    z += 1  # ours to change
    del s
    gc.collect()
    np.testing.assert_array_equal(z, np.full((2, 3), 3, np.float32))


@pytest.mark.parametrize("engine", ["interp", "cpu"])
def test_outputs_never_alias_inputs_or_weights(tmp_path, engine):
    if engine not in [e["name"] for e in hodu.runtime.engines()]:
        pytest.skip(f"no {engine} engine in this build")
    # y = Identity(x): the engine may return x's own storage; the caller must still get a separate array.
    s = hodu.InferenceSession(identity_model(tmp_path, TensorProto.FLOAT, rank=1), engine=engine)
    x = np.arange(4, dtype=np.float32)
    (y,) = s.run(None, {"x": x})
    assert not np.shares_memory(x, y)
    # w = Identity(weight): writing into the output must not change the model.
    wv = helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])
    weight = numpy_helper.from_array(np.array([1, 2, 3], np.float32), "weight")
    dummy = helper.make_tensor_value_info("d", TensorProto.FLOAT, [1])
    m = make_model([helper.make_node("Identity", ["weight"], ["w"])], [dummy], [wv], [weight])
    s = hodu.InferenceSession(save(m, tmp_path, "weight.onnx"), engine=engine)
    (w,) = s.run(None, {"d": np.zeros(1, np.float32)})
    w[:] = 0
    np.testing.assert_array_equal(s.run(None, {"d": np.zeros(1, np.float32)})[0], [1, 2, 3])


torch = pytest.importorskip("torch")


def test_torch_to_hodu_without_copy():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = hodu.from_dlpack(x)
    assert t.data_ptr == x.data_ptr() and t.shape == (3, 4) and t.dtype == "f32"
    x[1, 1] = -5
    assert t.numpy()[1, 1] == -5
    del x
    gc.collect()
    assert t.numpy()[1, 1] == -5  # torch's memory stays alive with the hodu tensor


def test_hodu_to_torch_without_copy():
    t = hodu.Tensor.from_numpy(np.arange(6, dtype=np.int64).reshape(2, 3))
    x = torch.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr and x.dtype == torch.int64 and tuple(x.shape) == (2, 3)
    y = np.from_dlpack(t)
    assert y.ctypes.data == t.data_ptr


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                                   torch.int16, torch.int32, torch.int64, torch.uint8])
def test_torch_dtypes_round_trip(dtype):  # (torch 1.13 cannot export bool through DLPack)
    x = (torch.arange(10) % 3).to(dtype)
    back = torch.from_dlpack(hodu.from_dlpack(x))
    assert torch.equal(back.to(torch.float64), x.to(torch.float64))


def test_strided_torch_tensor():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # non-contiguous view
    t = hodu.from_dlpack(x)
    assert not t.is_contiguous and t.strides == (1, 4)
    np.testing.assert_array_equal(t.numpy(), x.numpy())


def test_capsule_consumed_once():
    cap = torch.ones(3).__dlpack__()
    hodu.from_dlpack(cap)
    with pytest.raises(hodu.InvalidArgumentError, match="consumed once"):
        hodu.from_dlpack(cap)


def test_run_dlpack_with_torch(add_model):
    s = hodu.InferenceSession(add_model)
    x = torch.ones(2, 3)
    y = torch.full((2, 3), 2.0)
    (z,) = s.run_dlpack(None, {"x": x, "y": y})
    assert isinstance(z, hodu.Tensor)
    zt = torch.from_dlpack(z)
    assert zt.data_ptr() == z.data_ptr
    assert torch.equal(zt, x + y)
    # Feeds may be raw DLPack capsules too; torch tensors also work with run().
    np.testing.assert_array_equal(s.run(None, {"x": x.__dlpack__(), "y": y})[0], (x + y).numpy())
    with pytest.raises(hodu.InvalidArgumentError, match="dtype double"):
        s.run(None, {"x": x.double(), "y": y})
    # A strided view is packed before the run (as a non-contiguous numpy array is).
    xt = torch.arange(6, dtype=torch.float32).reshape(3, 2).t()
    np.testing.assert_array_equal(s.run(None, {"x": xt, "y": y})[0], (xt + y).numpy())


def _fake_cuda_capsule(deleted):
    """A DLPack capsule (DLPack 0.6 ABI) that claims to live on cuda:0, built with ctypes."""
    import ctypes

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                    ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                    ("byte_offset", ctypes.c_uint64)]

    deleter_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    class DLManagedTensor(ctypes.Structure):
        _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", deleter_type)]

    buf = (ctypes.c_float * 6)()
    shape = (ctypes.c_int64 * 2)(2, 3)
    deleter = deleter_type(lambda _: deleted.append(1))
    managed = DLManagedTensor(DLTensor(ctypes.cast(buf, ctypes.c_void_p), DLDevice(2, 0), 2, DLDataType(2, 32, 1),
                                       shape, None, 0), None, deleter)
    keep = (buf, shape, deleter, managed)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new_capsule(ctypes.addressof(managed), b"dltensor", None), keep


def test_feed_on_the_wrong_device(add_model):
    deleted = []
    capsule, keep = _fake_cuda_capsule(deleted)
    t = hodu.from_dlpack(capsule)
    assert t.device == "cuda:0" and t.__dlpack_device__() == (2, 0)
    s = hodu.InferenceSession(add_model)
    with pytest.raises(hodu.InvalidArgumentError, match="input 'x' is on cuda:0 but the session runs on cpu"):
        s.run(None, {"x": t, "y": np.ones((2, 3), np.float32)})
    with pytest.raises(hodu.InvalidArgumentError, match="cannot become a numpy array"):
        t.numpy()
    assert deleted == []
    del t
    gc.collect()
    assert deleted == [1]  # the producer's deleter ran exactly once, when hodu let go
