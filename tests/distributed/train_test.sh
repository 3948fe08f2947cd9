#!/usr/bin/env bash
# usage: train_test.sh HODUGAKI SOURCE_DIR
# hodugaki train as a user runs it, on sklearn's digits and the digits CNN (a forward graph with
# its mean cross-entropy loss, exported by Debian's torch: make_digits.py):
#  - one process, file order, equals PyTorch 1.13's SGD steps (losses and weights to 1e-5);
#  - mpirun -np 2 with --batch B equals one process with --batch 2B and the same seed (losses and
#    final weights to 1e-5 relative), for SGD with momentum and one bucket, SGD with small buckets
#    overlapped with the backward, and Adam;
#  - a run killed mid-way (one rank SIGKILLed; the launcher SIGTERMed) resumes from its last
#    checkpoint to the uninterrupted run's final weights bit for bit; a run resumed on 1 rank with
#    the same global batch matches 2 ranks throughout to 1e-5;
#  - bad arguments, a missing loss name, a loss that is not one number, a resume that does not fit
#    exit 1 with a clear message, printed once under mpirun.
# Skips (77), saying why, without mpirun or without Debian's torch and sklearn. Prints "N passed, M failed".
set -u
gaki=$1
src=$2
source "$src/tests/cli/lib.sh"
command -v mpirun >/dev/null || { echo "skipped: mpirun is missing (Debian's openmpi-bin; scripts/setup.sh)"; exit 77; }
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_WAIT_POLICY=passive
py=/usr/bin/python3
$py "$src/tests/distributed/make_digits.py" "$tmp" --torch-steps 40 --batch 32 --lr 0.05 --momentum 0.9 >"$tmp/make.log" 2>&1
rc=$?
[ $rc -eq 77 ] && { cat "$tmp/make.log"; exit 77; }
[ $rc -ne 0 ] && { echo "make_digits.py failed:"; cat "$tmp/make.log"; exit 1; }
model=$tmp/digits_cnn.onnx
data=$tmp/digits.npz
mpi() { mpirun --oversubscribe --allow-run-as-root -np "$@"; }
common=(--loss loss --data "$data" --threads 1 --log-every 1000)

# compare NAME A.onnx A.npy B.onnx B.npy TOL : losses and every weight of B within TOL (relative
# to the largest magnitude of each) of A's; TOL 0: bit for bit.
compare() {
  local name=$1 out
  out=$($py - "$2" "$3" "$4" "$5" "$6" <<'PY' 2>&1
import sys
import numpy as np
import onnx
from onnx import numpy_helper
a_model, a_losses, b_model, b_losses, tol = sys.argv[1:6]
tol = float(tol)
def weights(p):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(p).graph.initializer}
def rel(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))
la, lb = np.load(a_losses), np.load(b_losses)
assert la.shape == lb.shape, f"{la.shape} losses vs {lb.shape}"
worst = [("losses", float(np.max(np.abs(la - lb) / np.abs(lb))))]
wa, wb = weights(a_model), weights(b_model)
assert wa.keys() == wb.keys()
for k in wa:
    if wa[k].dtype.kind == "f":
        worst.append((k, rel(wa[k], wb[k]) if tol else float(not np.array_equal(wa[k], wb[k]))))
bad = [(k, d) for k, d in worst if d > tol]
print(("FAIL " if bad else "ok ") + ", ".join(f"{k} {d:.2e}" for k, d in worst))
sys.exit(1 if bad else 0)
PY
)
  if [ $? -eq 0 ]; then ok; echo "$name: $out"; else bad "$name" "$out"; fi
}

# --- one process against PyTorch (no shuffling: the batches in file order, as the reference) ---
expect_ok "one process trains" "step 40/40" "$gaki" train "$model" "${common[@]}" --batch 32 --steps 40 --lr 0.05 \
  --momentum 0.9 --no-shuffle -o "$tmp/one.onnx" --losses "$tmp/one.npy"
$py - "$tmp/torch_reference.npz" "$tmp/torch.onnx" "$tmp/torch.npy" "$model" <<'PY'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
ref, out_model, out_losses, model = sys.argv[1:5]
r = np.load(ref)
m = onnx.load(model)
for init in m.graph.initializer:
    if "model." + init.name.split("model.", 1)[-1] in r.files and init.name in r.files:
        init.CopyFrom(numpy_helper.from_array(r[init.name], init.name))
