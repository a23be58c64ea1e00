# Precompiled headers for the files that include gRPC and the generated service headers.
#
# Those headers are 5-8 s of the 10-20 s such a file takes on two cores, and about half of the
# project's files include them. Each is parsed once here, by a donor target, and the targets
# that opt in reuse the donor's result (REUSE_FROM), so it costs one parse per kind of target
# rather than one per file. A precompiled header is only valid for files compiled with the same
# -O level, -fPIC/-fPIE and -pthread as its donor, so there are two donors:
#   ecps_pch_lib    libraries: -fPIC, the build type's -O
#   ecps_pch_test   test programs: -fPIE, -O0 (ecps_test compiles tests at -O0; the code they
#                   test is in the libraries, which keep the build type's optimisation)
# A file compiled with other settings gets "invalid PCH" (an error under ECPS_WERROR).
# ECPS_PCH=OFF compiles every file from its own headers (and checks that each includes what
# it uses, which the forced include would otherwise hide).
option(ECPS_PCH "Precompile the gRPC and service headers" ON)

# Targets that include gRPC or the generated service headers call this.
function(ecps_use_pch target)
  if(ECPS_PCH)
    target_precompile_headers(${target} REUSE_FROM ecps_pch_lib)
  endif()
endfunction()

# Tests: the same, with GoogleTest's headers too (ecps_test(... GRPC) calls it).
function(ecps_use_test_pch target)
  if(ECPS_PCH)
    target_precompile_headers(${target} REUSE_FROM ecps_pch_test)
  endif()
endfunction()

if(ECPS_PCH)
  set(_pch_libs ecps_proto gRPC::grpc++ absl::status absl::statusor absl::strings
      absl::str_format absl::synchronization Threads::Threads)
  add_library(ecps_pch_lib OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch/anchor.cc)
  target_include_directories(ecps_pch_lib PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(ecps_pch_lib PRIVATE ${_pch_libs})
  target_precompile_headers(ecps_pch_lib PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch/ecps_pch.h)

  add_executable(ecps_pch_test ${PROJECT_SOURCE_DIR}/cmake/pch/anchor_main.cc)
  target_include_directories(ecps_pch_test PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(ecps_pch_test PRIVATE ${_pch_libs} GTest::gtest GTest::gmock)
  target_compile_options(ecps_pch_test PRIVATE -O0)
  target_precompile_headers(ecps_pch_test PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch/ecps_pch_test.h)
endif()
