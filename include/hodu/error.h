/* hodu/error.h — hodu::Error, the one error type of hodu's C++ API (public).
 * It carries a category (what kind of failure, mapped to exit codes, C status
 * codes and Python exception classes) and a message that names the
 * file/node/op/input concerned. */
#pragma once
#include <stdexcept>
#include <string>

namespace hodu {

enum class ErrorCode {
  InvalidModel,     // the model file or graph is malformed
  InvalidArgument,  // the caller passed something wrong (inputs, options, paths)
  Unsupported,      // valid, but hodu cannot do it (op, dtype, format)
  OutOfMemory,
  Device,           // a device (CUDA, ...) failed
  Io,               // reading or writing a file failed
  Internal,         // a bug in hodu
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message)
      : std::runtime_error(std::move(message)), code_(code) {}
  ErrorCode code() const { return code_; }
  // Returns a copy of this error with `context` put in front of the message,
  // e.g. "node 'conv1' (Conv): " + "kernel shape mismatch".
  Error with_context(const std::string& context) const {
    return Error(code_, context + what());
  }

 private:
  ErrorCode code_;
};

}  // namespace hodu
