#!/usr/bin/env bash
# The LiteRT tests: a venv (litert/.venv, or $VNPU_LITERT_VENV) with the pinned wheel,
# numpy and pytest; the release cdylibs (delegate, compiler plugin, dispatch library) and the
# `vnpu` binary; then pytest on litert/tests.
# `cargo test` never needs any of this. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${VNPU_LITERT_VENV:-litert/.venv}"
if [ ! -x "$VENV/bin/pytest" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "ai-edge-litert==2.3.0" "numpy==2.4.6" "pytest==9.2.0"
fi
# One invocation, so vnpu-driver is built once with the features both need.
cargo build --release -p vnpu-litert -p vnpu-litert-plugin -p vnpu-litert-dispatch -p vnpu-driver --lib --bins
set +e
"$VENV/bin/pytest" -q litert/tests "$@"
rc=$?
set -e
# 5: no tests collected (a filter matched none) is not a failure of the tests run.
if [ "$rc" -eq 5 ]; then
    echo "litert/tests: no tests collected"
    exit 0
fi
exit "$rc"
