// This process's resident memory, as Linux reports it in /proc/self/status.
#pragma once
#include <cstddef>

namespace hodu {

// Peak resident memory (VmHWM) in bytes. Not getrusage's ru_maxrss: Linux carries the
// parent's high-water mark over fork + exec, so a small child would report its parent's
// peak (ru_maxrss is the fallback where /proc is missing).
size_t peak_rss_bytes();
// Resets the peak to the current resident memory (/proc/self/clear_refs); false where the
// kernel does not allow it.
bool reset_peak_rss();

}  // namespace hodu
