# kvscope exporter: the sidecar alone. Base dependencies only (aiohttp, prometheus-client, and
# msgspec + pyzmq for --kv-events):
# no torch, pandas, locust or numpy. Runs as a non-root user and writes nothing at run time
# (read-only root filesystem friendly; mount an emptyDir at /tmp if your runtime wants one).
#
# Build from the repository root:
#   docker build -f deploy/images/exporter.Dockerfile -t kvscope-exporter:0.1.0 .
#   podman build -f deploy/images/exporter.Dockerfile -t kvscope-exporter:0.1.0 .
# Run:
#   docker run --rm -p 9400:9400 kvscope-exporter:0.1.0 --listen 0.0.0.0:9400 \
#       --target http://host.docker.internal:8000/metrics
#
# The base image is python:3.11-slim (Debian bookworm), pinned by the digest of its
# multi-arch index. To move to a newer build, look the digest up and pass it:
#   docker buildx imagetools inspect python:3.11-slim        # the "Digest:" line
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest> ...
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/kvscope
COPY . /src
RUN /opt/kvscope/bin/pip install /src

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 kvscope \
 && useradd --uid 10001 --gid kvscope --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin kvscope
COPY --from=build /opt/kvscope /opt/kvscope
ENV PATH=/opt/kvscope/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KVSCOPE_HEALTHZ_URL=http://127.0.0.1:9400/healthz
USER 10001:10001
EXPOSE 9400
# Kubernetes ignores HEALTHCHECK (the manifests set probes on /healthz instead); Docker and
# Podman use it. Change KVSCOPE_HEALTHZ_URL together with --listen.
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['KVSCOPE_HEALTHZ_URL'], timeout=2)"]
ENTRYPOINT ["kvscope", "exporter"]
# Arguments replace this: give --listen 0.0.0.0:9400 (the default, 127.0.0.1, is unreachable
# from outside the container) and one --target per server.
CMD ["--help"]
