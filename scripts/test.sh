#!/usr/bin/env bash
# The whole test suite, on CPU. Sets itself up first: scripts/setup.sh --test (the demo's
# set-up, kvscope's dev extras, the system tools the tests use, llama.cpp's llama-server and
# the real vLLM).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export TRITON_INTERPRET=1
# Servers, clients and the test process share the cores; one torch thread each avoids
# OpenMP threads spinning against one another (see EngineConfig.num_threads).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Two test processes, one per core of the CI machine: most tests wait on servers and Locust
# runs they start, so two at once take ~16 min where one took ~27. Whole files go to one
# process (--dist loadfile), so module-scoped servers and runs are built once. Pass -n 0 to
# run in one process.
exec .venv/bin/python -m pytest -n "${KVSCOPE_TEST_PROCESSES:-2}" --dist loadfile "$@"