onnx.save(m, out_model)
np.save(out_losses, r["losses"])
PY
compare "one process = PyTorch 1.13 SGD (40 steps)" "$tmp/one.onnx" "$tmp/one.npy" "$tmp/torch.onnx" "$tmp/torch.npy" 1e-5

# --- two ranks = one process with twice the batch ---
for cfg in "sgd-one-bucket|--momentum 0.9" "sgd-buckets|--momentum 0.9 --bucket-mb 0.02" \
           "sgd-no-overlap|--momentum 0.9 --bucket-mb 0.02 --no-overlap" "adam|--optimizer adam"; do
  name=${cfg%%|*}
  read -r -a extra <<<"${cfg#*|}"
  lr=0.05
  [ "$name" = adam ] && lr=0.002
  expect_ok "$name: 1 process, batch 32" "wrote" "$gaki" train "$model" "${common[@]}" --batch 32 --steps 100 \
    --lr $lr --seed 3 "${extra[@]}" -o "$tmp/$name.1.onnx" --losses "$tmp/$name.1.npy"
  expect_ok "$name: 2 ranks, batch 16" "on 2 ranks" mpi 2 "$gaki" train "$model" "${common[@]}" --batch 16 \
    --steps 100 --lr $lr --seed 3 "${extra[@]}" -o "$tmp/$name.2.onnx" --losses "$tmp/$name.2.npy"
  compare "$name: -np 2 = one process with 2x the batch (100 steps)" "$tmp/$name.1.onnx" "$tmp/$name.1.npy" \
    "$tmp/$name.2.onnx" "$tmp/$name.2.npy" 1e-5
done
out=$(mpi 2 "$gaki" train "$model" "${common[@]}" --batch 16 --steps 3 --lr 0.05 --bucket-mb 0.02 -o "$tmp/o.onnx" 2>&1)
grep -q "3 gradient buckets.*overlapped with the backward" <<<"$out" && ok || bad "small buckets overlap" "$out"

# --- killed and resumed ---
# The uninterrupted run, then the same run killed after its first checkpoint (step 100), then resumed
# (5000 steps: on a loaded machine the watcher may see step 100 late; the run must still be going).
run=("$gaki" train "$model" "${common[@]}" --batch 16 --steps 5000 --lr 0.02 --momentum 0.9 --seed 1 --every 100)
expect_ok "uninterrupted run" "step 5000/5000" mpi 2 "${run[@]}" --checkpoint "$tmp/full" -o "$tmp/full.onnx" \
  --losses "$tmp/full.npy"
# kill_after NAME DIR SIGNAL WHO: starts the run, waits for DIR/step-00000100, sends SIGNAL to a rank
# (WHO=rank) or to mpirun (WHO=launcher); checks that the run stopped early and unsuccessfully.
kill_after() {
  local name=$1 dir=$2 sig=$3 who=$4
  mpi 2 "${run[@]}" --checkpoint "$dir" -o "$tmp/$name.onnx" >"$tmp/$name.log" 2>&1 &
  local launcher=$!
  pids+=("$launcher")
  for _ in $(seq 1 600); do
    [ -d "$dir/step-00000100" ] && break
    sleep 0.05
  done
  local victim=$launcher
  [ "$who" = rank ] && victim=$(pgrep -P "$launcher" | tail -1)
  kill -"$sig" "$victim"
  wait "$launcher"
  local rc=$?
  sleep 0.5
  for p in $(pgrep -f "$dir" || true); do kill -KILL "$p" 2>/dev/null; done  # ranks a launcher left behind
  if [ $rc -ne 0 ] && [ ! -d "$dir/step-00005000" ]; then ok; else bad "$name: the run was not stopped (exit $rc)" "$(tail -5 "$tmp/$name.log")"; fi
  echo "$name: stopped (exit $rc) at $(ls "$dir" | tr '\n' ' ')"
}
kill_after "rank SIGKILL" "$tmp/cut1" KILL rank
expect_ok "resume after a rank was killed" "resumed from .*step-0000([0-4][0-9])00 at step" mpi 2 "${run[@]}" \
  --checkpoint "$tmp/cut1" --resume -o "$tmp/cut1.onnx" --losses "$tmp/cut1.npy"
