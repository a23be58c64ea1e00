// The on-disk checkpoint format (docs/checkpoints.md, "Checkpoint format"): include this
// header for all of it.
//
// A checkpoint is one directory ROOT/step-NNNNNNNNN/ holding
//   table-TTT.rows   per embedding table: every row's payload (weights + sparse optimizer
//                    state, float32 little-endian) in LOGICAL row order, row i at byte offset
//                    i * payload_floats * 4; exactly rows * payload_floats * 4 bytes.
//   dense-TTT.bin    per dense tensor: a 48-byte header, the weights, the optimizer state.
//   MANIFEST.json    written last: layout, per-file sizes and checksums, reader positions.
//
// Life of a checkpoint:
//   1. The coordinator calls BeginCheckpoint: it creates ROOT/step-N.tmp/ with every table
//      file pre-sized.
//   2. Servers, in parallel and in any number of processes, open TableWriters on the table
//      files and write the rows they hold at their logical offsets (disjoint rows, each row
//      exactly once over all writers), then Finish(); each reports its partial checksum.
//      The owner of each dense tensor calls WriteDense.
//   3. The coordinator XOR-combines the partial checksums (CombineChecksums) and calls
//      CommitCheckpoint, which writes MANIFEST.json atomically and renames step-N.tmp to
//      step-N. Only a directory named step-N with a MANIFEST.json is a checkpoint; a crash at
//      any point leaves either the previous state or a *.tmp directory that readers ignore.
//   4. Readers find it with LatestCheckpoint, read the manifest, optionally verify the whole
//      checkpoint, and read any rows by id (a server of a resized cluster reads only the rows
//      it now holds).
//
// Checksums are order independent, so writers holding any subsets of rows compute theirs
// independently: a table's checksum is the XOR over its rows of RowChecksum(row, payload), a
// 64-bit XXH64 (runtime/hash.h) of the payload bytes seeded by the row id.
//
// Errors: every error about a file names it (its full path). Corrupt or truncated data and
// malformed manifests are DATA_LOSS, a missing checkpoint or manifest NOT_FOUND, wrong
// arguments INVALID_ARGUMENT, a checkpoint that does not fit the caller's model
// FAILED_PRECONDITION, I/O failures INTERNAL with the errno text.
#ifndef ECPS_CHECKPOINT_CHECKPOINT_H_
#define ECPS_CHECKPOINT_CHECKPOINT_H_

// The pieces, each its own header (library ecps_checkpoint; plain POSIX files, no RPC):
#include "checkpoint/format.h"    // layout, names and sizes, the dense header, row checksums
#include "checkpoint/manifest.h"  // MANIFEST.json: its text, the strict reader, layout checks
#include "checkpoint/reader.h"    // verification, rows by id, dense tensors
#include "checkpoint/store.h"     // the checkpoints under ROOT: list, newest, prune
#include "checkpoint/writer.h"    // begin, table writers, dense writes, commit

#endif  // ECPS_CHECKPOINT_CHECKPOINT_H_
