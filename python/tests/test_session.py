"""hodu.InferenceSession: onnxruntime's call shape, metadata, feeds and their errors, threads."""
import os
import pathlib
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import hodu
from conftest import identity_model, make_model, save

ENGINES = [e["name"] for e in hodu.runtime.engines() if e["name"] in ("interp", "cpu")]


@pytest.mark.parametrize("engine", ENGINES)
def test_run_add(add_model, engine):
    s = hodu.InferenceSession(add_model, engine=engine)
    assert s.engine == engine
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, np.float32)
    (z,) = s.run(None, {"x": x, "y": y})
    assert isinstance(z, np.ndarray) and z.dtype == np.float32 and z.shape == (2, 3)
    np.testing.assert_array_equal(z, x + y)
    # The same session with another batch size (symbolic dim).
    x4 = np.ones((4, 3), np.float32)
    np.testing.assert_array_equal(s.run(["z"], {"x": x4, "y": x4})[0], 2 * x4)


def test_inputs_outputs_metadata(add_model, two_output_model):
    s = hodu.InferenceSession(add_model)
    ins = s.get_inputs()
    assert [i.name for i in ins] == ["x", "y"]
    assert ins[0].shape == ["batch", 3]
    assert ins[0].type == "tensor(float)"
    assert s.get_outputs()[0].name == "z" and s.get_outputs()[0].shape == ["batch", 3]
    t = hodu.InferenceSession(two_output_model)
    assert t.get_inputs()[0].shape == [2, None]  # unknown dim → None, as onnxruntime
    assert [o.name for o in t.get_outputs()] == ["sum", "prod"]  # initializers are not inputs
    meta = s.get_modelmeta()
    assert meta.producer_name == "hodu-tests" and meta.graph_name == "test"
    assert s.get_providers() == ["CPUExecutionProvider"]


def test_output_selection(two_output_model):
    s = hodu.InferenceSession(two_output_model)
    x = np.array([[1, 2], [3, 4]], np.float32)
    prod, total = s.run(["prod", "sum"], {"x": x})
    np.testing.assert_array_equal(prod, x * 2)
    np.testing.assert_array_equal(total, x + 1)
    assert len(s.run([], {"x": x})) == 2
    with pytest.raises(hodu.InvalidArgumentError, match=r"'nope' is not an output of the model \(outputs: 'sum', 'prod'\)"):
        s.run(["nope"], {"x": x})


def test_model_sources(add_model):
    x = np.ones((1, 3), np.float32)
    feeds = {"x": x, "y": x}
    with open(add_model, "rb") as f:
        data = f.read()
    for source in (add_model, pathlib.Path(add_model), data, hodu.load(add_model)):
        np.testing.assert_array_equal(hodu.InferenceSession(source).run(None, feeds)[0], 2 * x)
    with pytest.raises(hodu.InvalidArgumentError, match="a model is a path"):
        hodu.InferenceSession(12)


def test_bad_model_files(tmp_path):
    with pytest.raises(hodu.IoError) as e:
        hodu.InferenceSession(str(tmp_path / "missing.onnx"))
    assert "missing.onnx" in str(e.value)
    assert isinstance(e.value, OSError) and isinstance(e.value, hodu.HoduError)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf \xff\xff\xff")
    with pytest.raises(hodu.InvalidModelError):
        hodu.InferenceSession(str(bad))


def test_bad_feeds(add_model):
    s = hodu.InferenceSession(add_model)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(hodu.InvalidArgumentError, match=r"missing input 'y'"):
        s.run(None, {"x": x})
    with pytest.raises(hodu.InvalidArgumentError, match=r"'w' is not an input of the model \(inputs: 'x', 'y'\)"):
        s.run(None, {"x": x, "y": x, "w": x})
    with pytest.raises(hodu.InvalidArgumentError, match=r"input 'y': dtype double does not match the model's float"):
        s.run(None, {"x": x, "y": x.astype(np.float64)})
    with pytest.raises(hodu.InvalidArgumentError, match=r"input 'y': rank 1"):
        s.run(None, {"x": x, "y": np.ones(3, np.float32)})
    with pytest.raises(hodu.InvalidArgumentError, match=r"input 'y': dim 1 is 4 but the model expects 3"):
        s.run(None, {"x": x, "y": np.ones((2, 4), np.float32)})
    with pytest.raises(hodu.InvalidArgumentError, match=r"'batch'"):
        s.run(None, {"x": x, "y": np.ones((5, 3), np.float32)})
    with pytest.raises(hodu.InvalidArgumentError, match="input_feed must be a dict"):
        s.run(None, [x, x])
    with pytest.raises(hodu.UnsupportedOperationError, match="datetime64"):
        s.run(None, {"x": x, "y": np.zeros((2, 3), "datetime64[s]")})
    with pytest.raises(hodu.InvalidArgumentError, match="object array must hold str"):
        s.run(None, {"x": x, "y": np.array([[1, "a", None]] * 2, dtype=object)})
    # The session still works after bad feeds.
    np.testing.assert_array_equal(s.run(None, {"x": x, "y": x})[0], 2 * x)


