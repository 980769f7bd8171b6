#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60). Not part of CI's default run.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
for t in $(RUSTC_BOOTSTRAP=1 cargo fuzz list); do
  echo "== $t ($secs s)"
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" -- -max_total_time="$secs"
done
