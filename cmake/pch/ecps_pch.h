// The headers every gRPC-facing file of ecps parses: gRPC's, protobuf's and the generated
// service's. They are most of what such a file costs to compile (about a third of its time
// with g++ at -O2), so cmake/EcpsPch.cmake precompiles them once per kind of target and the
// targets that include them reuse the result. Nothing here may depend on a macro a consumer
// sets: a precompiled header must mean the same in every file that uses it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
