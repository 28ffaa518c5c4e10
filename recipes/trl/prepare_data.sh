#!/usr/bin/env bash
# The data of the TRL recipes: `ebpo verl prepare-data` (it needs no verl) writes DAPO-Math-17K and
# the evaluation sets as parquet files into DATA_DIR, then every training order the recipes read
# gets a directory that TRL's script loads as is (`dataset_name: DATA_DIR/trl/<order>`):
# train.parquet (DAPO-Math-17K in that order) and test.parquet (AIME 2024), symbolic links to the
# prepared files. See recipes/trl/README.md, "Data".
#   DATA_DIR=/path/to/data recipes/trl/prepare_data.sh [--labels labels.jsonl] [prepare-data options]
set -euo pipefail
DATA_DIR="${DATA_DIR:-data/ebpo}"
ebpo verl prepare-data --out-dir "$DATA_DIR" "$@"
if [ ! -f "$DATA_DIR/aime24.parquet" ]; then
  echo "prepare_data.sh: no $DATA_DIR/aime24.parquet (the recipes validate on it: keep aime-2024 in --eval)" >&2
  exit 2
fi
for order in file shuffle; do
  mkdir -p "$DATA_DIR/trl/$order"
  ln -sfn "../../dapo_math_17k.$order.parquet" "$DATA_DIR/trl/$order/train.parquet"
  ln -sfn "../../aime24.parquet" "$DATA_DIR/trl/$order/test.parquet"
  echo "wrote $DATA_DIR/trl/$order: train.parquet -> dapo_math_17k.$order.parquet, test.parquet -> aime24.parquet"
done
