#!/usr/bin/env bash
# The GPU checks of the torch backend, in one run that fits a 10-minute window.
#
#   0. preflight (<5 s):   python, torch, CUDA, and which of ecosim's imports are missing;
#   1. cuda_check (~20 s): benchmarks/cuda_check.py, bit-identity of quantize, the row-wise
#      E4M3 Quantizer (scales, codes, values; RTN and SR with the same key) and 3 ECOAdamW
#      steps on the device against NumPy; first, because every later number assumes it;
#   2. quantize (~40 s):   benchmarks/torch_quantize.py, 2^24 values, throughput and identity;
#   3. lm bench 30m (~60 s) and 200m (~120 s, SR only): benchmarks/torch_lm.py, ECO vs master
#      optimizer step time, bytes per parameter held, peak minus activations, tokens/s;
#   4. train (2 x ~50 s):  python -m ecosim.torch.lm, preset 30m, fp8_master_sr and fp8_eco_sr,
#      100 steps each (loss, tokens/s, peak memory in lm.jsonl).
# Estimated total on one H200: about 6 minutes (not yet measured: nothing here has run on a GPU).
# Each section runs under its own `timeout` (defaults below; they sum to 575 s, so a run of
# the whole script ends within 10 minutes) and a failing or timed-out section is reported
# (OK / FAILED rc=N / TIMEOUT) without ending the script.
#
# Needs no network and no install: the repository root goes on PYTHONPATH; the Python is
# $PYTHON (default python3) and must have torch (a CUDA build), numpy and ml_dtypes; ECOSIM_DEPS
# (a folder of extra site-packages, e.g. from `pip install --target`) is prepended if set.
#
# Usage: bash benchmarks/gpu.sh [--device cpu]
#   --device cpu runs the same sections on the CPU, shrunk (a test of this script: ~3 minutes).
# Results in $OUT (default results/gpu): gpu.log (everything), NN-section.log each,
# summary.txt (one status line per section), lm.jsonl (the training runs).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

DEVICE=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=${2:?--device needs a value}; shift 2 ;;
    --device=*) DEVICE=${1#--device=}; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$ROOT${ECOSIM_DEPS:+:$ECOSIM_DEPS}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
: > "$OUT/summary.txt"
rm -f "$OUT/lm.jsonl"
exec > >(tee "$OUT/gpu.log") 2>&1

N=0
FAILED=0
# section NAME TIMEOUT_S COMMAND...: run, log to $OUT/NN-NAME.log, record the outcome.
section() {
  local name=$1 limit=$2; shift 2
  N=$((N + 1))
  local log; log=$(printf '%s/%02d-%s.log' "$OUT" "$N" "$name")
  echo "## $N. $name (timeout ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} status
  case $rc in
    0) status=OK ;;
    124|137) status="TIMEOUT after ${limit}s (rc=$rc)"; FAILED=$((FAILED + 1)) ;;
    *) status="FAILED rc=$rc"; FAILED=$((FAILED + 1)) ;;
  esac
  printf '%-14s %s (%ss)\n' "$name" "$status" "$((SECONDS - t0))" | tee -a "$OUT/summary.txt"
}

if [ "$DEVICE" = cpu ]; then
  # Shrunk: the same code paths, small sizes.
  section preflight 60 "$PY" - cpu <<'PYEOF'
import importlib.util, platform, sys
print("python", sys.version.split()[0], platform.machine())
missing = [m for m in ("torch", "numpy", "ml_dtypes", "scipy", "tqdm", "pytest")
           if importlib.util.find_spec(m) is None]
print("missing modules:", missing or "none")
import torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available())
import ecosim.torch  # noqa: F401  (fails here, clearly, if the repository is not importable)
print("ecosim.torch imports")
PYEOF
  section cuda_check 120 "$PY" benchmarks/cuda_check.py --device cpu --rows 64 --cols 256 --log2n 16
  section quantize 120 "$PY" benchmarks/torch_quantize.py --log2n 16 --repeats 1
  section lm_bench_tiny 120 "$PY" benchmarks/torch_lm.py --device cpu --presets tiny --reps 2 \
    --train-steps 2
  for m in fp8_master_sr fp8_eco_sr; do
    section "train_$m" 90 "$PY" -m ecosim.torch.lm --preset tiny --method "$m" --steps 10 \
      --device cpu --eval-every 5 --eval-batches 2 --quiet --results "$OUT/lm.jsonl"
  done
else
  section preflight "${T_PREFLIGHT:-30}" "$PY" - cuda <<'PYEOF'
import importlib.util, platform, subprocess, sys
print("python", sys.version.split()[0], platform.machine())
try:
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True,
                         timeout=20).stdout.strip())
except Exception as err:  # noqa: BLE001
    print("nvidia-smi:", err)
missing = [m for m in ("torch", "numpy", "ml_dtypes", "scipy", "tqdm", "pytest")
           if importlib.util.find_spec(m) is None]
print("missing modules:", missing or "none")
import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda)
assert torch.cuda.is_available(), "no CUDA device"
print(torch.cuda.get_device_name())
import ecosim.torch  # noqa: F401
print("ecosim.torch imports")
PYEOF
  section cuda_check "${T_CHECK:-60}" "$PY" benchmarks/cuda_check.py --device cuda
  section quantize "${T_QUANTIZE:-75}" "$PY" benchmarks/torch_quantize.py --log2n 24 --repeats 3
  section lm_bench_30m "${T_LM30:-90}" "$PY" benchmarks/torch_lm.py --device cuda --presets 30m \
    --reps 10 --train-steps 10
  section lm_bench_200m "${T_LM200:-160}" "$PY" benchmarks/torch_lm.py --device cuda \
    --presets 200m --modes sr --reps 5 --train-steps 5
  for m in fp8_master_sr fp8_eco_sr; do
    section "train_$m" "${T_TRAIN:-80}" "$PY" -m ecosim.torch.lm --preset 30m --method "$m" \
      --steps "${TRAIN_STEPS:-100}" --device cuda --eval-every 50 --quiet \
      --results "$OUT/lm.jsonl"
  done
fi

if [ -s "$OUT/lm.jsonl" ]; then
  "$PY" - "$OUT/lm.jsonl" <<'PYEOF' || echo "(summary of lm.jsonl failed)"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    n = r["n_params"]["total"]
    tps = r.get("tokens_per_s")
    print(r["method"], "val", r.get("val_loss"), "tok/s", None if tps is None else round(tps),
          "peak B/param", round(r["peak_memory_bytes"] / n, 2), f"({r.get('peak_memory_kind')})",
          "held B/param (linears)", round(r["bytes_per_param"]["held"], 3))
PYEOF
fi
echo "## summary ($FAILED of $N sections not OK; files in $OUT)"
cat "$OUT/summary.txt"
exit $((FAILED > 0))
