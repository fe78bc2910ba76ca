# kvscope harness: `kvscope run` (Locust master), `kvscope worker` (Locust workers), analysis,
# reports and the advisor. Base dependencies plus the harness extra (pandas, pyarrow, locust,
# matplotlib); no torch: load tests run against a server elsewhere (`kvscope run --target`).
# Non-root; writes only under /tmp and the working directory /results (mount emptyDirs there
# with a read-only root filesystem).
#
# Build from the repository root:
#   docker build -f deploy/images/harness.Dockerfile -t kvscope-harness:0.1.0 .
# Run a load test against a server, bundle into ./results:
#   docker run --rm -v "$PWD/results:/results" kvscope-harness:0.1.0 \
#       run --target http://gpu-box:8000 --workload chat --duration 2m
#
# Base image: see exporter.Dockerfile (same pinned python:3.11-slim; override PYTHON_IMAGE).
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/kvscope
COPY . /src
RUN /opt/kvscope/bin/pip install "/src[harness]"

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 kvscope \
 && useradd --uid 10001 --gid kvscope --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin kvscope \
 && install -d -o 10001 -g 10001 /results
COPY --from=build /opt/kvscope /opt/kvscope
ENV PATH=/opt/kvscope/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
USER 10001:10001
WORKDIR /results
# 5557: the Locust master's port for workers (`kvscope run --master-bind 0.0.0.0:5557`).
EXPOSE 5557
ENTRYPOINT ["kvscope"]
CMD ["--help"]
