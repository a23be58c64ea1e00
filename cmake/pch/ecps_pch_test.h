// The test binaries' precompiled header: the service headers of ecps_pch.h plus GoogleTest's
// (see cmake/EcpsPch.cmake).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cmake/pch/ecps_pch.h"
