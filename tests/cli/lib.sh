# Shared by the CLI test scripts: check helpers and the summary line.
# expect_ok NAME REGEX CMD...    : exit 0 and stdout+stderr matches REGEX
# expect_error NAME REGEX CMD... : exit != 0, no crash (exit < 128), "error" and REGEX in the output
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; [ -n "${2:-}" ] && echo "$2" | head -20; }

# expect_ok NAME REGEX CMD... : exit 0 and stdout+stderr matches REGEX
expect_ok() {
  local name=$1 pattern=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -ne 0 ]; then bad "$name (exit $rc)" "$out"; return; fi
  if ! grep -Eq -- "$pattern" <<<"$out"; then bad "$name (output does not match /$pattern/)" "$out"; return; fi
  ok
}
# expect_error NAME REGEX CMD... : exit != 0, no crash (exit < 128), stderr has "error:" and matches REGEX
expect_error() {
  local name=$1 pattern=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then bad "$name (exit 0, expected an error)" "$out"; return; fi
  if [ $rc -ge 128 ]; then bad "$name (crashed: exit $rc)" "$out"; return; fi
  if ! grep -q "error" <<<"$out"; then bad "$name (no 'error' in output)" "$out"; return; fi
  if ! grep -Eq -- "$pattern" <<<"$out"; then bad "$name (message does not match /$pattern/)" "$out"; return; fi
  ok
}

# require_onnx WHAT : exit 77 (ctest's skip) unless Debian's python3-onnx and python3-numpy,
# needed to WHAT, are installed
require_onnx() {
  /usr/bin/python3 -c "import onnx, numpy" 2>/dev/null && return
  echo "skipped: Debian's python3-onnx and python3-numpy are needed to $1"
  exit 77
}

summary() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
