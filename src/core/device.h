// A device a tensor or engine lives on: "cpu" or "cuda:N".
#pragma once
#include <string>
#include <string_view>

namespace hodu {

struct Device {
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i) { return {Kind::CUDA, i}; }
  // "cpu", "cuda", "cuda:1" (case-insensitive); throws InvalidArgument otherwise.
  static Device parse(std::string_view text);
  std::string to_string() const;
  bool operator==(const Device&) const = default;
};

}  // namespace hodu