compare "killed rank, resumed = uninterrupted (bit for bit)" "$tmp/full.onnx" "$tmp/full.npy" "$tmp/cut1.onnx" \
  "$tmp/cut1.npy" 0
kill_after "launcher SIGTERM" "$tmp/cut2" TERM launcher
expect_ok "resume after the launcher was stopped" "resumed from" mpi 2 "${run[@]}" --checkpoint "$tmp/cut2" --resume \
  -o "$tmp/cut2.onnx" --losses "$tmp/cut2.npy"
compare "stopped launcher, resumed = uninterrupted (bit for bit)" "$tmp/full.onnx" "$tmp/full.npy" "$tmp/cut2.onnx" \
  "$tmp/cut2.npy" 0

# Resumed on another number of ranks with the same global batch: the same rows, sums in another order.
short=("$gaki" train "$model" "${common[@]}" --lr 0.02 --momentum 0.9 --seed 1)
expect_ok "2 ranks, 200 steps" "step 200/200" mpi 2 "${short[@]}" --batch 16 --steps 200 -o "$tmp/r2.onnx" \
  --losses "$tmp/r2.npy"
expect_ok "2 ranks, first 100 steps" "step 100/100" mpi 2 "${short[@]}" --batch 16 --steps 100 --checkpoint "$tmp/rn" \
  -o "$tmp/rn.onnx"
expect_ok "resumed on 1 rank with --batch 32" "resumed from .*step-00000100 at step 100" "${short[@]}" --batch 32 \
  --steps 200 --checkpoint "$tmp/rn" --resume -o "$tmp/r1.onnx" --losses "$tmp/r1.npy"
compare "resumed on 1 rank = 2 ranks throughout (1e-5)" "$tmp/r1.onnx" "$tmp/r1.npy" "$tmp/r2.onnx" "$tmp/r2.npy" 1e-5

# --- errors ---
# expect_usage NAME REGEX CMD... : a command-line mistake: exit 1-127 and REGEX in the output
expect_usage() {
  local name=$1 pattern=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -Eq -- "$pattern" <<<"$out"; then ok; else bad "$name (exit $rc)" "$out"; fi
}
train=("$gaki" train "$model" --loss loss --data "$data" -o "$tmp/e.onnx")
expect_usage "missing --loss" "--loss is required" "$gaki" train "$model" --data "$data" --batch 16 --steps 5 --lr 0.1
expect_usage "batch 0" "--batch: Value 0 not in range" "${train[@]}" --batch 0 --steps 5 --lr 0.1
expect_usage "bad optimizer" "--optimizer: sgdd not in" "${train[@]}" --batch 16 --steps 5 --lr 0.1 --optimizer sgdd
base=("${train[@]}" --steps 5 --lr 0.1)
expect_error "unknown loss" "--loss 'los': the model has no value of that name \(its outputs: 'loss'\)" \
  "$gaki" train "$model" --loss los --data "$data" --batch 16 --steps 5 --lr 0.1
expect_error "loss not one number" "not one number: reduce it to its mean" "$gaki" train "$model" \
  --loss /model/fc2/Gemm_output_0 --data "$data" --batch 16 --steps 5 --lr 0.1
expect_error "lr 0" "--lr must be > 0" "${train[@]}" --batch 16 --steps 5 --lr 0
expect_error "missing data file" "--data '$tmp/none.npz': no such file" "$gaki" train "$model" --loss loss \
  --data "$tmp/none.npz" --batch 16 --steps 5 --lr 0.1
expect_error "missing model" "model '$tmp/none.onnx' does not exist" "$gaki" train "$tmp/none.onnx" --loss loss \
  --data "$data" --batch 16 --steps 5 --lr 0.1
