#!/usr/bin/env python3
"""Decodes images written by Pillow in many modes and formats with hodu's
ImageDecoder (through `hodu run`) and compares with Pillow's own decoding
(ONNX's reference implementation of ImageDecoder uses Pillow).

usage: /usr/bin/python3 tests/conformance/image_decoder_vs_pillow.py build-interp/bin/hodu
Needs python3-pil and python3-onnx. Prints one line per image and pixel format.
"""
import io, os, subprocess, sys, tempfile
import numpy as np
from PIL import Image
import onnx
from onnx import helper, TensorProto

HODU = sys.argv[1] if len(sys.argv) > 1 else 'build/bin/hodu'
TMP = tempfile.mkdtemp(prefix='hodu_image_')
def model(fmt):
    n = helper.make_node('ImageDecoder', ['encoded'], ['out'], pixel_format=fmt)
    g = helper.make_graph([n], 'g', [helper.make_tensor_value_info('encoded', TensorProto.UINT8, [None])],
                          [helper.make_tensor_value_info('out', TensorProto.UINT8, [None, None, None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 20)])
    p = os.path.join(TMP, f'model_{fmt}.onnx'); onnx.save(m, p); return p

models = {f: model(f) for f in ['RGB', 'Grayscale']}
rng = np.random.default_rng(0)
base = (rng.random((13, 17, 3)) * 255).astype(np.uint8)
base[:, :8] = np.linspace(0, 255, 8, dtype=np.uint8)[None, :, None]  # some smooth area
img_rgb = Image.fromarray(base, 'RGB')
cases = []
def add(name, im, fmt, **kw):
    b = io.BytesIO(); im.save(b, format=fmt, **kw); cases.append((name, b.getvalue()))
for mode in ['RGB', 'L', 'LA', 'RGBA', 'P', '1', 'I;16']:
    im = img_rgb.convert(mode) if mode != 'I;16' else Image.fromarray((base[..., 0].astype(np.uint16) * 257), 'I;16')
    add('png_' + mode, im, 'PNG')
add('png_P_transparency', img_rgb.convert('P'), 'PNG', transparency=3)
for mode in ['RGB', 'L', 'P', '1', 'RGBA']:
    add('bmp_' + mode, img_rgb.convert(mode), 'BMP')
for mode in ['RGB', 'L', 'RGBA', 'CMYK']:
    add('tiff_' + mode, img_rgb.convert(mode), 'TIFF')
add('tiff_lzw', img_rgb, 'TIFF', compression='tiff_lzw')
add('tiff_deflate', img_rgb, 'TIFF', compression='tiff_adobe_deflate')
for q, ss in [(75, 0), (95, 2), (50, 1)]:
    add(f'jpeg_q{q}_ss{ss}', img_rgb, 'JPEG', quality=q, subsampling=ss)
add('jpeg_L', img_rgb.convert('L'), 'JPEG')
add('jpeg_progressive', img_rgb, 'JPEG', progressive=True)
add('webp_lossy', img_rgb, 'WEBP', quality=80)
add('webp_lossless', img_rgb, 'WEBP', lossless=True)
add('webp_rgba', img_rgb.convert('RGBA'), 'WEBP', lossless=True)
for mode in ['RGB', 'L', '1']:
    add('ppm_' + mode, img_rgb.convert(mode), 'PPM')
try:
    add('jp2_RGB', img_rgb, 'JPEG2000')
    add('jp2_L', img_rgb.convert('L'), 'JPEG2000')
    add('j2k_RGB', img_rgb, 'JPEG2000', no_jp2=True)
    add('jp2_lossy', img_rgb, 'JPEG2000', quality_mode='rates', quality_layers=[20])
except Exception as e:
    print('jpeg2000 save failed', e)

# Differences hodu keeps on purpose.
KNOWN = {'png_I;16': 'Pillow clips 16-bit gray to 255, hodu takes the high byte (as Pillow does for 16-bit RGB)'}
bad = 0
for name, data in cases:
    np.save(os.path.join(TMP, 'in.npy'), np.frombuffer(data, np.uint8))
    for fmt in ['RGB', 'Grayscale']:
        r = subprocess.run([HODU, 'run', models[fmt], '-i', 'encoded=' + os.path.join(TMP, 'in.npy'), '-f', 'npy', '-o', os.path.join(TMP, 'out')], capture_output=True, text=True)
        im = Image.open(io.BytesIO(data))
        ref = np.array(im.convert('RGB' if fmt == 'RGB' else 'L'))
        if fmt != 'RGB': ref = ref[..., None]
        if r.returncode != 0:
            print(f'{name:22s} {fmt:9s} ERROR {r.stderr.strip()[:150]}'); bad += 1; continue
        ours = np.load(os.path.join(TMP, 'out', 'out.npy'))
        if ours.shape != ref.shape:
            print(f'{name:22s} {fmt:9s} shape {ours.shape} != {ref.shape}'); bad += 1; continue
        d = np.abs(ours.astype(int) - ref.astype(int))
        status = 'exact' if d.max() == 0 else f'max diff {d.max()} ({(d > 0).sum()} of {d.size})'
        if d.max() and name in KNOWN:
            status += ' (known: ' + KNOWN[name] + ')'
        elif d.max():
            bad += 1
        print(f'{name:22s} {fmt:9s} {status}')
print('mismatches', bad, 'of', 2 * len(cases))
sys.exit(1 if bad else 0)
