"""hodu.client against a real `hodugaki serve` on the loopback interface, and
InferenceSession(remote=...) with its local fallback."""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import urllib.request
import warnings

import numpy as np
import pytest
from onnx import TensorProto

import hodu
from hodu.client import InferenceClient, ServerError, ServerUnavailableError

from conftest import identity_model

HODUGAKI = os.environ.get("HODUGAKI") or shutil.which("hodugaki")


class Server:
    """hodugaki serve MODEL... on a free loopback port; stopped with SIGTERM."""

    def __init__(self, *models, extra=()):
        if not HODUGAKI or not os.path.exists(HODUGAKI):
            pytest.skip("the hodugaki binary was not found (set HODUGAKI)")
        self.proc = subprocess.Popen([HODUGAKI, "serve", *models, "--host", "127.0.0.1", "--port", "0",
                                      "--threads", "1", *extra],
                                     stderr=subprocess.PIPE, text=True)
        self.log = []
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        else:
            raise AssertionError("hodugaki did not start:\n" + "".join(self.log))
        self._drain = threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True)
        self._drain.start()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self._drain.join(timeout=5)
        return code


@pytest.fixture
def add_server(add_model):
    s = Server(add_model, "sum=" + add_model)
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_health_and_metadata(add_server):
    c = InferenceClient(add_server.url, timeout=10)
    assert c.is_live() and c.is_ready()
    assert c.is_model_ready("add") and not c.is_model_ready("nope")
    meta = c.model_metadata("add")
    assert meta["name"] == "add" and meta["versions"] == ["1"] and meta["platform"] == "hodu_onnx"
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]},
                              {"name": "y", "datatype": "FP32", "shape": [-1, 3]}]
    assert "binary_tensor_data" in c.server_metadata()["extensions"]


@pytest.mark.parametrize("binary", [True, False])
def test_infer_matches_the_local_session(add_server, add_model, binary):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    x[0, 0] = np.nan
    want = hodu.InferenceSession(add_model).run(None, {"x": x, "y": y})[0]
    with InferenceClient(add_server.url) as c:
        got = c.infer("add", {"x": x, "y": y}, binary=binary, request_id=7)
    assert set(got) == {"z"} and got["z"].dtype == np.float32
    np.testing.assert_array_equal(got["z"], want)


def test_bytes_tensors_round_trip(tmp_path):
    path = identity_model(tmp_path, TensorProto.STRING)
    s = Server(path)
    try:
        c = InferenceClient(s.url)
        x = np.array([["a", "bé"], ["", "xyz"]], dtype=object)
        for binary in (True, False):
            out = c.infer(os.path.splitext(os.path.basename(path))[0], {"x": x}, binary=binary)["y"]
            got = [v.decode() if isinstance(v, bytes) else v for v in out.reshape(-1)]
            assert got == ["a", "bé", "", "xyz"] and out.shape == (2, 2)
    finally:
        assert s.stop() == 0


def test_errors_are_4xx_and_the_server_keeps_serving(add_server):
    c = InferenceClient(add_server.url)
    x = np.ones((1, 3), np.float32)
    with pytest.raises(ServerError) as e:
        c.infer("nope", {"x": x, "y": x})
    assert e.value.status == 404 and "unknown model 'nope'" in e.value.message
    with pytest.raises(ServerError) as e:
        c.infer("add", {"x": x, "w": x})
    assert e.value.status == 400 and "no input 'w'" in e.value.message
    with pytest.raises(ServerError) as e:
        c.infer("add", {"x": x.astype(np.float64), "y": x})
    assert e.value.status == 400 and "FP64" in e.value.message
    request = urllib.request.Request(add_server.url + "/v2/models/add/infer", data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=10)
    assert e.value.code == 400 and "not valid JSON" in json.loads(e.value.read())["error"]
    np.testing.assert_array_equal(c.infer("add", {"x": x, "y": x})["z"], 2 * x)


