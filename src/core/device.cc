#include "core/device.h"

#include <cctype>
#include <charconv>

#include "core/error.h"

namespace hodu {

Device Device::parse(std::string_view text) {
  std::string t(text);
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "cpu") return cpu();
  if (t == "cuda" || t == "gpu") return cuda(0);
  if (t.rfind("cuda:", 0) == 0) {
    int idx = -1;
    auto tail = t.substr(5);
    auto [p, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), idx);
    if (ec == std::errc() && p == tail.data() + tail.size() && idx >= 0) return cuda(idx);
  }
  fail(ErrorCode::InvalidArgument, "unknown device '{}' (expected cpu or cuda:N)", text);
}

std::string Device::to_string() const {
  return kind == Kind::CPU ? "cpu" : "cuda:" + std::to_string(index);
}

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidModel: return "InvalidModel";
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::Unsupported: return "Unsupported";
    case ErrorCode::OutOfMemory: return "OutOfMemory";
    case ErrorCode::Device: return "Device";
    case ErrorCode::Io: return "Io";
    case ErrorCode::Internal: return "Internal";
  }
  return "Unknown";
}

}  // namespace hodu
