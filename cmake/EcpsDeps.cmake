# Third-party dependencies, all from Debian packages (see deploy/setup.sh).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)          # module mode: Debian ships no protobuf-config.cmake
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)
find_package(benchmark CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)  # /metrics (runtime/metrics.h)
find_package(OpenSSL REQUIRED)  # role tokens (HMAC-SHA256) and TLS certificate checks (runtime/security.h)

find_package(OpenBLAS CONFIG REQUIRED)   # variables only
add_library(ecps_openblas INTERFACE)
target_include_directories(ecps_openblas INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(ecps_openblas INTERFACE ${OpenBLAS_LIBRARIES})
add_library(ecps::openblas ALIAS ecps_openblas)
# Optional: oneDNN's sgemm for the worker's linear layers (kernels/CMakeLists.txt).
# Debian's oneDNN threads with GCC's OpenMP runtime, libgomp; ecps sets that runtime's team
# size, so it links libgomp itself, whichever compiler builds (Clang's OpenMP would be
# libomp, a second runtime that oneDNN never asks).
# Found by its header and library, not by find_package(dnnl): Debian's dnnl-config.cmake
# requires OpenCL's development files (only a Recommends of libdnnl-dev, which apt without
# recommends leaves out) and fails the whole configure when they are missing. ecps calls only
# dnnl_sgemm, which needs neither OpenCL nor the config's flags.
find_path(ECPS_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
find_library(ECPS_DNNL_LIBRARY NAMES dnnl)
find_library(ECPS_GOMP_LIBRARY NAMES gomp libgomp.so.1)
if(ECPS_DNNL_INCLUDE_DIR AND ECPS_DNNL_LIBRARY AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "${ECPS_DNNL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${ECPS_DNNL_INCLUDE_DIR}")
endif()
if(TARGET DNNL::dnnl AND ECPS_GOMP_LIBRARY)
  message(STATUS "ecps: the worker's GEMMs use oneDNN (${ECPS_DNNL_LIBRARY})")
else()
  message(STATUS "ecps: no oneDNN (libdnnl-dev): the worker's GEMMs use OpenBLAS")
endif()

include(GoogleTest)
