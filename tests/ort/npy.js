// Minimal .npy reader/writer for the ONNX Runtime oracle scripts (little-endian,
// C order; the dtypes ORT tensors use).
'use strict';
const fs = require('fs');

const DESCR_TO_TYPE = {
  '<f4': 'float32', '<f8': 'float64', '<i8': 'int64', '<i4': 'int32', '<i2': 'int16', '|i1': 'int8',
  '|u1': 'uint8', '<u2': 'uint16', '<u4': 'uint32', '<u8': 'uint64', '|b1': 'bool', '<f2': 'float16',
};
const TYPE_TO_ARRAY = {
  float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array, int16: Int16Array,
  int8: Int8Array, uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array,
  bool: Uint8Array, float16: Uint16Array,
};

function readNpy(path) {
  const buf = fs.readFileSync(path);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${path}: not a .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const fortran = /'fortran_order':\s*True/.test(header);
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header)[1];
  const shape = shapeText.split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  if (fortran) throw new Error(`${path}: Fortran-order arrays are not supported here`);
  const type = DESCR_TO_TYPE[descr];
  if (!type) throw new Error(`${path}: dtype ${descr} not supported`);
  const Arr = TYPE_TO_ARRAY[type];
  const start = hstart + hlen;
  const bytes = buf.subarray(start);
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  const data = new Arr(copy.buffer, 0, copy.length / Arr.BYTES_PER_ELEMENT);
  return { type, shape, data };
}

function writeNpy(path, type, shape, data) {
  const descr = Object.keys(DESCR_TO_TYPE).find((k) => DESCR_TO_TYPE[k] === type);
  if (!descr) throw new Error(`cannot write dtype ${type}`);
  const shapeText = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeText}, }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(path, Buffer.concat([head, Buffer.from(header, 'latin1'), body]));
}

module.exports = { readNpy, writeNpy };
