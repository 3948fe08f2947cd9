# The installed layout, shared by `cmake --install` and `hodu install --prefix DIR`
# (tools/hodu/cmd_install.cc copies the same files to the same places):
#   bin/hodu
#   include/hodu/*.h
#   lib/libhodu_kernels.so                 (kernel library of `hodu build` artifacts)
#   lib/libhodu.so                         (the C++ library: hodu::hodu, include/hodu/hodu.h)
#   lib/hodu/plugins/libhodu-*.so          (plugins/CMakeLists.txt)
#   lib/cmake/hodu/hoduConfig.cmake, hoduConfigVersion.cmake
include(CMakePackageConfigHelpers)
file(STRINGS ${PROJECT_SOURCE_DIR}/include/hodu/plugin.h abi_line REGEX "^#define HODU_PLUGIN_ABI_VERSION [0-9]+")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" HODU_PLUGIN_ABI_VERSION "${abi_line}")
# Staged in the build tree, where `hodu install` run from the build tree finds them.
set(HODU_CMAKE_PACKAGE_DIR ${PROJECT_BINARY_DIR}/cmake-package)
configure_file(${PROJECT_SOURCE_DIR}/cmake/hoduConfig.cmake.in ${HODU_CMAKE_PACKAGE_DIR}/hoduConfig.cmake @ONLY)
write_basic_package_version_file(${HODU_CMAKE_PACKAGE_DIR}/hoduConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)

install(TARGETS hodu_cli RUNTIME DESTINATION bin)
install(TARGETS hodu_kernels LIBRARY DESTINATION lib)
install(TARGETS hodu_shared LIBRARY DESTINATION lib)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/hodu DESTINATION include FILES_MATCHING PATTERN "*.h")
install(FILES ${HODU_CMAKE_PACKAGE_DIR}/hoduConfig.cmake ${HODU_CMAKE_PACKAGE_DIR}/hoduConfigVersion.cmake
        DESTINATION lib/cmake/hodu)
