#!/usr/bin/env bash
# Write DAPO-Math-17K (shuffled, topic-sorted, easy->hard) and the five evaluation sets as verl
# parquet files. Without hub access pass local copies: --train-file F --eval-file math-500=F ...
#   DATA_DIR=/path/to/data ./prepare_data.sh [--labels labels.jsonl] [more options]
set -euo pipefail
exec ebpo verl prepare-data --out-dir "${DATA_DIR:-data/ebpo}" "$@"
