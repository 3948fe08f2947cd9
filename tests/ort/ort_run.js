// Runs a model with ONNX Runtime (CPU, graph optimization "all") and writes
// each output to OUT_DIR/<sanitized name>.npy.
// usage: node ort_run.js MODEL OUT_DIR [--threads N] [--level all|extended|basic|disabled] NAME=INPUT.npy ...
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');
const { readNpy, writeNpy } = require('./npy');

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 2) {
    console.error('usage: node ort_run.js MODEL OUT_DIR [--threads N] [--level all|extended|basic|disabled] NAME=INPUT.npy ...');
    process.exit(2);
  }
  const [model, outDir] = args;
  let threads = 1;
  let level = 'all';
  const feeds = {};
  for (let i = 2; i < args.length; ++i) {
    if (args[i] === '--threads') { threads = Number(args[++i]); continue; }
    if (args[i] === '--level') { level = args[++i]; continue; }
    const eq = args[i].indexOf('=');
    const name = args[i].slice(0, eq);
    const arr = readNpy(args[i].slice(eq + 1));
    feeds[name] = new ort.Tensor(arr.type, arr.data, arr.shape);
  }
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: level, intraOpNumThreads: threads, interOpNumThreads: 1,
  });
  const results = await session.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of session.outputNames) {
    const t = results[name];
    const file = path.join(outDir, name.replace(/[^A-Za-z0-9._-]/g, '_') + '.npy');
    writeNpy(file, t.type, t.dims, t.data);
  }
}

main().catch((e) => { console.error(`error: ${e.message}`); process.exit(1); });
