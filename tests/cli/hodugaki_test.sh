#!/usr/bin/env bash
# usage: hodugaki_test.sh HODUGAKI HODU SOURCE_DIR
# hodugaki as a user runs it, on the loopback interface: serve the example CNN
# as .onnx, .hdss and a `hodu build` library; `hodugaki infer` (JSON and
# binary) and `hodu run --remote` give the bytes `hodu run` gives; errors exit 1
# with a message; SIGTERM answers the request in flight, then exits 0; the port
# is free again after. Prints "N passed, M failed".
set -u
gaki=$1
hodu=$2
src=$3
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/lib.sh"
model=$src/examples/models/tiny_cnn.onnx
image=$src/examples/inputs/tiny_cnn_image.npy

# start_server LOG ARGS... : starts `hodugaki serve ARGS` on a free loopback port;
# sets $server_pid and $url, or fails the check and returns 1.
start_server() {
  local log=$1; shift
  "$gaki" serve "$@" --host 127.0.0.1 --threads 1 2>"$log" &
  server_pid=$!
  pids+=("$server_pid")
  url=""
  for _ in $(seq 1 200); do
    url=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$log" | sed 's/listening on //')
    [ -n "$url" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  bad "server did not start: $*" "$(cat "$log")"
  return 1
}

expect_ok "version" "^hodugaki [0-9]+\.[0-9]+" "$gaki" --version
expect_ok "help lists serve and infer" "serve.*infer|infer.*serve" bash -c "$gaki --help | tr '\n' ' '"
expect_ok "serve --help" "--max-batch" "$gaki" serve --help
expect_ok "infer --help" "--binary" "$gaki" infer --help
out=$("$gaki" serve 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "model is required" <<<"$out" && ok || bad "serve without a model (exit $rc)" "$out"
expect_error "serve a missing file" "does not exist" "$gaki" serve "$tmp/none.onnx" --port 0
expect_error "serve a bad name" "must be letters" "$gaki" serve "a/b=$model" --port 0
expect_error "serve a bad port" "70000" "$gaki" serve "$model" --port 70000
expect_error "infer a bad URL" "must start with http" "$gaki" infer localhost:1 m -i "$image"
expect_error "infer an unreachable server" "cannot reach" "$gaki" infer http://127.0.0.1:1 m -i "$image" --timeout-ms 2000

"$hodu" install --prefix "$tmp/prefix" -q >/dev/null 2>&1 && [ -x "$tmp/prefix/bin/hodugaki" ] && ok ||
  bad "hodu install puts hodugaki next to hodu"

"$hodu" run "$model" -i image="$image" -f npy -o "$tmp/ref" >/dev/null 2>&1 || bad "hodu run (reference)"
"$hodu" convert "$model" -o "$tmp/cnn.hdss" >/dev/null 2>&1 || bad "hodu convert to .hdss"
"$hodu" build "$model" --dim batch=2 -o "$tmp/cnn2.so" >/dev/null 2>&1 || bad "hodu build .so"
"$hodu" run "$tmp/cnn2.so" -i image="$image" -f npy -o "$tmp/ref_lib" >/dev/null 2>&1 || bad "hodu run of the .so (reference)"

if start_server "$tmp/s1.log" "$model" "hdss=$tmp/cnn.hdss" "lib=$tmp/cnn2.so"; then
  grep -q "model 'lib' version 1 .*hodu_library" "$tmp/s1.log" && ok || bad "the library is served" "$(cat "$tmp/s1.log")"
  grep -q "one request per run (dim 0 of input 'image' is fixed" "$tmp/s1.log" && ok ||
    bad "the startup line says why the library is not batched" "$(cat "$tmp/s1.log")"
  for m in tiny_cnn hdss lib; do
    for mode in json binary; do
      flag=""; [ $mode = binary ] && flag="--binary"
      rm -rf "$tmp/out"
      expect_ok "infer $m ($mode)" "wrote" "$gaki" infer "$url" "$m" -i image="$image" $flag -f npy -o "$tmp/out"
      # The library's own computation is its reference: `hodu run` of the .so, not the cpu engine's
      # (another compiler's kernels: the same to about 1e-7, not bit for bit).
      ref="$tmp/ref"; [ $m = lib ] && ref="$tmp/ref_lib"
      cmp -s "$tmp/out/probabilities.npy" "$ref/probabilities.npy" && ok ||
        bad "infer $m ($mode): outputs differ from hodu run's"
    done
  done
  expect_ok "infer prints like hodu run" "probabilities: f32\[2, 10\] = \[\[" "$gaki" infer "$url" tiny_cnn -i "$image"
  expect_ok "infer json" '"probabilities": \{"dtype": "f32", "shape": \[2, 10\]' "$gaki" infer "$url" tiny_cnn -i "$image" -f json
  rm -rf "$tmp/remote"
  expect_ok "hodu run --remote" "wrote" "$hodu" run "$model" -i image="$image" --remote "$url" -f npy -o "$tmp/remote"
  cmp -s "$tmp/remote/probabilities.npy" "$tmp/ref/probabilities.npy" && ok || bad "run --remote differs from a local run"
  out=$("$hodu" run "$model" -i image="$image" --remote "$url" --remote-model nope -f json 2>&1)
  grep -q "warning: remote run failed, running locally: .*unknown model 'nope'" <<<"$out" && grep -q '"probabilities"' <<<"$out" &&
    ok || bad "run --remote to an unknown model falls back with a warning" "$out"
  expect_error "infer an unknown model" "unknown model 'nope' \(models: 'tiny_cnn', 'hdss', 'lib'\)" "$gaki" infer "$url" nope -i "$image"
  expect_error "infer a wrong input name" "has no input 'pixels'" "$gaki" infer "$url" tiny_cnn -i pixels="$image"
  expect_error "infer the library at another batch size" "dim 0 is 1 but the model expects 2" bash -c \
    "/usr/bin/python3 -c 'import numpy as n; n.save(\"$tmp/one.npy\", n.zeros((1,1,8,8), n.float32))' && \
     \"$gaki\" infer \"$url\" lib -i \"$tmp/one.npy\""
  expect_error "a second server on the same port" "cannot listen on 127.0.0.1:${url##*:}" "$gaki" serve "$model" \
    --host 127.0.0.1 --port "${url##*:}"
  kill -TERM "$server_pid"
  wait "$server_pid"; rc=$?
  [ $rc -eq 0 ] && grep -q "hodugaki: stopped" "$tmp/s1.log" && ok || bad "SIGTERM: exit 0 (was $rc)" "$(cat "$tmp/s1.log")"
  port=${url##*:}

  # Graceful drain: a lone request waits 1.5 s for a batch; SIGTERM meanwhile, and it is still answered.
  if start_server "$tmp/s2.log" "$model" --port "$port" --batch-timeout-us 1500000; then
    [ "$url" = "http://127.0.0.1:$port" ] && ok || bad "restart on the same port ($url)"
    "$gaki" infer "$url" tiny_cnn -i "$image" -f npy -o "$tmp/drained" >"$tmp/drain.out" 2>&1 &
    client=$!
    sleep 0.5
    kill -TERM "$server_pid"
    wait "$client"; crc=$?
    wait "$server_pid"; src_rc=$?
    [ $crc -eq 0 ] && cmp -s "$tmp/drained/probabilities.npy" "$tmp/ref/probabilities.npy" && ok ||
      bad "the request in flight at SIGTERM is answered (client exit $crc)" "$(cat "$tmp/drain.out" "$tmp/s2.log")"
    [ $src_rc -eq 0 ] && grep -q "finishing the requests in flight" "$tmp/s2.log" && ok ||
      bad "drained server exits 0 (was $src_rc)" "$(cat "$tmp/s2.log")"
    expect_error "nothing listens after the drain" "cannot reach" "$gaki" infer "$url" tiny_cnn -i "$image" --timeout-ms 2000
  fi

  # --drain-grace-s: after SIGTERM the server reports not ready but still serves, then drains.
  if start_server "$tmp/s3.log" "$model" --drain-grace-s 3; then
    ready() { /usr/bin/python3 -c "import urllib.request as u, sys
try: u.urlopen(sys.argv[1] + '/v2/health/ready', timeout=5); print(200)
except Exception as e: print(getattr(e, 'code', 'down'))" "$url"; }
    [ "$(ready)" = 200 ] && ok || bad "ready before SIGTERM"
    kill -TERM "$server_pid"
    sleep 0.5
    [ "$(ready)" = 400 ] && ok || bad "not ready during the grace period" "$(cat "$tmp/s3.log")"
    expect_ok "still serving during the grace period" "probabilities" "$gaki" infer "$url" tiny_cnn -i "$image"
    wait "$server_pid"; rc=$?
    [ $rc -eq 0 ] && grep -q "not ready; serving 3.0 s more" "$tmp/s3.log" && ok ||
      bad "grace then drain, exit 0 (was $rc)" "$(cat "$tmp/s3.log")"
  fi
fi
# Edge-cloud offloading: the server serves the part after 'pool'; hodu run computes 'pool' here.
expect_error "serve a library's tail" "a compiled library has none" "$gaki" serve "$tmp/cnn2.so" --tail-from pool --port 0
expect_error "serve the tail after a graph input" "cannot cut the model at 'image'" "$gaki" serve "$model" --tail-from image --port 0
if start_server "$tmp/s4.log" "$model" --tail-from pool; then
  grep -q "the part after 'pool'" "$tmp/s4.log" && ok || bad "startup names the tail" "$(cat "$tmp/s4.log")"
  rm -rf "$tmp/split"
  expect_ok "run --remote-from" "ran 3 of 6 nodes here; sending 1 tensors" "$hodu" run "$model" -i image="$image" \
    --remote "$url" --remote-from pool -f npy -o "$tmp/split" -v
  cmp -s "$tmp/split/probabilities.npy" "$tmp/ref/probabilities.npy" && ok || bad "run --remote-from differs from hodu run"
  out=$("$hodu" run "$model" -i image="$image" --remote "$url" --remote-from relu -f json 2>&1)
  grep -q "warning: remote run failed, running locally" <<<"$out" && grep -q '"probabilities"' <<<"$out" && ok ||
    bad "a cut the server does not serve falls back with a warning" "$out"
  kill -TERM "$server_pid"; wait "$server_pid"
fi
summary
