// Runs many models with ONNX Runtime in one process (session creation per
// model, graph optimization "all", 1 thread) — for checks over whole corpora.
// usage: node ort_batch.js JOBS.json RESULTS.json
// JOBS.json: [{"id", "model", "feeds": {name: "x.npy"}, "out_dir"}]
// RESULTS.json: {id: {"ok": true, "outputs": {name: "out_dir/<name>.npy"}} | {"ok": false, "error": "..."}}
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');
const { readNpy, writeNpy } = require('./npy');

ort.env.logLevel = 'fatal';  // expected refusals (old opsets, unsupported ops) are reported per job

async function runJob(job) {
  const feeds = {};
  for (const [name, file] of Object.entries(job.feeds)) {
    const arr = readNpy(file);
    feeds[name] = new ort.Tensor(arr.type, arr.data, arr.shape);
  }
  const session = await ort.InferenceSession.create(job.model, {
    graphOptimizationLevel: 'all', intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 3,
  });
  try {
    const results = await session.run(feeds);
    fs.mkdirSync(job.out_dir, { recursive: true });
    const outputs = {};
    for (const name of session.outputNames) {
      const t = results[name];
      if (!(t instanceof ort.Tensor) || t.type === 'string') throw new Error(`output '${name}' is not a numeric tensor`);
      const file = path.join(job.out_dir, name.replace(/[^A-Za-z0-9._-]/g, '_') + '.npy');
      writeNpy(file, t.type, t.dims, t.data);
      outputs[name] = file;
    }
    return outputs;
  } finally {
    await session.release();  // native memory is not seen by V8's GC
  }
}

async function main() {
  const [jobsPath, resultsPath] = process.argv.slice(2);
  if (!resultsPath) {
    console.error('usage: node ort_batch.js JOBS.json RESULTS.json');
    process.exit(2);
  }
  const jobs = JSON.parse(fs.readFileSync(jobsPath, 'utf8'));
  const results = {};
  for (const job of jobs) {
    try {
      results[job.id] = { ok: true, outputs: await runJob(job) };
    } catch (e) {
      results[job.id] = { ok: false, error: String(e.message || e).split('\n')[0] };
    }
  }
  fs.writeFileSync(resultsPath, JSON.stringify(results));
}

main().catch((e) => { console.error(`error: ${e.message}`); process.exit(1); });
