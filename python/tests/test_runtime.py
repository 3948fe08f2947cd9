"""hodu.runtime: devices, memory statistics, streams, profiling."""
import json
import os
import threading

import numpy as np
import pytest

import hodu


def test_devices():
    devs = hodu.runtime.devices()
    cpu = devs[0]
    assert cpu.kind == "cpu" and cpu.device == "cpu"
    assert cpu.name and cpu.memory > 0
    assert isinstance(cpu.capabilities, dict)
    for d in devs[1:]:
        assert d.kind == "cuda" and d.device == f"cuda:{d.index}"


def test_memory_stats_and_empty_cache():
    stats = hodu.runtime.memory_stats("cpu")
    assert isinstance(stats, dict) and stats
    hodu.runtime.empty_cache()
    hodu.runtime.empty_cache("cpu")
    with pytest.raises(hodu.InvalidArgumentError):
        hodu.runtime.memory_stats("tpu")


def test_cpu_memory_stats_count_tensors():
    model = os.path.join(os.environ.get("HODU_SOURCE_DIR", "."), "examples", "models", "tiny_cnn.onnx")
    before = hodu.runtime.memory_stats("cpu")["allocated_bytes"]["all"]
    sess = hodu.InferenceSession(model, engine="interp")
    (y,) = sess.run(None, {"image": np.random.rand(1, 1, 8, 8).astype(np.float32)})
    after = hodu.runtime.memory_stats("cpu")["allocated_bytes"]["all"]
    assert after["allocated"] > before["allocated"]  # every tensor storage goes through the cpu allocator
    assert after["peak"] >= y.nbytes
    assert after["current"] >= 0


def test_stream_runs_in_order():
    seen = []
    with hodu.runtime.Stream("cpu") as s:
        for i in range(20):
            s.submit(seen.append, i)
    assert seen == list(range(20))
    with pytest.raises(hodu.InvalidArgumentError):
        hodu.runtime.Stream("cpu").submit(42)


def test_profile_writes_chrome_trace(tiny_cnn_path, tmp_path):
    s = hodu.InferenceSession(tiny_cnn_path, engine="interp")
    inp = s.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in inp.shape]).astype(
        np.float32)
    path = tmp_path / "trace.json"
    with hodu.runtime.profile(path) as p:
        s.run(None, {inp.name: x})
    events = json.loads(path.read_text())
    assert isinstance(events, list)
    nodes = [e for e in events if e.get("cat") == "Node"]
    assert nodes and all(e["ph"] == "X" and "op_name" in e["args"] for e in nodes)
    assert {e["args"]["op_name"] for e in nodes} >= {"Conv"}
    assert sum(r["count"] for r in p.summary()) == len(nodes)
    assert p.run_ms > 0 and "Conv" in p.table()
    # Profiling stopped with the block: a later run adds nothing.
    count = p.event_count
    s.run(None, {inp.name: x})
    assert p.event_count == count


def test_profiling_through_session_options(add_model, tmp_path):
    opts = hodu.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    s = hodu.InferenceSession(add_model, opts, engine="interp")  # the interpreter records node spans
    x = np.ones((1, 3), np.float32)
    s.run(None, {"x": x, "y": x})
    path = s.end_profiling()
    assert path.startswith(str(tmp_path / "prof")) and path.endswith(".json")
    assert any(e.get("cat") == "Node" for e in json.load(open(path)))


def test_engines_and_kernels():
    names = [e["name"] for e in hodu.runtime.engines()]
    assert "interp" in names
    assert any(k["name"] == "reference" for k in hodu.runtime.kernels())


def test_stream_errors_and_events():
    s = hodu.runtime.Stream()
    start = s.record_event()

    def boom():
        raise ValueError("task failed")

    s.submit(boom)
    with pytest.raises(ValueError, match="task failed"):
        s.synchronize()
    ok = hodu.runtime.Stream()
    seen = []
    ok.submit(seen.append, 1)
    end = ok.record_event()
    end.synchronize()
    assert end.query() and seen == [1]
    assert start.query()