def test_concurrent_clients_and_batching(add_server):
    errors = []

    def client(k):
        c = InferenceClient(add_server.url)
        for i in range(10):
            x = np.full((1, 3), k * 100 + i, np.float32)
            try:
                z = c.infer("add", {"x": x, "y": x})["z"]
                if not np.array_equal(z, 2 * x):
                    errors.append(f"wrong answer for {k}/{i}: {z}")
            except Exception as e:  # noqa: BLE001 (collected and reported)
                errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    metrics = urllib.request.urlopen(add_server.url + "/metrics", timeout=10).read().decode()
    assert 'hodugaki_requests_total{model="add",version="1",code="200"} 80' in metrics


def test_unreachable_server():
    c = InferenceClient("http://127.0.0.1:1", timeout=2)
    with pytest.raises(ServerUnavailableError):
        c.infer("m", {"x": np.ones(1, np.float32)})
    assert isinstance(ServerUnavailableError("x"), OSError)
    with pytest.raises(hodu.InvalidArgumentError):
        InferenceClient("localhost:8000")


def test_session_runs_remotely_and_falls_back(add_server, add_model):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    remote = hodu.InferenceSession(add_model, remote=add_server.url, remote_model="sum")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback here
        np.testing.assert_array_equal(remote.run(None, {"x": x, "y": x})[0], 2 * x)
    metrics = urllib.request.urlopen(add_server.url + "/metrics", timeout=10).read().decode()
    assert 'hodugaki_requests_total{model="sum",version="1",code="200"} 1' in metrics
    offline = hodu.InferenceSession(add_model, remote="http://127.0.0.1:1", remote_timeout=2)
    with pytest.warns(RuntimeWarning, match="running locally"):
        z = offline.run(["z"], {"x": x, "y": x})[0]
    np.testing.assert_array_equal(z, 2 * x)


def _post(url, body, headers):
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as r:
        return dict(r.headers), r.read()


def test_triton_and_kserve_client_wire_formats(add_server):
    """The bytes tritonclient.http and KServe's InferRequest.to_rest() put on the wire
    (json.dumps with default separators, binary inputs packed after the JSON, the header
    length as a header, no outputs → binary_data_output), and their way of reading the
    answer (Inference-Header-Content-Length, outputs' binary_data_size in order)."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    request = {"id": "t1", "inputs": [
        {"name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {"binary_data_size": 24}},
        {"name": "y", "shape": [2, 3], "datatype": "FP32", "data": y.reshape(-1).tolist()}],
        "parameters": {"binary_data_output": True}}
    head = json.dumps(request).encode()
    headers, body = _post(add_server.url + "/v2/models/add/infer", head + x.tobytes(),
                          {"Inference-Header-Content-Length": str(len(head))})
    n = int(headers["Inference-Header-Content-Length"])
    response = json.loads(body[:n])
    assert response["id"] == "t1" and response["model_name"] == "add" and response["model_version"] == "1"
    (out,) = response["outputs"]
    assert out["name"] == "z" and out["datatype"] == "FP32" and out["shape"] == [2, 3]
    size = out["parameters"]["binary_data_size"]
    np.testing.assert_array_equal(np.frombuffer(body[n:n + size], np.float32).reshape(2, 3), x + y)
    # JSON all the way, the way a JSON-only client (curl, KServe's REST client) does it.
    request = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": x.tolist()},
                          {"name": "y", "shape": [2, 3], "datatype": "FP32", "data": y.tolist()}],
               "outputs": [{"name": "z"}]}
    headers, body = _post(add_server.url + "/v2/models/add/versions/1/infer", json.dumps(request).encode(),
                          {"Content-Type": "application/json"})
    assert "Inference-Header-Content-Length" not in headers
    out = json.loads(body)["outputs"][0]
    np.testing.assert_array_equal(np.array(out["data"], np.float32).reshape(out["shape"]), x + y)
    for path in ("/v2/health/live", "/v2/health/ready"):
        with urllib.request.urlopen(add_server.url + path, timeout=10) as r:
            assert r.status == 200 and json.loads(r.read()) in ({"live": True}, {"ready": True})
