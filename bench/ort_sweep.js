// Runs a model with ONNX Runtime (CPU, graph optimization "all") once per step of a shape sweep
// and prints one JSON object: each step's milliseconds and the peak resident memory.
// usage: node bench/ort_sweep.js MODEL STEPS.json [--threads N]
//   STEPS.json: [{"NAME": "INPUT.npy", ...}, ...] (bench/shape_sweep.py writes it)
'use strict';
const fs = require('fs');
const path = require('path');
const ortDir = path.join(__dirname, '..', 'tests', 'ort');
const ort = require(path.join(ortDir, 'node_modules', 'onnxruntime-node'));
const { readNpy } = require(path.join(ortDir, 'npy'));

function peakRssMb() {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : process.resourceUsage().maxRSS / 1024;
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 2) {
    console.error('usage: node bench/ort_sweep.js MODEL STEPS.json [--threads N]');
    process.exit(2);
  }
  let threads = 1;
  for (let i = 2; i < args.length; ++i)
    if (args[i] === '--threads') threads = Number(args[++i]);
  const steps = JSON.parse(fs.readFileSync(args[1], 'utf8'));
  const session = await ort.InferenceSession.create(args[0], {
    graphOptimizationLevel: 'all', intraOpNumThreads: threads, interOpNumThreads: 1,
  });
  const ms = [];
  for (const step of steps) {
    const feeds = {};
    for (const [name, file] of Object.entries(step)) {
      const arr = readNpy(file);
      feeds[name] = new ort.Tensor(arr.type, arr.data, arr.shape);
    }
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  console.log(JSON.stringify({ engine: 'onnxruntime', threads, step_ms: ms, peak_rss_mb: peakRssMb() }));
}

main().catch((e) => { console.error(`error: ${e.message}`); process.exit(1); });
