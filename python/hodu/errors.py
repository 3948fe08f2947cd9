"""hodu's exception classes, one per hodu::ErrorCode category (core/error.h).

Every class derives from HoduError and, where one fits, from the built-in
exception a Python user would catch (ValueError for bad arguments, OSError for
file errors, MemoryError, NotImplementedError).
"""


class HoduError(RuntimeError):
    """Base class of every error hodu raises."""


class InvalidModelError(HoduError, ValueError):
    """The model file or graph is malformed (ErrorCode::InvalidModel)."""


class InvalidArgumentError(HoduError, ValueError):
    """The caller passed something wrong: feeds, options, paths (ErrorCode::InvalidArgument)."""


class UnsupportedOperationError(HoduError, NotImplementedError):
    """Valid, but hodu cannot do it: an op, dtype, format or device (ErrorCode::Unsupported)."""


class OutOfMemoryError(HoduError, MemoryError):
    """An allocation failed (ErrorCode::OutOfMemory)."""


class DeviceError(HoduError):
    """A device failed (ErrorCode::Device)."""


class CudaError(DeviceError):
    """A CUDA call failed (ErrorCode::Device, message naming CUDA)."""


class IoError(HoduError, OSError):
    """Reading or writing a file failed (ErrorCode::Io)."""


class InternalError(HoduError):
    """A bug in hodu (ErrorCode::Internal); please report it."""


__all__ = ["HoduError", "InvalidModelError", "InvalidArgumentError", "UnsupportedOperationError",
           "OutOfMemoryError", "DeviceError", "CudaError", "IoError", "InternalError"]
