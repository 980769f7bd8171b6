#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60), then prints a table: target,
# executions, crashes (new files in fuzz/artifacts/TARGET). Not part of CI's default run.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# RUNS=N also stops each target after N executions (the campaign: RUNS=10000000 with a long
# SECONDS). Set NICE=19 to fuzz only on idle CPU.
# Exit status 1 when any target crashed. Logs: fuzz/logs/TARGET.log.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
# Targets that read conformance-case lines start from real cases (one per file), the short
# ones (under 4 KiB: nearly nine in ten) so that each execution stays fast.
for t in corpus_case prepare_execute; do
  dir="corpus/$t"
  if [ ! -d "$dir" ] || [ -z "$(ls -A "$dir")" ]; then
    mkdir -p "$dir"
    for f in ../conformance/V1_*.jsonl.gz; do
      # awk reads to the end (no `head`): an early reader's exit would SIGPIPE zcat.
      zcat "$f" | awk 'length($0) < 4096 { if (k++ % 10 == 0 && n++ < 100) print }' |
        split -l 1 - "$dir/$(basename "$f" .jsonl.gz)-"
    done
  fi
done
# The .tflite importer starts from the shipped models cut into one-operator models (whole
# models cost milliseconds an execution, one operator microseconds): each seed alone, and
# behind the 8-byte header of a shape mutation (tensor 0, dimension 1, set to 2^16).
if [ ! -d corpus/tflite_import ] || [ -z "$(ls -A corpus/tflite_import)" ]; then
  mkdir -p corpus/tflite_import
  (cd .. && cargo run --release -q -p vnpu-driver --example tflite_seeds -- \
    fuzz/corpus/tflite_import models/*.tflite)
  for m in corpus/tflite_import/op-*.tflite; do
    { printf '\000\001\002\000\000\000\000\000'; cat "$m"; } > "corpus/tflite_import/shape-$(basename "$m")"
  done
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(RUSTC_BOOTSTRAP=1 cargo fuzz list)
fi
mkdir -p logs
# Crash, leak, timeout and out-of-memory reproducers in the target's artifacts directory
# (not slow-unit-* files: an execution that was merely slow, e.g. while the fuzzer was
# stopped with SIGSTOP), 0 before the first.
artifacts() {
  if [ -d "artifacts/$1" ]; then find "artifacts/$1" -type f ! -name 'slow-unit-*' | wc -l; else echo 0; fi
}
rows=()
failed=0
for t in "${targets[@]}"; do
  echo "== $t ($secs s)" >&2
  before=$(artifacts "$t")
  status=0
  # Targets that run the device or a large decoder spend most of each execution in
  # libFuzzer's entropic bookkeeping (a quarter of the time over their ~35k features), in
  # LeakSanitizer's scan (the device's threads keep allocations across executions, so it
  # runs after nearly every one) and in ASan's fake stacks; without them they run 3-4x
  # faster. ASan's checks of every access stay on.
  extra=()
  asan=${ASAN_OPTIONS:-}
  case "$t" in
    prepare_execute | cache_load | corpus_case | tflite_import)
      extra=(-entropic=0 -detect_leaks=0)
      asan=${asan:+$asan:}detect_stack_use_after_return=0 ;;
  esac
  ASAN_OPTIONS=$asan RUSTC_BOOTSTRAP=1 nice -n "${NICE:-0}" cargo fuzz run "$t" -- \
    -max_total_time="$secs" ${RUNS:+-runs="$RUNS"} -print_final_stats=1 "${extra[@]}" \
    > "logs/$t.log" 2>&1 || status=$?
  after=$(artifacts "$t")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' | tail -1 || true)
  crashes=$((after - before))
  if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes="? (exit $status, see logs/$t.log)"; fi
  [ "$status" -ne 0 ] && failed=1
  rows+=("$(printf '%-20s %14s  %s' "$t" "${execs:-?}" "$crashes")")
done
printf '%-20s %14s  %s\n' target execs crashes
printf '%s\n' "${rows[@]}"
exit "$failed"