def test_bad_arguments(add_model):
    with pytest.raises(hodu.InvalidArgumentError, match="unknown engine 'warp'"):
        hodu.InferenceSession(add_model, engine="warp")
    with pytest.raises(hodu.InvalidArgumentError):
        hodu.InferenceSession(add_model, device="tpu:0")
    with pytest.raises(hodu.InvalidArgumentError, match="threads"):
        hodu.InferenceSession(add_model, threads=-2)
    with pytest.raises(hodu.HoduError):  # no engine runs on a CUDA device in this build / machine
        hodu.InferenceSession(add_model, device="cuda:0")


DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
          np.float16, np.float32, np.float64]
ONNX_TYPES = {np.bool_: TensorProto.BOOL, np.int8: TensorProto.INT8, np.int16: TensorProto.INT16,
              np.int32: TensorProto.INT32, np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8,
              np.uint16: TensorProto.UINT16, np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64,
              np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
              np.complex64: TensorProto.COMPLEX64, np.complex128: TensorProto.COMPLEX128}


@pytest.mark.parametrize("dtype", DTYPES + [np.complex64, np.complex128])
def test_every_numpy_dtype(tmp_path, dtype):
    s = hodu.InferenceSession(identity_model(tmp_path, ONNX_TYPES[dtype]), engine="interp")
    assert s.get_inputs()[0].type.startswith("tensor(")
    x = (np.arange(12).reshape(3, 4) % 7 * 1.5).astype(dtype)
    if dtype in (np.complex64, np.complex128):
        x = x + 1j * x
    (y,) = s.run(None, {"x": x})
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, x)


def test_strings(tmp_path):
    for x in (np.array([["a", "bé"], ["", "long string"]]), np.array(["x", "y"], dtype=object),
              np.array([b"raw", b"bytes"])):
        s = hodu.InferenceSession(identity_model(tmp_path, TensorProto.STRING, rank=x.ndim), engine="interp")
        assert s.get_inputs()[0].type == "tensor(string)"
        (y,) = s.run(None, {"x": x})
        assert y.dtype == object and y.shape == x.shape
        expect = [v.decode() if isinstance(v, bytes) else v for v in x.ravel().tolist()]
        assert y.ravel().tolist() == expect


def test_string_op(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [3])
    y = helper.make_tensor_value_info("y", TensorProto.STRING, [3])
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER")
    s = hodu.InferenceSession(save(make_model([node], [x], [y]), tmp_path, "upper.onnx"))
    assert s.run(None, {"x": np.array(["ab", "Cd", "ef"])})[0].tolist() == ["AB", "CD", "EF"]


def test_sequences_and_optionals(tmp_path):
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])
    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
             helper.make_node("SequenceLength", ["seq"], ["n"])]
    s = hodu.InferenceSession(save(make_model(nodes, [a, b], [seq, n]), tmp_path, "seq.onnx"))
    assert s.get_outputs()[0].type == "seq(tensor(float))"
    out_seq, count = s.run(None, {"a": np.ones(2, np.float32), "b": np.zeros(3, np.float32)})
    assert isinstance(out_seq, list) and len(out_seq) == 2
    np.testing.assert_array_equal(out_seq[1], np.zeros(3, np.float32))
    assert count == 2

    # A sequence input fed as a list.
    si = helper.make_tensor_sequence_value_info("si", TensorProto.FLOAT, None)
    m = make_model([helper.make_node("SequenceLength", ["si"], ["n"])], [si], [n])
    s2 = hodu.InferenceSession(save(m, tmp_path, "seqlen.onnx"))
    assert s2.run(None, {"si": [np.ones(2, np.float32)] * 5})[0] == 5

    # An optional input: None is an empty optional.
    opt_t = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    o = helper.make_value_info("o", helper.make_optional_type_proto(opt_t))
    has = helper.make_tensor_value_info("has", TensorProto.BOOL, [])
    m = make_model([helper.make_node("OptionalHasElement", ["o"], ["has"])], [o], [has], opset=18)
    s3 = hodu.InferenceSession(save(m, tmp_path, "opt.onnx"), engine="interp")
    assert s3.get_inputs()[0].type == "optional(tensor(float))"
    assert bool(s3.run(None, {"o": None})[0]) is False
    assert bool(s3.run(None, {"o": np.ones(2, np.float32)})[0]) is True


