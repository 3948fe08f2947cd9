"""hodu.client: a small client of KServe v2 (Open Inference Protocol) REST
servers such as `hodugaki serve`, on the standard library and numpy only.

    from hodu.client import InferenceClient
    c = InferenceClient("http://localhost:8000")
    out = c.infer("resnet18", {"input": x})            # {"output": numpy array}

Tensors travel as binary data (the binary tensor data extension) unless
binary=False asks for JSON. A server that cannot be reached (refused, reset,
timed out) raises ServerUnavailableError (an IoError, so an OSError); an HTTP
error status raises ServerError carrying the status and the server's message.
One client keeps one keep-alive connection and may be shared by threads (calls
take turns); give each thread its own client for parallel requests.
"""
import http.client
import json
import socket
import struct
import threading
import urllib.parse

import numpy as np

from .errors import HoduError, InvalidArgumentError, IoError

_DATATYPES = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "UINT8", np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32", np.dtype(np.uint64): "UINT64", np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16", np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16", np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64",
}
_NUMPY = {v: k for k, v in _DATATYPES.items()}
_HEADER = "Inference-Header-Content-Length"


class ServerError(HoduError):
    """The server answered with an HTTP error status (4xx: the request, 5xx: the server)."""

    def __init__(self, status, message):
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.message = message


class ServerUnavailableError(IoError):
    """The server could not be reached: connection refused or reset, or a time-out."""


def datatype_of(array):
    """The v2 datatype of a numpy array ("FP32", ..., "BYTES" for str/bytes/object arrays)."""
    if array.dtype.kind in ("U", "S", "O"):
        return "BYTES"
    try:
        return _DATATYPES[array.dtype.newbyteorder("=")]
    except KeyError:
        raise InvalidArgumentError(f"numpy dtype {array.dtype} has no KServe v2 datatype") from None


def _bytes_elements(array):
    for item in array.reshape(-1):
        if isinstance(item, str):
            yield item.encode("utf-8")
        elif isinstance(item, (bytes, bytearray, np.bytes_)):
            yield bytes(item)
        else:
            yield str(item).encode("utf-8")


def _binary(array, datatype):
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(b)) + b for b in _bytes_elements(array))
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def _json_data(array, datatype):
    if datatype == "BYTES":
        return [b.decode("utf-8", errors="replace") for b in _bytes_elements(array)]
    if datatype == "FP16":
        array = array.astype(np.float32)
    flat = array.reshape(-1)
    data = flat.tolist()
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():  # NaN and infinities travel as strings
        data = [v if np.isfinite(v) else ("nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")) for v in data]
    return data


