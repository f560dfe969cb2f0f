#!/usr/bin/env bash
# The prepared GPU check of the Triton path (issue 6), for a session lent a GPU machine:
#   device run, carry nothing, command: bash gpu/h200_tune.sh   (timeout_s 600)
# 1. every generated Triton family against torch at real sizes, timed (gpu/check_triton.py);
# 2. a tune of the serving matrix on the local GPU, one tune file per (model, shape).
# Everything lands under $OUT (at most 8 files come back): copy the tune files into freezes/,
# then `emmy db refresh-freeze --freeze-dir freezes/` folds them in. Needs only torch, triton,
# numpy, typer and rich, which the device image has; budgets keep it well under 10 minutes.
set -u
OUT=${OUT:-out}
PY=${PY:-python3}
BUDGET=${BUDGET:-6}  # Triton compiles a variant in seconds: keep the whole run under 10 minutes
mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 EMMY_BUILD_CACHE=/tmp/emmy-build
log="$OUT/run.log"
{
  "$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__,
             "cuda", torch.cuda.is_available() and torch.cuda.get_device_name())'
  timeout 150 "$PY" gpu/check_triton.py "$OUT/check.json" --quick || echo "check_triton exit $?"
  for case in "llama_block B=1,S=128" "llama_block B=4,S=512" "mlp B=8,S=256"; do
    set -- $case
    echo "== tune $1 $2 $(date +%T)"
    timeout 140 "$PY" -m emmy_core.cli.main tune --model "$1" --shape "$2" --card local --setting deploy \
      --budget "$BUDGET" --seed 0 --timeout 30 --tune-file "$OUT" --no-progress || echo "tune exit $?"
  done
} 2>&1 | tee "$log"
