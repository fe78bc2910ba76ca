#!/usr/bin/env bash
# The whole test suite, on CPU. Sets itself up first (see scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TRITON_INTERPRET=1
exec .venv/bin/python -m pytest "$@"
