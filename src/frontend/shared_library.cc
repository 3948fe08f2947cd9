// libhodu.so is libhodu.a linked whole (src/frontend/CMakeLists.txt); a shared
// library target needs a source of its own, and this is it.
#include "hodu/hodu.h"

namespace hodu::eager {
// The version of the library a program loaded (HODU_VERSION of the build).
extern "C" __attribute__((visibility("default"))) const char* hodu_library_version() { return HODU_VERSION; }
}  // namespace hodu::eager
