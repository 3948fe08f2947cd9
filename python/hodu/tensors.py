"""Tensors across libraries: hodu.Tensor and DLPack."""
from ._hodu import Tensor


def from_dlpack(obj):
    """A hodu.Tensor sharing the memory of `obj` (anything with ``__dlpack__``:
    torch, numpy, cupy... or a DLPack capsule). No copy is made; the producer's
    memory stays alive as long as the hodu.Tensor (or anything made from it)."""
    return Tensor.from_dlpack(obj)


__all__ = ["Tensor", "from_dlpack"]
