# One image for every service: api, worker, beat, sweeper, flower.
# The command picks the role (see docker-compose.yml and deploy/k8s/).
#
#   docker build -t agentflow-orchestrator .                 # with the "ops" extra (flower)
#   docker build --build-arg EXTRAS= -t agentflow-orchestrator .   # without it
#
# Node packs outside the image: mount them and list the folders in ORCH_NODE_PATHS.

# -- build: a wheel of this project and the locked requirements (uv.lock) ----------------
FROM python:3.11-slim AS build
ARG EXTRAS=ops
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY orchestrator ./orchestrator
COPY workers ./workers
COPY nodes ./nodes
# The exact versions (with hashes) of uv.lock: an image built today and one built next
# month hold the same dependencies. --frozen: use the lock as it is, never re-resolve.
RUN mkdir -p /wheels && pip install 'uv>=0.5' \
    && uv export --frozen --no-emit-project ${EXTRAS:+--extra ${EXTRAS}} -o /wheels/requirements.txt \
    && pip wheel --no-deps --wheel-dir /wheels .

# -- runtime: the wheel and its runtime dependencies, no dev tools -----------------------
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGNO_TELEMETRY=false \
    ORCH_API_HOST=0.0.0.0 \
    ORCH_API_PORT=8000 \
    ORCH_EXAMPLES_DIR=/opt/orchestrator/examples
COPY --from=build /wheels /wheels
# The example graphs: the console's gallery and the files the Document Loader may read
# (a wheel holds no examples/ folder; ORCH_EXAMPLES_DIR points here).
COPY examples /opt/orchestrator/examples
# bubblewrap, setpriv (util-linux) and libseccomp2: the OS-level boundary of Code nodes and
# stdio MCP servers (nodes/flow/code/SANDBOX.md). The container needs user namespaces:
# run it with a seccomp profile that allows them (see docs/security.md). tini is PID 1:
# each sandbox's bubblewrap init exits as an orphan and must be reaped by an init, else a
# worker that is PID 1 itself collects one zombie per Code node or stdio server.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap libseccomp2 util-linux tini \
    && rm -rf /var/lib/apt/lists/*
# The locked dependencies (hash-checked), then the project's wheel without resolving again.
RUN pip install --require-hashes -r /wheels/requirements.txt \
    && pip install --no-deps /wheels/*.whl \
    && rm -rf /wheels \
    && groupadd --system --gid 10001 orchestrator \
    && useradd --system --uid 10001 --gid orchestrator --create-home --home-dir /home/orchestrator \
       --shell /usr/sbin/nologin orchestrator \
    && mkdir -p /app && chown orchestrator:orchestrator /app
# An empty working directory: imports resolve to the installed package, never a source tree.
WORKDIR /app
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["/usr/bin/tini", "--"]
# Liveness of the API (the other roles override or disable it in compose / k8s).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('ORCH_API_PORT', '8000'), timeout=4)" || exit 1
CMD ["orchestrator", "serve", "--host", "0.0.0.0", "--port", "8000"]