def _decode(obj, binary, offset):
    """One output object of a response as a numpy array; returns (array, new offset)."""
    datatype, shape = obj["datatype"], [int(d) for d in obj["shape"]]
    size = (obj.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        chunk = binary[offset:offset + size]
        if len(chunk) != size:
            raise HoduError(f"output {obj['name']!r}: the response ends inside its binary data")
        offset += size
        if datatype == "BYTES":
            items, pos = [], 0
            while pos < len(chunk):
                (n,) = struct.unpack_from("<I", chunk, pos)
                items.append(chunk[pos + 4:pos + 4 + n])
                pos += 4 + n
            return np.array(items, dtype=object).reshape(shape), offset
        if datatype not in _NUMPY:
            raise HoduError(f"output {obj['name']!r}: datatype {datatype} has no numpy dtype")
        return np.frombuffer(chunk, dtype=_NUMPY[datatype].newbyteorder("<")).reshape(shape).copy(), offset
    data = obj.get("data", [])
    if datatype == "BYTES":
        return np.array(data, dtype=object).reshape(shape), offset
    return np.array(data, dtype=_NUMPY.get(datatype, np.float64)).reshape(shape), offset


class InferenceClient:
    """A KServe v2 REST client. url: http://HOST[:PORT][/PREFIX] (https:// too);
    timeout: seconds for connecting and for each answer (None: no limit)."""

    def __init__(self, url, timeout=60.0):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidArgumentError(f"server URL {url!r} must look like http://HOST[:PORT]")
        self.url = url
        self.timeout = timeout
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/")
        self._connection = None
        self._lock = threading.Lock()

    # ---- health and metadata ----
    def is_live(self):
        return self._request("GET", "/v2/health/live", ok_4xx=True)[0] == 200

    def is_ready(self):
        return self._request("GET", "/v2/health/ready", ok_4xx=True)[0] == 200

    def is_model_ready(self, model, version=None):
        return self._request("GET", self._model_path(model, version) + "/ready", ok_4xx=True)[0] == 200

    def server_metadata(self):
        return json.loads(self._request("GET", "/v2")[2])

    def model_metadata(self, model, version=None):
        return json.loads(self._request("GET", self._model_path(model, version))[2])

    # ---- inference ----
    def infer(self, model, inputs, outputs=None, version=None, binary=True, request_id=None):
        """Runs `model` on `inputs` ({name: array-like}); returns {output name: numpy array}
        for `outputs` (names; None: every output)."""
        if not isinstance(inputs, dict):
            raise InvalidArgumentError(f"inputs must be a dict {{name: array}}, not {type(inputs).__name__}")
        request = {"inputs": []}
        if request_id is not None:
            request["id"] = str(request_id)
        chunks = []
        for name, value in inputs.items():
            array = np.asarray(value)
            datatype = datatype_of(array)
            entry = {"name": name, "shape": list(array.shape), "datatype": datatype}
            if binary:
                data = _binary(array, datatype)
                entry["parameters"] = {"binary_data_size": len(data)}
                chunks.append(data)
            else:
                entry["data"] = _json_data(array, datatype)
            request["inputs"].append(entry)
        if outputs is not None:
            request["outputs"] = [{"name": n, "parameters": {"binary_data": bool(binary)}} for n in outputs]
        elif binary:
            request["parameters"] = {"binary_data_output": True}
        header = json.dumps(request, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if chunks:
            headers = {"Content-Type": "application/octet-stream", _HEADER: str(len(header))}
        body = header + b"".join(chunks)
        _, response_headers, payload = self._request("POST", self._model_path(model, version) + "/infer", body, headers)
        json_length = response_headers.get(_HEADER.lower())
        json_length = int(json_length) if json_length is not None else len(payload)
        response = json.loads(payload[:json_length])
        binary_part, offset, result = payload[json_length:], 0, {}
        for obj in response.get("outputs", []):
            result[obj["name"]], offset = _decode(obj, binary_part, offset)
        return result

    def close(self):
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"hodu.client.InferenceClient({self.url!r})"

    # ---- plumbing ----
    def _model_path(self, model, version):
        path = "/v2/models/" + urllib.parse.quote(str(model), safe="")
        if version is not None and version != "":
            path += "/versions/" + urllib.parse.quote(str(version), safe="")
        return path

    def _connect(self):
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self.timeout)

    def _request(self, method, path, body=None, headers=None, ok_4xx=False):
        with self._lock:
            # A kept-alive connection the server has closed fails at once: retry once on a new one.
            for attempt in (0, 1):
                reused = self._connection is not None
                if self._connection is None:
                    self._connection = self._connect()
                try:
                    self._connection.request(method, self._prefix + path, body=body, headers=headers or {})
                    response = self._connection.getresponse()
                    payload = response.read()
                    status = response.status
                    response_headers = {k.lower(): v for k, v in response.getheaders()}
                    if response.will_close:
                        self._connection.close()
                        self._connection = None
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                    self._connection.close()
                    self._connection = None
                    if reused and attempt == 0:
                        continue
                    raise ServerUnavailableError(f"cannot reach {self.url}{path}: {e}") from e
                except (OSError, socket.timeout, http.client.HTTPException) as e:
                    self._connection.close()
                    self._connection = None
                    raise ServerUnavailableError(f"cannot reach {self.url}{path}: {e}") from e
        if status >= 400 and not (ok_4xx and status < 500):
            try:
                message = json.loads(payload)["error"]
            except (ValueError, KeyError, TypeError):
                message = payload[:200].decode("utf-8", errors="replace")
            raise ServerError(status, f"server {self.url}: {message}")
        return status, response_headers, payload


__all__ = ["InferenceClient", "ServerError", "ServerUnavailableError", "datatype_of"]
