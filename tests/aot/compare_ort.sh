#!/usr/bin/env bash
# Compiled models (hodu build via the native engine) against ONNX Runtime 1.30:
# torchvision ResNet-50 and MobileNetV2 and a small transformer encoder,
# exported with random weights; rel-L2 must be <= 1e-4.
# usage: compare_ort.sh HODU_BIN SOURCE_DIR   (exit 77: ONNX Runtime or torch missing)
set -eu
HODU=$1
SRC=$2
T=$(mktemp -d /tmp/hodu-aot-ort-XXXXXX)
trap 'rm -rf "$T"' EXIT
/usr/bin/python3 -c "import torch, torchvision" 2>/dev/null || { echo "SKIP: torch/torchvision missing"; exit 77; }
/usr/bin/python3 "$SRC/tests/aot/export_torchvision.py" resnet50 "$T/resnet50.onnx"
/usr/bin/python3 "$SRC/tests/aot/export_torchvision.py" mobilenet_v2 "$T/mobilenet_v2.onnx"
/usr/bin/python3 "$SRC/tests/aot/export_encoder.py" "$T/encoder.onnx"
exec /usr/bin/python3 "$SRC/tests/ort/compare_models.py" --hodu "$HODU" --engine native --tol 1e-4 \
  "$T/resnet50.onnx" "$T/mobilenet_v2.onnx" "$T/encoder.onnx"
