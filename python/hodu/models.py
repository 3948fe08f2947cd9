"""Model and tensor files: load, save, convert, info, compile, pack."""
import json
import os

from . import _hodu
from .errors import InvalidArgumentError, UnsupportedOperationError

_TENSOR_EXTENSIONS = (".npy", ".npz", ".hdt", ".json", ".pb", ".safetensors", ".gguf")


def load(model):
    """Loads a model from a path (.onnx, .hdss, .hodu) or from bytes (format sniffed) into a hodu.Model."""
    if isinstance(model, _hodu.Model):
        return model
    return _hodu.load(model)


def parse(text):
    """Parses HoduScript text (docs/hoduscript.md) into a hodu.Model."""
    return _hodu.parse_text(text)


def save(model, path, opset=0):
    """Writes a model; the extension picks the format (.onnx, .hdss, .hodu).
    `opset` (ONNX only): 0 = the lowest opset >= 17 that expresses the graph."""
    load(model).save(os.fspath(path), opset)


def convert(src, dst, opset=0):
    """Converts between model formats (.onnx .hdss .hodu) or between tensor
    files (.npy .npz .hdt .json .pb .safetensors), like `hodu convert`."""
    src, dst = os.fspath(src), os.fspath(dst)
    src_model, dst_model = _hodu.is_model_path(src), _hodu.is_model_path(dst)
    if src_model != dst_model:
        raise InvalidArgumentError(f"cannot convert between a model and a tensor file ('{src}' -> '{dst}')")
    if src_model:
        _hodu.convert_model(src, dst, opset)
    else:
        _hodu.convert_tensors(src, dst)


def info(model):
    """A summary of a model (path, bytes or hodu.Model) as a dict: inputs,
    outputs, ops histogram, node and parameter counts, opsets, producer —
    the fields of `hodu info --json`."""
    return _hodu.info(model if isinstance(model, (_hodu.Model, bytes, bytearray)) else os.fspath(model))


def load_tensors(path):
    """Every tensor of a tensor file (.npy .npz .hdt .json .pb .safetensors .gguf)
    as {name: numpy array}; single-tensor files give one entry."""
    return _hodu.read_tensors(os.fspath(path))


def save_tensors(path, tensors):
    """Writes {name: array} to a tensor file; the extension picks the format."""
    if not isinstance(tensors, dict):
        raise InvalidArgumentError("save_tensors takes a dict {name: array}")
    _hodu.write_tensors(os.fspath(path), tensors)


_COMPILE_FORMATS = ("c", "o", "so", "a", "exe", "s", "ll", "bc")


def compile(model, output, format=None, opt_level=2, **options):  # noqa: A001 (mirrors `hodu build`)
    """Compiles a model ahead of time into `output`, like `hodu build` (docs/aot.md):
    format from the extension or `format=` (c, o, so, a, exe, s, ll, bc),
    `opt_level` 0..3. Options: name (API prefix), standalone (libc/libm only),
    weights ("embed" | "file"), shapes {input: [dims]}, dims {symbol: size},
    target (GNU triple, cross compiler needed), keep_temp.
    Returns a dict: files written, compiler, timings, arena and weight bytes."""
    if not isinstance(opt_level, int) or not 0 <= opt_level <= 3:
        raise InvalidArgumentError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    if format is not None and format not in _COMPILE_FORMATS:
        raise InvalidArgumentError(f"unknown format '{format}' (one of {', '.join(_COMPILE_FORMATS)})")
    build = getattr(_hodu, "compile_model", None)
    if build is None:
        raise UnsupportedOperationError(
            "hodu.compile: this build of hodu has no ahead-of-time compiler (src/compilers/c)")
    src = model if isinstance(model, _hodu.Model) else load(model)
    return build(src, os.fspath(output), format or "", opt_level, options)


__all__ = ["load", "parse", "save", "convert", "info", "load_tensors", "save_tensors", "compile"]


def pack(model, output, targets=None, *, name=None, version=None, author=None, license=None,  # noqa: A002
         description=None, input_docs=None, output_docs=None, opt_level=2, kernels="onednn", shapes=None,
         dims=None, graph_only=False, api_name=None):
    """Packages a model into one .hodupkg file, like `hodu pack` (docs/hodupkg.md): the graph,
    the weights once, metadata and a prebuilt library per target triple (default: this
    host's; e.g. targets=["x86_64-linux-gnu", "aarch64-linux-gnu"]). `shapes`/`dims` bind
    symbolic input dims for the libraries; the graph keeps them free. Returns package_info()
    of the written file. hodu.InferenceSession("m.hodupkg") runs it."""
    source = None
    if not isinstance(model, _hodu.Model):
        source = os.path.basename(os.fspath(model)) if not isinstance(model, (bytes, bytearray)) else None
        if source is not None and (name is None):
            name = os.path.splitext(source)[0]
    options = {"targets": list(targets) if targets is not None else None, "name": name, "version": version,
               "author": author, "license": license, "description": description, "input_docs": input_docs,
               "output_docs": output_docs, "opt_level": opt_level, "kernels": kernels, "shapes": shapes,
               "dims": dims, "graph_only": graph_only, "api_name": api_name, "source": source}
    output = os.fspath(output)
    if not output.endswith(".hodupkg"):
        raise InvalidArgumentError(f"pack: a package's file name ends in .hodupkg, not '{output}'")
    return json.loads(_hodu.pack_model(load(model), output, options))


def package_info(path):
    """A .hodupkg's metadata (name, version, author, license, inputs and outputs with their docs,
    opsets, targets, ...) and, under "package", its sections with their SHA-256, the file
    checksum and what runs on this host: `hodu info --json`. Opening the package verifies
    every checksum; a damaged file raises InvalidModelError naming what failed."""
    return json.loads(_hodu.package_info(os.fspath(path)))
