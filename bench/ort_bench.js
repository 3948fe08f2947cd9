// Times a model with ONNX Runtime (CPU, graph optimization "all") the way
// `hodu bench --json` times hodu, and prints one JSON object.
// usage: node bench/ort_bench.js MODEL [--threads N] [--warmup N] [--iters N] [--out DIR]
//            [--profile PREFIX] NAME=INPUT.npy ...
// --profile: ORT's own per-node trace of every run (PREFIX_<date>.json), to set beside
// `hodu bench --profile`.
'use strict';
const fs = require('fs');
const path = require('path');
const ortDir = path.join(__dirname, '..', 'tests', 'ort');
const ort = require(path.join(ortDir, 'node_modules', 'onnxruntime-node'));
const { readNpy, writeNpy } = require(path.join(ortDir, 'npy'));

// Peak resident memory of this process (VmHWM; maxRSS would include the parent's over fork + exec).
function peakRssMb() {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : process.resourceUsage().maxRSS / 1024;
}

function percentile(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[i];
}

async function main() {
  const args = process.argv.slice(2);
  const model = args[0];
  let threads = 1, warmup = 3, iters = 20, outDir = '', profile = '';
  const feeds = {};
  for (let i = 1; i < args.length; ++i) {
    if (args[i] === '--threads') threads = Number(args[++i]);
    else if (args[i] === '--warmup') warmup = Number(args[++i]);
    else if (args[i] === '--iters') iters = Number(args[++i]);
    else if (args[i] === '--out') outDir = args[++i];
    else if (args[i] === '--profile') profile = args[++i];
    else {
      const eq = args[i].indexOf('=');
      const arr = readNpy(args[i].slice(eq + 1));
      feeds[args[i].slice(0, eq)] = new ort.Tensor(arr.type, arr.data, arr.shape);
    }
  }
  let t0 = process.hrtime.bigint();
  const ms = () => Number(process.hrtime.bigint() - t0) / 1e6;
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: 'all', intraOpNumThreads: threads, interOpNumThreads: 1,
    ...(profile ? { enableProfiling: true, profileFilePrefix: profile } : {}),
  });
  const loadMs = ms();
  t0 = process.hrtime.bigint();
  const results = await session.run(feeds);
  const firstMs = ms();
  if (outDir) {
    fs.mkdirSync(outDir, { recursive: true });
    for (const name of session.outputNames) {
      const t = results[name];
      writeNpy(path.join(outDir, name.replace(/[^A-Za-z0-9._-]/g, '_') + '.npy'), t.type, t.dims, t.data);
    }
  }
  for (let i = 0; i < warmup; ++i) await session.run(feeds);
  const times = [];
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < iters; ++i) {
    t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(ms());
  }
  const cpu = process.cpuUsage(cpu0);  // microseconds, every thread of the process
  if (profile) session.endProfiling();
  const sorted = [...times].sort((a, b) => a - b);
  console.log(JSON.stringify({
    engine: 'onnxruntime', threads, load_ms: loadMs, first_run_ms: firstMs, median_ms: percentile(sorted, 0.5),
    p90_ms: percentile(sorted, 0.9), min_ms: sorted[0], mean_ms: times.reduce((a, b) => a + b, 0) / times.length,
    iters, warmup, peak_rss_mb: peakRssMb(), cpu_ms: (cpu.user + cpu.system) / 1e3 / iters,
  }));
}

main().catch((e) => { console.error(`error: ${e.message}`); process.exit(1); });
