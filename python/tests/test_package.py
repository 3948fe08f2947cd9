"""hodu.pack / hodu.package_info and InferenceSession on a .hodupkg (docs/hodupkg.md)."""
import json
import platform
import shutil
import struct

import numpy as np
import pytest

import hodu

HOST = platform.machine() + "-linux-gnu"


@pytest.fixture
def image():
    return np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)


def test_pack_and_run_the_host_library(tiny_cnn_path, image, tmp_path):
    out = tmp_path / "tiny.hodupkg"
    info = hodu.pack(tiny_cnn_path, out, name="tiny", version="2.0", author="tests", license="MIT",
                     input_docs={"image": "8x8 images"}, dims={"batch": 2})
    assert (info["name"], info["version"], info["license"]) == ("tiny", "2.0", "MIT")
    assert info["inputs"][0]["doc"] == "8x8 images" and info["inputs"][0]["shape"] == ["batch", 1, 8, 8]
    assert [t["triple"] for t in info["targets"]] == [HOST]
    assert info["package"]["checksums_ok"] and info["package"]["host"]["runs"] == "library"
    assert info["weights"]["bytes"] == info["weights"]["graph_bytes"]  # the library holds no copy
    assert hodu.package_info(out) == info

    sess = hodu.InferenceSession(str(out))
    assert sess.engine == "native"
    assert [i.name for i in sess.get_inputs()] == ["image"]
    got = sess.run(None, {"image": image})[0]
    want = hodu.InferenceSession(tiny_cnn_path).run(None, {"image": image})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The graph on the cpu engine, on request.
    cpu = hodu.InferenceSession(out, engine="cpu")
    assert cpu.engine == "cpu"
    np.testing.assert_allclose(cpu.run(None, {"image": image})[0], want, rtol=1e-5, atol=1e-6)
    # The package's graph converts back to ONNX.
    hodu.convert(out, tmp_path / "back.onnx")
    np.testing.assert_allclose(hodu.InferenceSession(str(tmp_path / "back.onnx")).run(None, {"image": image})[0],
                               want, rtol=1e-5, atol=1e-6)


def test_package_bytes_run_the_graph(tiny_cnn_path, image, tmp_path):
    out = tmp_path / "tiny.hodupkg"
    hodu.pack(tiny_cnn_path, out, dims={"batch": 2})
    sess = hodu.InferenceSession(out.read_bytes())  # no file to load the library from: the graph
    assert sess.engine != "native"
    want = hodu.InferenceSession(tiny_cnn_path).run(None, {"image": image})[0]
    np.testing.assert_allclose(sess.run(None, {"image": image})[0], want, rtol=1e-5, atol=1e-6)


def test_no_host_library_runs_the_graph(tiny_cnn_path, image, tmp_path):
    out = tmp_path / "graph.hodupkg"
    info = hodu.pack(tiny_cnn_path, out, graph_only=True)
    assert info["targets"] == [] and info["package"]["host"]["runs"] == "graph"
    sess = hodu.InferenceSession(str(out))
    assert sess.engine != "native"
    want = hodu.InferenceSession(tiny_cnn_path).run(None, {"image": image})[0]
    np.testing.assert_allclose(sess.run(None, {"image": image})[0], want, rtol=1e-5, atol=1e-6)
    # Other batch sizes: the graph keeps its symbolic dim.
    assert sess.run(None, {"image": np.ones((5, 1, 8, 8), np.float32)})[0].shape == (5, 10)


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None, reason="aarch64-linux-gnu-gcc is not installed")
def test_cross_target_only(tiny_cnn_path, image, tmp_path):
    out = tmp_path / "arm.hodupkg"
    info = hodu.pack(tiny_cnn_path, out, targets=["aarch64-linux-gnu"], dims={"batch": 2})
    assert [t["kernels"] for t in info["targets"]] == ["portable"]
    assert hodu.InferenceSession(str(out)).engine != "native"


def test_damaged_packages_are_refused(tiny_cnn_path, tmp_path):
    out = tmp_path / "tiny.hodupkg"
    info = hodu.pack(tiny_cnn_path, out, dims={"batch": 2})
    weights = next(s for s in info["package"]["sections"] if s["name"] == "weights")
    data = bytearray(out.read_bytes())
    data[weights["offset"] + weights["bytes"] // 2] ^= 1
    bad = tmp_path / "bad.hodupkg"
    bad.write_bytes(data)
    with pytest.raises(hodu.InvalidModelError, match="section 'weights' .* fails its SHA-256 check"):
        hodu.InferenceSession(str(bad))
    with pytest.raises(hodu.InvalidModelError, match="fails its SHA-256 check"):
        hodu.package_info(bad)
    newer = bytearray(out.read_bytes())
    struct.pack_into("<I", newer, 8, 2)
    bad.write_bytes(newer)
    with pytest.raises(hodu.InvalidModelError, match="package format version 2 is newer"):
        hodu.InferenceSession(str(bad))
    bad.write_bytes(out.read_bytes()[:-10])
    with pytest.raises(hodu.InvalidModelError, match="truncated"):
        hodu.InferenceSession(str(bad))


def test_bad_pack_arguments(tiny_cnn_path, tmp_path):
    with pytest.raises(hodu.InvalidArgumentError, match="ends in .hodupkg"):
        hodu.pack(tiny_cnn_path, tmp_path / "x.zip")
    with pytest.raises(hodu.InvalidArgumentError, match="no such input"):
        hodu.pack(tiny_cnn_path, tmp_path / "x.hodupkg", input_docs={"nope": "x"}, dims={"batch": 2})
    with pytest.raises(hodu.InvalidArgumentError, match="kernels must be"):
        hodu.pack(tiny_cnn_path, tmp_path / "x.hodupkg", kernels="fast")
    assert not (tmp_path / "x.hodupkg").exists()
