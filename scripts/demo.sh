#!/usr/bin/env bash
# The main job: load-test the bundled engine (SmolLM2-135M on CPU, in its default weight
# format) with a shared-prefix chat workload and a KV budget small enough to force preemption,
# while the exporter watches the KV cache; then write the results bundle, the advice and the
# report, and print the path. Sets up only what it runs first (scripts/setup.sh, without
# --test: no llama.cpp, vLLM or system packages). Extra arguments go to `kvscope run`, e.g.
# ./scripts/demo.sh --num-blocks 256 (no preemption) or --duration 30s.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out="runs/demo-$(date +%Y%m%d-%H%M%S)"
.venv/bin/kvscope run --workload shared_prefix --model smollm2-135m --num-blocks 64 \
  --users 6 --duration 75s --num-prefixes 4 --prefix-tokens 192 --suffix-tokens 32 \
  --output-tokens 48 --drain-timeout 60 --out "$out" "$@"
echo "results bundle: $out (report: $out/report.html, advice: $out/advice.json)"
echo "load it: .venv/bin/python -c \"from harness.results import load; print(load('$out').summary['headline'])\""
