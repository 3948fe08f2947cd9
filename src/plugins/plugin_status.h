// C ABI ↔ C++ errors, for code on either side of include/hodu/plugin.h: the
// host (turning a plugin's status + message into hodu::Error) and C++ plugins
// (turning exceptions into a status + a thread-local message).
#pragma once
#include <hodu/plugin.h>

#include <string>

#include "core/error.h"

namespace hodu::plugins {

inline hodu_status to_status(ErrorCode code) { return static_cast<hodu_status>(static_cast<int>(code) + 1); }

inline ErrorCode to_error_code(int status) {
  if (status < HODU_ERR_INVALID_MODEL || status > HODU_ERR_INTERNAL) return ErrorCode::Internal;
  return static_cast<ErrorCode>(status - 1);
}

// The message of the last failure on this thread (one per library that
// includes this header: each plugin keeps its own).
inline std::string& thread_error_message() {
  thread_local std::string message;
  return message;
}

// The table's last_error(): this thread's last message.
inline const char* thread_last_error() { return thread_error_message().c_str(); }

inline hodu_status set_thread_error(hodu_status status, std::string message) {
  thread_error_message() = std::move(message);
  return status;
}

// Runs `body` (returning void) and turns any exception into a status with
// its message kept for last_error(). For the C entry points of C++ plugins.
template <typename Body>
hodu_status guarded(Body&& body) noexcept {
  try {
    body();
    return HODU_OK;
  } catch (const Error& e) {
    return set_thread_error(to_status(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return set_thread_error(HODU_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return set_thread_error(HODU_ERR_INTERNAL, std::string("internal: ") + e.what());
  } catch (...) {
    return set_thread_error(HODU_ERR_INTERNAL, "internal: unknown exception");
  }
}

}  // namespace hodu::plugins
