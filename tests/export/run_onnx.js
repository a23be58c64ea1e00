// Runs the ONNX model `ecps export` wrote in ONNX Runtime (onnxruntime-node), with its
// tables loaded from the export's safetensors file as the model's external data, on samples
// the caller wrote; writes the probabilities. Also recomputes the manifest's row-mapping
// examples from the formula it documents, so that the documentation is checked too.
//
//   node tests/export/run_onnx.js EXPORT_DIR WORK_DIR
//
// WORK_DIR holds dense.f32 (N x num_dense float32), rows.i64 (N x num_sparse int64), both
// little-endian; the probabilities go to WORK_DIR/onnx_probabilities.f32 (N float32).
// Exit code 0 on success, 1 on any failure (with one line saying why).
'use strict';
const fs = require('fs');
const path = require('path');

const MASK = (1n << 64n) - 1n;

function mix64(x) {
  x = (x + 0x9e3779b97f4a7c15n) & MASK;
  x = ((x ^ (x >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  x = ((x ^ (x >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return x ^ (x >> 31n);
}

// The manifest's row mapping: 1 + H(salt[t], raw) mod (rows - 1), H(s, x) as documented.
function checkRowMapping(manifest) {
  const m = manifest.row_mapping;
  for (const e of m.examples) {
    const rows = BigInt(manifest.model.table_rows[e.table]);
    const s = BigInt('0x' + m.salt[e.table]);
    const raw = BigInt('0x' + e.raw);
    const h = mix64(mix64(s) ^ ((raw + 0x632be59bd9b4e019n + ((s << 6n) & MASK)) & MASK));
    const row = rows <= 1n ? 0n : 1n + (h % (rows - 1n));
    if (row !== BigInt(e.row)) {
      throw new Error(`row_mapping: table ${e.table} raw ${e.raw}: the formula gives ${row}, ` +
                      `the manifest says ${e.row}`);
    }
  }
  return m.examples.length;
}

async function main() {
  const [exportDir, workDir] = process.argv.slice(2);
  if (!exportDir || !workDir) throw new Error('usage: run_onnx.js EXPORT_DIR WORK_DIR');
  const ort = require('onnxruntime-node');
  const manifest = JSON.parse(fs.readFileSync(path.join(exportDir, 'manifest.json'), 'utf8'));
  const checked = checkRowMapping(manifest);
  const numDense = manifest.model.num_dense, numSparse = manifest.model.num_sparse;
  const denseBytes = fs.readFileSync(path.join(workDir, 'dense.f32'));
  const rowBytes = fs.readFileSync(path.join(workDir, 'rows.i64'));
  const dense = new Float32Array(denseBytes.buffer, denseBytes.byteOffset, denseBytes.length / 4);
  const rows = new BigInt64Array(rowBytes.buffer, rowBytes.byteOffset, rowBytes.length / 8);
  const n = dense.length / numDense;
  if (rows.length !== n * numSparse) throw new Error('dense.f32 and rows.i64 disagree on N');

  const session = await ort.InferenceSession.create(path.join(exportDir, manifest.onnx.file));
  const [denseIn, rowsIn] = manifest.onnx.inputs.map((i) => i.name);
  const out = await session.run({
    [denseIn]: new ort.Tensor('float32', dense, [n, numDense]),
    [rowsIn]: new ort.Tensor('int64', rows, [n, numSparse]),
  });
  const probs = out[manifest.onnx.outputs[1].name].data;
  fs.writeFileSync(path.join(workDir, 'onnx_probabilities.f32'),
                   Buffer.from(probs.buffer, probs.byteOffset, probs.length * 4));
  console.log(`run_onnx: ${n} samples through ${manifest.onnx.file} in onnxruntime-node ` +
              `${require('onnxruntime-node/package.json').version}; ${checked} row-mapping ` +
              'examples reproduced from the manifest\'s formula');
}

main().catch((e) => {
  console.error(`run_onnx: ${e.message}`);
  process.exit(1);
});