def test_python_values_as_feeds(add_model):
    s = hodu.InferenceSession(add_model)
    (z,) = s.run(None, {"x": np.ones((1, 3), np.float32), "y": np.float32([[1, 2, 3]])})
    np.testing.assert_array_equal(z, [[2, 3, 4]])


def test_onnxruntime_compatible_arguments(add_model):
    opts = hodu.SessionOptions()
    opts.intra_op_num_threads = 1
    s = hodu.InferenceSession(add_model, opts, providers=["CPUExecutionProvider"])
    assert s.threads == 1 and s.device == "cpu" and s.get_session_options() is opts
    s = hodu.InferenceSession(add_model, sess_options=opts, providers=[("CUDAExecutionProvider", {"device_id": 0}),
                                                                       "CPUExecutionProvider"])
    if not any(d.kind == "cuda" for d in hodu.runtime.devices()):
        assert s.device == "cpu"  # CUDA unavailable: the next provider, as onnxruntime does
    with pytest.raises(hodu.InvalidArgumentError, match="none of the providers"):
        hodu.InferenceSession(add_model, providers=["TensorrtExecutionProvider"])


def test_io_binding(add_model):
    s = hodu.InferenceSession(add_model)
    b = s.io_binding()
    x = np.ones((2, 3), np.float32)
    b.bind_cpu_input("x", x)
    b.bind_input("y", hodu.Tensor.from_numpy(x * 3))
    b.bind_output("z")
    with pytest.raises(hodu.InvalidArgumentError, match="no outputs yet"):
        b.get_outputs()
    s.run_with_iobinding(b)
    (t,) = b.get_outputs()
    assert isinstance(t, hodu.Tensor) and t.shape == (2, 3) and t.dtype == "f32"
    np.testing.assert_array_equal(b.copy_outputs_to_cpu()[0], 4 * x)


@pytest.mark.parametrize("engine", ENGINES)
def test_concurrent_runs(matmul_chain_model, engine):
    s = hodu.InferenceSession(matmul_chain_model, engine=engine, threads=1)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((256, 256)).astype(np.float32) for _ in range(6)]
    expected = [s.run(None, {"x": x})[0] for x in xs]
    errors = []

    def worker(k):
        try:
            for i in range(4):
                j = (k + i) % len(xs)
                np.testing.assert_array_equal(s.run(None, {"x": xs[j]})[0], expected[j])
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_gil_released_while_running(matmul_chain_model):
    s = hodu.InferenceSession(matmul_chain_model, engine="interp", threads=1)
    x = np.ones((256, 256), np.float32)
    s.run(None, {"x": x})
    done = threading.Event()
    ticks = 0

    def runner():
        for _ in range(3):
            s.run(None, {"x": x})
        done.set()

    t = threading.Thread(target=runner)
    t.start()
    while not done.is_set():  # only advances while the runner does not hold the GIL
        ticks += 1
    t.join()
    # A run holding the GIL would leave this loop a few switch intervals (5 ms) at best.
    assert ticks > 100_000, ticks


def test_repr_and_properties(add_model):
    s = hodu.InferenceSession(add_model, threads=2)
    assert s.threads == 2
    assert "add.onnx" in repr(s)
    assert isinstance(s.policy, hodu.policies.Policy)
    assert s.policy.execution.threads == 2


def test_graph_optimization_level(tmp_path):
    """onnxruntime's SessionOptions.graph_optimization_level picks hodu's pass level: disabled,
    a Conv and the Relu after it run as two nodes; the default fuses them into one."""
    import json
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32))
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                        helper.make_node("Relu", ["c"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])], [w])
    path = save(model, tmp_path, "conv_relu.onnx")
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    ops, outs = {}, {}
    for level in (None, 0, 99):
        opts = hodu.SessionOptions()
        opts.graph_optimization_level = level
        opts.enable_profiling = True
        opts.profile_file_prefix = str(tmp_path / f"prof{level}")
        s = hodu.InferenceSession(path, opts, engine="cpu")
        outs[level] = s.run(None, {"x": x})[0]
        trace = json.load(open(s.end_profiling()))
        ops[level] = sorted(e["args"]["op_name"] for e in trace
                            if e.get("cat") == "Node" and e["args"].get("op_name") != "Reorder")
    assert ops[0] == ["Conv", "Relu"]
    assert ops[None] == ops[99] == ["FusedConv"]
    np.testing.assert_allclose(outs[0], outs[None], rtol=1e-5, atol=1e-5)
    opts = hodu.SessionOptions()
    opts.graph_optimization_level = "fast"
    with pytest.raises(hodu.InvalidArgumentError, match="graph_optimization_level"):
        hodu.InferenceSession(path, opts)
