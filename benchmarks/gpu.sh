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
#   4. lm_protocol (~2 min, estimated: never measured): benchmarks/lm_protocol.py, the lm
#      figures' protocol (preset micro, every method x 3 of its 5 seeds, 650 steps each, the same
#      settings as `make figures`) on CUDA, 12 runs at a time, into lm_protocol.jsonl with
#      torch.cuda.max_memory_allocated per run;
#      then, if matplotlib is importable, the lm_table/lm_pareto figures from that file.
# Estimated total on one H200: about 6 minutes (not yet measured: nothing here has run on a GPU).
# Each section runs under its own `timeout` (defaults below; with the figures they sum to
# 595 s, so a run of the whole script ends within 10 minutes) and a failing or timed-out
# section is reported (OK / FAILED rc=N / TIMEOUT) without ending the script.
#
# Needs no network and no install: the repository root goes on PYTHONPATH; the Python is
# $PYTHON (default python3) and must have torch (a CUDA build), numpy and ml_dtypes; ECOSIM_DEPS
# (a folder of extra site-packages, e.g. from `pip install --target`) is prepended if set.
#
# Usage: bash benchmarks/gpu.sh [--device cpu]
#   --device cpu runs the same sections on the CPU, shrunk (a test of this script: ~4 minutes idle).
# Results in $OUT (default results/gpu): gpu.log (everything), NN-section.log each,
# summary.txt (one status line per section), lm_protocol.jsonl (the training runs; plot with
# `ecosim figures --only lm_table lm_pareto --set lm.results_file=$OUT/lm_protocol.jsonl`) and
# figures/ (those two figures, when matplotlib is there).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

DEVICE=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=${2:?--device needs a value}; shift 2 ;;
    --device=*) DEVICE=${1#--device=}; shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
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
rm -f "$OUT/lm_protocol.jsonl"
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
  section lm_protocol 400 "$PY" benchmarks/lm_protocol.py --device cpu --jobs 2 \
    --preset tiny --steps 6 --methods bf16_master fp8_eco_sr --seeds 2 \
    --extra=--eval-batches=2 --out "$OUT/lm_protocol.jsonl"
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
  section lm_bench_200m "${T_LM200:-180}" "$PY" benchmarks/torch_lm.py --device cuda \
    --presets 200m --modes sr --reps 5 --train-steps 5
  section lm_protocol "${T_PROTOCOL:-170}" "$PY" benchmarks/lm_protocol.py --device cuda \
    --jobs "${PROTOCOL_JOBS:-12}" --seeds "${PROTOCOL_SEEDS:-3}" --out "$OUT/lm_protocol.jsonl"
fi
if [ -s "$OUT/lm_protocol.jsonl" ] && "$PY" -c "import matplotlib" 2>/dev/null; then
  section lm_figures 45 "$PY" -m ecosim figures --only lm_table lm_pareto --no-progress \
    --set "lm.results_file=$OUT/lm_protocol.jsonl" --out "$OUT/figures" --cache "$OUT/cache"
fi

if [ -s "$OUT/lm_protocol.jsonl" ]; then
  "$PY" - "$OUT/lm_protocol.jsonl" <<'PYEOF' || echo "(summary of lm_protocol.jsonl failed)"
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
