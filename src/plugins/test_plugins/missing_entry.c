/* A library with the version export but no hodu_plugin_entry. */
#include <hodu/plugin.h>

uint32_t hodu_plugin_abi_version(void) { return HODU_PLUGIN_ABI_VERSION; }
