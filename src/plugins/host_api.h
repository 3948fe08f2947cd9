// The table hodu hands every plugin at entry (hodu_host_api in
// include/hodu/plugin.h): parse .hdss bytes and read the graph, so a plugin
// built against the header alone can run or compile hodu models.
#pragma once
#include <hodu/plugin.h>

namespace hodu::plugins {

// Process-wide, static: valid for the life of the process.
const hodu_host_api* host_api();

}  // namespace hodu::plugins
