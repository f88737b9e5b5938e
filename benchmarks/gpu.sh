#!/usr/bin/env bash
# The GPU checks of the torch backend, in one short run (~5 minutes on an H100/H200):
#   1. ecosim.torch.quantize on CUDA: throughput and bit-identity with NumPy (2^24 values);
#   2. ECO vs master AdamW on the 30M and 200M presets: optimizer step time (target: ECO
#      <= 1.1x master), bytes per parameter held and max allocated (target: the 12 -> 9
#      bytes/param reduction visible), tokens/s of full training steps;
#   3. a 200-step training run of the 30M preset under ECO+SR and master+SR (loss, tokens/s,
#      peak memory in the results file).
# Needs a Python with a CUDA build of torch and ecosim importable (pip install -e . --no-deps).
# Results go to $OUT (default /tmp/ecosim-gpu): gpu.log, lm.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-/tmp/ecosim-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  "$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('torch', torch.__version__, torch.cuda.get_device_name())"
  echo "## 1. quantize on CUDA"
  "$PY" benchmarks/torch_quantize.py --log2n 24 --repeats 5
  echo "## 2. ECO vs master step, memory, tokens/s"
  "$PY" benchmarks/torch_lm.py --device cuda --presets 30m 200m --reps 10 --train-steps 10
  echo "## 3. 30M, 200 steps"
  for m in fp8_master_sr fp8_eco_sr; do
    "$PY" -m ecosim.torch.lm --preset 30m --method "$m" --steps 200 --device cuda \
      --eval-every 100 --quiet --results "$OUT/lm.jsonl"
  done
  "$PY" - "$OUT/lm.jsonl" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["method"], "val", r["val_loss"], "tok/s", round(r["tokens_per_s"]),
          "peak B/param", round(r["peak_memory_bytes"] / r["n_params"]["total"], 2),
          "held B/param (linears)", round(r["bytes_per_param"]["held"], 3))
PYEOF
} 2>&1 | tee "$OUT/gpu.log"
