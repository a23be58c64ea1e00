# ecps_test(NAME SOURCES a.cc b.cc LIBS x y [LABELS l] [TIMEOUT s] [GRPC])
# A GoogleTest binary registered with ctest. Discovery runs at test time (PRE_TEST), so a
# test binary never runs during the build. Its limit is generous: ctest lists every binary at
# start-up, when the page cache is cold, and the GPU tests load cuBLAS(Lt) and NCCL (close to
# a gigabyte) just to list themselves; CMake's default 5 s failed a CI run on that alone.
# Test sources compile at -O0: the code under test lives in the libraries, which keep the
# build type's optimisation, and a test file's own code is setup and assertions; -O2 made
# them a third slower to compile for nothing a test measures. GRPC: the sources include gRPC
# or the generated service headers, so they reuse the precompiled ones (cmake/EcpsPch.cmake).
function(ecps_test name)
  cmake_parse_arguments(T "GRPC" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE -O0)
  if(T_GRPC)
    ecps_use_test_pch(${name})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 120
    PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()
