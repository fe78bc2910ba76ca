#!/usr/bin/env bash
# The whole test suite, on CPU. Sets itself up first (see scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TRITON_INTERPRET=1
# Servers, clients and the test process share the cores; one torch thread each avoids
# OpenMP threads spinning against one another (see EngineConfig.num_threads).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec .venv/bin/python -m pytest "$@"
