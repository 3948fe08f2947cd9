#!/usr/bin/env bash
# The plugin system as a user meets it (docs/plugins.md):
#   hodu install --prefix → build examples/plugin against it with find_package(hodu)
#   → hodu plugin add → plugin list / info → run through the plugin == --engine interp
#   → hodu run --pack c twice (second: cache hit) → hodu build -p c → remove, errors.
# Usage: plugin_test.sh HODU_BINARY SOURCE_DIR
set -u
hodu_build=$1
src=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$src/tests/cli/lib.sh"

command -v cmake >/dev/null || { echo "SKIP: cmake not found"; exit 77; }
build_dir=$(cd "$(dirname "$hodu_build")/.." && pwd)
for p in libhodu-compiler-c.so libhodu-runtime-native.so; do
  [ -f "$build_dir/plugins/$p" ] || { echo "FAIL: $build_dir/plugins/$p not built (ninja hodu-compiler-c hodu-runtime-native)"; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export HODU_HOME="$tmp/home"  # never the real ~/.hodu
unset HODU_PLUGIN_PATH

# ---- install ----
expect_ok "install --prefix" "installed hodu .* headers, 2 plugins" "$hodu_build" install --prefix "$tmp/prefix" -q
for f in bin/hodu include/hodu/plugin.h lib/hodu/plugins/libhodu-compiler-c.so lib/hodu/plugins/libhodu-runtime-native.so \
         lib/cmake/hodu/hoduConfig.cmake lib/cmake/hodu/hoduConfigVersion.cmake; do
  [ -f "$tmp/prefix/$f" ] && ok || bad "install did not write $f"
done
hodu="$tmp/prefix/bin/hodu"
expect_ok "installed hodu installs again" "installed hodu" "$hodu" install --prefix "$tmp/prefix2" -q

# ---- the out-of-tree example, against the installed prefix only ----
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if cmake -S "$src/examples/plugin" -B "$tmp/example" "${gen[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release \
     >"$tmp/example.log" 2>&1 && cmake --build "$tmp/example" >>"$tmp/example.log" 2>&1; then ok
else bad "examples/plugin does not build against the installed hodu" "$(tail -20 "$tmp/example.log")"; fi
example="$tmp/example/libhodu-runtime-elementwise.so"

# ---- plugin add / list / info ----
expect_ok "plugin add" "added elementwise 1.0.0 \(runtime\)" "$hodu" plugin add "$example"
[ -f "$HODU_HOME/plugins/libhodu-runtime-elementwise.so" ] && ok || bad "plugin add did not copy into \$HODU_HOME/plugins"
expect_ok "plugin list shows the example" "elementwise +1\.0\.0 +runtime +cpu +hdss +$HODU_HOME/plugins" "$hodu" plugin list
expect_ok "plugin list shows the c pack" "hodu-compiler-c .*compiler .*so,o,a,c" "$hodu" plugin list
expect_ok "plugin list shows built-ins" "interp .*builtin" "$hodu" plugin list
"$hodu" plugin list --json > "$tmp/list.json" 2>/dev/null
if python3 - "$tmp/list.json" <<'PY'; then ok; else bad "plugin list --json"; fi
import json, sys
d = json.load(open(sys.argv[1]))
names = {p["name"]: p for p in d["plugins"]}
assert names["elementwise"]["kind"] == "runtime" and not names["elementwise"]["builtin"], names
assert names["hodu-runtime-native"]["pack"] == "c" and names["interp"]["builtin"]
assert d["errors"] == [], d["errors"]
PY
expect_ok "plugin info" "loads: +hdss" "$hodu" plugin info elementwise
expect_error "plugin info unknown" "no plugin named 'nope'" "$hodu" plugin info nope
echo "not a library" > "$tmp/fake.so"
expect_error "plugin add refuses a non-library" "fake.so: not a shared library" "$hodu" plugin add "$tmp/fake.so"
[ ! -f "$HODU_HOME/plugins/fake.so" ] && ok || bad "a refused plugin was copied"
expect_ok "plugin add again updates in place" "added elementwise" "$hodu" plugin add "$example"
cp "$example" "$tmp/other-name.so"
expect_error "plugin add refuses a second 'elementwise'" "a runtime plugin named 'elementwise' is already installed" \
  "$hodu" plugin add "$tmp/other-name.so"
# A broken file in the plugin folder is reported, and stops nothing.
cp "$tmp/fake.so" "$HODU_HOME/plugins/broken.so"
expect_ok "a broken plugin file is reported by plugin list -v" "broken.so: not a shared library" "$hodu" plugin list -v
expect_ok "... and the others still load" "elementwise +1\.0\.0" "$hodu" plugin list
rm "$HODU_HOME/plugins/broken.so"

# ---- run through the plugin, compare with the interpreter ----
cat > "$tmp/model.hodu" <<'M'
hodu 1
model ir 8 opset 17
graph g(%x: f32[n, 3]) -> (%y: f32[n, 3]) {
  init %b = f32[3] [1, -2, 0.5]
  %s = Add(%x, %b)
  %r = Relu(%s)
  %m = Mul(%r, %x)
  %y = Sub(%m, %x)
}
M
echo '{"dtype": "f32", "shape": [2, 3], "data": [1.5, 1, -1, -5, 3.25, 0]}' > "$tmp/x.json"
run() { "$hodu" run "$tmp/model.hodu" -i x="$tmp/x.json" -f json "$@" 2>"$tmp/stderr"; }  # stdout only
hrun() { "$hodu" run "$tmp/model.hodu" -i x="$tmp/x.json" -f json "$@"; }                 # for expect_*
run --engine interp > "$tmp/interp.json" || bad "run --engine interp" "$(cat "$tmp/stderr")"
run --runtime elementwise > "$tmp/plugin.json" && ok || bad "run --runtime elementwise" "$(cat "$tmp/stderr")"
cmp -s "$tmp/interp.json" "$tmp/plugin.json" && ok || bad "plugin output differs from interp" "$(cat "$tmp/interp.json" "$tmp/plugin.json")"
run --runtime-plugin "$example" > "$tmp/plugin2.json" 2>&1 && cmp -s "$tmp/interp.json" "$tmp/plugin2.json" && ok \
  || bad "run --runtime-plugin PATH" "$(cat "$tmp/plugin2.json" "$tmp/stderr")"
expect_ok "-v names the plugin in the Using line" "Using: runtime elementwise 1\.0\.0$" hrun --runtime elementwise -v
expect_ok "auto-selected engine is said at -v" "Using: engine cpu \(auto-selected\)" hrun -v
run > "$tmp/auto.json" && ! grep -q "Using" "$tmp/stderr" && ok || bad "Using line printed to a non-terminal stderr without -v"
expect_error "the plugin's own error surfaces" "elementwise: node 0 \(Conv\) is not supported" \
  "$hodu" run "$src/examples/models/tiny_cnn.onnx" --runtime elementwise -i image="$src/examples/inputs/tiny_cnn_image.npy"

# ---- the c pack: compile with the compiler plugin, run with the runtime plugin; cached ----
run --pack c -v > "$tmp/pack1.json" && ok || bad "run --pack c" "$(cat "$tmp/stderr")"
grep -q "cache miss" "$tmp/stderr" && ok || bad "first --pack c run is not a cache miss" "$(cat "$tmp/stderr")"
grep -q "Using: compiler hodu-compiler-c .* + runtime hodu-runtime-native .* (pack c)" "$tmp/stderr" && ok \
  || bad "--pack c Using line" "$(cat "$tmp/stderr")"
run --pack c -v > "$tmp/pack2.json" && ok || bad "second run --pack c" "$(cat "$tmp/stderr")"
grep -q "cache hit" "$tmp/stderr" && ! grep -q "compiling with plugin" "$tmp/stderr" && ok \
  || bad "second --pack c run did not hit the cache" "$(cat "$tmp/stderr")"
ls "$HODU_HOME"/cache/*.so >/dev/null 2>&1 && ok || bad "no artifact in \$HODU_HOME/cache"
cmp -s "$tmp/interp.json" "$tmp/pack1.json" && cmp -s "$tmp/pack1.json" "$tmp/pack2.json" && ok \
  || bad "--pack c output differs from interp" "$(cat "$tmp/interp.json" "$tmp/pack1.json")"
run --compiler c --runtime hodu-runtime-native > "$tmp/pair.json" && cmp -s "$tmp/interp.json" "$tmp/pair.json" && ok \
  || bad "--compiler c --runtime hodu-runtime-native" "$(cat "$tmp/stderr")"
# The runtime alone compiles the model it is given (static shapes: the native engine's rule).
sed 's/f32\[n, 3\]/f32[2, 3]/g' "$tmp/model.hodu" > "$tmp/static.hodu"
"$hodu" run "$tmp/static.hodu" -i x="$tmp/x.json" -f json --runtime hodu-runtime-native > "$tmp/native.json" 2>"$tmp/stderr" \
  && cmp -s "$tmp/interp.json" "$tmp/native.json" && ok || bad "--runtime hodu-runtime-native on a model" "$(cat "$tmp/stderr")"

# ---- hodu build -p ----
expect_ok "build -p c" "built .*m.so \(so\) with plugin hodu-compiler-c" "$hodu" build "$tmp/model.hodu" -o "$tmp/m.so" -p c --dim n=2
"$hodu" run "$tmp/m.so" -i x="$tmp/x.json" -f json > "$tmp/built.json" 2>"$tmp/stderr" && cmp -s "$tmp/interp.json" "$tmp/built.json" && ok \
  || bad "the library built by -p c runs" "$(cat "$tmp/stderr" "$tmp/built.json")"
expect_error "build -p unknown" "no compiler plugin or pack named 'nope'" "$hodu" build "$tmp/model.hodu" -o "$tmp/x.so" -p nope

# ---- errors ----
expect_error "--pack unknown" "--pack nope: no plugin of that pack" hrun --pack nope
expect_error "--runtime unknown" "no runtime plugin or pack named 'nope'" hrun --runtime nope
expect_error "--engine with --pack" "--engine cannot be combined" hrun --engine cpu --pack c
expect_error "--runtime-plugin that is not one" "fake.so: not a shared library" hrun --runtime-plugin "$tmp/fake.so"
expect_error "a compiler as --runtime-plugin" "is a compiler plugin, not a runtime" \
  hrun --runtime-plugin "$tmp/prefix/lib/hodu/plugins/libhodu-compiler-c.so"
echo 'colour = "blue"' > "$HODU_HOME/config.toml"
expect_error "bad config.toml" "config.toml: unknown key 'colour'" hrun --pack c
printf 'default_engine = "interp"\n[cache]\nenabled = false\n' > "$HODU_HOME/config.toml"
expect_ok "config default_engine" "Using: engine interp \(config.toml\)" hrun -v
rm "$HODU_HOME/config.toml"
for sub in "plugin list" "plugin info" "plugin add" "plugin remove" "install"; do
  expect_ok "$sub --help" "Usage" "$hodu" $sub --help
done

# ---- remove ----
expect_ok "plugin remove" "removed elementwise" "$hodu" plugin remove elementwise
"$hodu" plugin list > "$tmp/list.txt" 2>&1
! grep -q "^elementwise " "$tmp/list.txt" && ok || bad "removed plugin still listed" "$(cat "$tmp/list.txt")"
expect_error "remove a built-in" "built into hodu" "$hodu" plugin remove interp
expect_error "remove a shipped plugin" "outside" "$hodu" plugin remove hodu-compiler-c

summary
