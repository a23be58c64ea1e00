// MANIFEST.json: the checkpoint's table of contents (docs/checkpoints.md, "MANIFEST.json"),
// its text and its strict reader. CommitCheckpoint (checkpoint/writer.h) writes it.
#ifndef ECPS_CHECKPOINT_MANIFEST_H_
#define ECPS_CHECKPOINT_MANIFEST_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/format.h"
#include "runtime/env.h"

namespace ecps {

// The text of MANIFEST.json for `manifest` (its dir is not written): one field per line, one
// table or dense tensor per line. `manifest` must be consistent with its layout (one checksum
// per table, one entry per dense tensor).
std::string ManifestToJson(const Manifest& manifest);

// Reads and strictly parses DIR/MANIFEST.json. NOT_FOUND "DIR/MANIFEST.json: missing";
// DATA_LOSS "DIR/MANIFEST.json: not valid: <why>" for bad JSON, an unknown, missing,
// duplicated or mistyped field, an invalid layout, a count that disagrees with the layout,
// a file name or byte size that disagrees with the layout; FAILED_PRECONDITION for a format
// version this build does not read.
// The file is read through `env` (runtime/env.h).
absl::StatusOr<Manifest> ReadManifest(const std::string& dir, Env* env = Env::Default());
// The same checks on the manifest's text (errors are the reasons, without the file name):
// what ReadManifest and the fuzz target run.
absl::StatusOr<Manifest> ParseManifest(absl::string_view text, const std::string& dir);

// FAILED_PRECONDITION naming DIR/MANIFEST.json and the field when the checkpoint cannot be
// loaded into `expected`: dim, payload_floats, optimizers, table rows, dense sizes and state
// sizes must be equal (job and step are not compared).
absl::Status CheckLayoutMatches(const Manifest& manifest, const CheckpointLayout& expected);

}  // namespace ecps

#endif  // ECPS_CHECKPOINT_MANIFEST_H_
