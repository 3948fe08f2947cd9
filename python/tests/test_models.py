"""hodu.load / save / convert / info / compile and tensor files."""
import os

import numpy as np
import pytest

import hodu


def test_load_info_save_round_trip(add_model, tmp_path):
    m = hodu.load(add_model)
    assert isinstance(m, hodu.Model)
    assert [i["name"] for i in m.inputs] == ["x", "y"]
    info = hodu.info(add_model)
    assert info["node_count"] == 1 and info["ops"] == {"Add": 1}
    assert info["inputs"][0]["shape"] == ["batch", 3] and info["inputs"][0]["dtype"] == "f32"
    assert hodu.info(m) == info
    for ext in ("hdss", "hodu", "onnx"):
        path = tmp_path / f"copy.{ext}"
        hodu.save(m, path)
        again = hodu.load(str(path))
        assert hodu.info(again)["ops"] == {"Add": 1}
        x = np.ones((2, 3), np.float32)
        np.testing.assert_array_equal(hodu.InferenceSession(str(path)).run(None, {"x": x, "y": x})[0], 2 * x)
    assert hodu.load(m.to_bytes("hdss")) == hodu.load(tmp_path / "copy.hdss")
    assert "Add" in m.to_text()


def test_convert(add_model, tmp_path):
    out = tmp_path / "m.hdss"
    hodu.convert(add_model, out)
    assert out.exists() and hodu.info(str(out))["ops"] == {"Add": 1}
    np.save(tmp_path / "a.npy", np.arange(6, dtype=np.int32).reshape(2, 3))
    hodu.convert(tmp_path / "a.npy", tmp_path / "a.json")
    np.testing.assert_array_equal(hodu.load_tensors(tmp_path / "a.json")[""], np.arange(6).reshape(2, 3))
    with pytest.raises(hodu.InvalidArgumentError, match="cannot convert between a model and a tensor file"):
        hodu.convert(add_model, tmp_path / "x.npy")


def test_tensor_files(tmp_path):
    tensors = {"a": np.arange(4, dtype=np.float32), "b": np.array([[True, False]])}
    for ext in ("npz", "hdt", "safetensors"):
        path = tmp_path / f"t.{ext}"
        hodu.save_tensors(path, tensors)
        back = hodu.load_tensors(path)
        assert set(back) == {"a", "b"}
        np.testing.assert_array_equal(back["a"], tensors["a"])
        np.testing.assert_array_equal(back["b"], tensors["b"])
    with pytest.raises(hodu.InvalidArgumentError):
        hodu.save_tensors(tmp_path / "t.unknown", tensors)


def test_load_errors(tmp_path):
    with pytest.raises(hodu.IoError):
        hodu.load(str(tmp_path / "nope.onnx"))
    (tmp_path / "model.txt").write_text("x")
    with pytest.raises(hodu.InvalidModelError, match="model.txt"):
        hodu.load(str(tmp_path / "model.txt"))
    bad = tmp_path / "bad.hodu"
    bad.write_text("this is not HoduScript {")
    with pytest.raises(hodu.InvalidModelError):
        hodu.load(str(bad))


def test_compile(add_model, tmp_path):
    with pytest.raises(hodu.InvalidArgumentError, match="opt_level"):
        hodu.compile(add_model, tmp_path / "m.so", opt_level=7)
    with pytest.raises(hodu.InvalidArgumentError, match="unknown format"):
        hodu.compile(add_model, tmp_path / "m.so", format="dll")
    with pytest.raises(hodu.InvalidArgumentError, match="unknown option 'fast'"):
        hodu.compile(add_model, tmp_path / "m.c", fast=True)
    # Symbolic dims stay free unless bound (the library takes any size there).
    r = hodu.compile(add_model, tmp_path / "free.c")
    assert "MODEL_NUM_DIMS 1" in open(tmp_path / "model.h").read()
    r = hodu.compile(add_model, tmp_path / "m.c", opt_level=1, dims={"batch": 2})
    assert "MODEL_NUM_DIMS 0" in open(tmp_path / "model.h").read()
    assert os.path.exists(tmp_path / "m.c") and r["format"]
    assert any(f.endswith(".c") for f in r["files"])
