/* include/hodu/plugin.h must compile as strict C99. */
#include <hodu/plugin.h>

int hodu_plugin_header_is_c99(void) { return (int)sizeof(hodu_plugin) + HODU_PLUGIN_ABI_VERSION; }
