#!/usr/bin/env bash
# The frontend against PyTorch 1.13: references from Debian's python3-torch, then the checks.
# Usage: torch_check.sh FRONTEND_TORCH_CHECK_BINARY
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/torch_reference.py" "$tmp"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -ne 0 ] && { echo "FAIL: torch_reference.py exited $rc"; exit 1; }
HODU_TORCH_REF="$tmp" "$1"