$py -c "import numpy as np; d=np.load('$data'); np.savez('$tmp/renamed.npz', x=d['x'], y=d['labels']); np.savez('$tmp/i32.npz', x=d['x'], labels=d['labels'].astype('int32'))"
expect_error "labels under another name" "has no array 'labels' for the model input 'labels' \(its arrays: 'x', 'y'\).*--labels" \
  "$gaki" train "$model" --loss loss --data "$tmp/renamed.npz" --batch 16 --steps 5 --lr 0.1
expect_ok "--labels names the array" "step 5/5" "$gaki" train "$model" --loss loss --data "$tmp/renamed.npz" --labels y \
  --batch 16 --steps 5 --lr 0.1 -o "$tmp/e.onnx"
expect_error "--labels of a missing array" "--labels 'z': .* has no array of that name" "$gaki" train "$model" \
  --loss loss --data "$tmp/renamed.npz" --labels z --batch 16 --steps 5 --lr 0.1
expect_error "labels of another dtype" "'labels' \(for the model input 'labels'\) is i32\[1797\], the input is i64\[batch\]" \
  "$gaki" train "$model" --loss loss --data "$tmp/i32.npz" --batch 16 --steps 5 --lr 0.1
expect_error "a batch larger than the data" "fewer than one global batch \(1000 per rank x 2 ranks = 2000\)" \
  mpi 2 "${base[@]}" --batch 1000 --input x=x
expect_error "bad --input" "--input 'x': expected INPUT=ARRAY" "${base[@]}" --batch 16 --input x
expect_error "--input of an unknown model input" "'z=x': the model has no input 'z'" "${base[@]}" --batch 16 --input z=x
out=$("${base[@]}" --batch 16 --checkpoint /proc/nope 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: --checkpoint '/proc/nope': cannot create" <<<"$out" && ! grep -q "step 1/" <<<"$out" && ok ||
  bad "a checkpoint folder that cannot be made fails before training (exit $rc)" "$out"
expect_error "--resume without --checkpoint" "--resume needs --checkpoint" "${base[@]}" --batch 16 --resume
expect_error "a used checkpoint folder without --resume" "already holds checkpoints \(step-00005000\): pass --resume" \
  "${base[@]}" --batch 32 --checkpoint "$tmp/full"
expect_error "resume with another global batch" "written by a run with global_batch 32, this run has 64" \
  "${base[@]}" --batch 64 --seed 1 --momentum 0.9 --checkpoint "$tmp/full" --resume
out=$(mpi 2 "$gaki" train "$model" --loss los --data "$data" --batch 16 --steps 5 --lr 0.1 2>&1); rc=$?
n=$(grep -c "^error:" <<<"$out")
[ $rc -ne 0 ] && [ "$n" -eq 1 ] && grep -q "no value of that name" <<<"$out" && ok ||
  bad "under mpirun an error of both ranks is printed once (exit $rc, $n lines)" "$out"
out=$(mpi 2 "$gaki" train "$model" --data "$data" --batch 16 --steps 5 --lr 0.1 2>&1); rc=$?
n=$(grep -c "is required" <<<"$out")
[ $rc -ne 0 ] && [ "$n" -eq 1 ] && ok || bad "under mpirun a usage error is printed once (exit $rc, $n lines)" "$out"
# The ranks that did not fail exit 0 and leave the job's status to the reporting rank: a second
# nonzero exit lets mpirun kill that rank before it prints why (seen in CI as a lost error line).
for case in "usage:--batch 0" "data:--batch 1000"; do
  rm -f "$tmp/rank-exit-"*
  mpi 2 bash -c '"$@"; rc=$?; echo $rc >"'"$tmp"'/rank-exit-$OMPI_COMM_WORLD_RANK"; exit $rc' _ \
    "${base[@]}" ${case#*:} --input x=x >/dev/null 2>&1
  codes="$(cat "$tmp/rank-exit-0" 2>/dev/null)/$(cat "$tmp/rank-exit-1" 2>/dev/null)"
  case $codes in [1-9]*/0) ok ;; *) bad "under mpirun (${case%%:*} error) rank 0 reports and fails, rank 1 exits 0 (exits $codes)" ;; esac
done
expect_ok "train --help" "--checkpoint.*--resume" bash -c "$gaki train --help | tr '\n' ' '"
expect_ok "hodugaki --help lists train" "train" "$gaki" --help
summary
