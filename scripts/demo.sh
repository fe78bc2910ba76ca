#!/usr/bin/env bash
# The main job against the bundled engine. Sets itself up first (see scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/kvscope engine generate --model smollm2-135m --num-blocks 64 "$@"
