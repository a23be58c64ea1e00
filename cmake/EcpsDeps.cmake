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
find_package(dnnl CONFIG QUIET)
find_library(ECPS_GOMP_LIBRARY NAMES gomp libgomp.so.1)
if(TARGET DNNL::dnnl AND ECPS_GOMP_LIBRARY)
  message(STATUS "ecps: the worker's GEMMs use oneDNN ${dnnl_VERSION}")
else()
  message(STATUS "ecps: no oneDNN (libdnnl-dev): the worker's GEMMs use OpenBLAS")
endif()

include(GoogleTest)
