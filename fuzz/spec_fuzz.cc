// The spec parser on arbitrary text: it must return a spec or an error, never crash, and a
// spec it accepts must render (SpecToYaml) to text it accepts again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = ecps::ParseSpec(text, "fuzz.yaml");
  if (!spec.ok()) return 0;
  auto again = ecps::ParseSpec(ecps::SpecToYaml(*spec), "rendered.yaml");
  if (!again.ok()) std::abort();  // a spec that was valid must stay valid when rendered
  return 0;
}
