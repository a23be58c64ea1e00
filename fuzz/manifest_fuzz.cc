// The checkpoint manifest reader on arbitrary text: a manifest or an error, never a crash
// (the JSON parser, field checks and the layout's consistency checks).
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto manifest = ecps::ParseManifest(text, "/nonexistent/step-000000001");
  (void)manifest;
  return 0;
}
