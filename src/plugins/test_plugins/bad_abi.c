/* A plugin built for another ABI version: hodu must refuse it before calling its entry. */
#include <hodu/plugin.h>
#include <stdlib.h>

uint32_t hodu_plugin_abi_version(void) { return HODU_PLUGIN_ABI_VERSION + 41; }
const hodu_plugin* hodu_plugin_entry(const hodu_host_api* host) {
  (void)host;
  abort(); /* never called */
}
