#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60). Not part of CI's default run.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
# Targets that read conformance-case lines start from real cases (one per file).
for t in corpus_case prepare_execute; do
  dir="corpus/$t"
  if [ ! -d "$dir" ] || [ -z "$(ls -A "$dir")" ]; then
    mkdir -p "$dir"
    for f in ../conformance/V1_*.jsonl.gz; do
      zcat "$f" | awk 'NR % 25 == 1' | head -100 | split -l 1 - "$dir/$(basename "$f" .jsonl.gz)-"
    done
  fi
done
# The .tflite importer starts from the shipped models.
if [ ! -d corpus/tflite_import ] || [ -z "$(ls -A corpus/tflite_import)" ]; then
  mkdir -p corpus/tflite_import
  cp ../models/*.tflite corpus/tflite_import/
fi
for t in $(RUSTC_BOOTSTRAP=1 cargo fuzz list); do
  echo "== $t ($secs s)"
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" -- -max_total_time="$secs"
done
