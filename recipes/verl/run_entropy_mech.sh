#!/usr/bin/env bash
# Paper run "entropy_mech" on verl (Qwen3-8B, DAPO-Math-17K, G=4, 4 nodes x 8 GPUs); see recipes/verl/README.md.
#   DATA_DIR=/path/to/data MODEL=/path/to/Qwen3-8B ./run_entropy_mech.sh [--dry-run] [hydra overrides...]
set -euo pipefail
exec ebpo verl recipe entropy_mech --data-dir "${DATA_DIR:-data/ebpo}" ${MODEL:+--model "$MODEL"} "$@"
