# webagent's RL environment as an OpenEnv server (`webagent env serve`): many sessions per container
# on one browser pool, MiniWoB++ included. Build from the repository root:
#   docker build -f docker/env.Dockerfile -t webagent-env .
#   export WEBAGENT_ENV_AUTH_TOKEN="$(openssl rand -hex 32)"
#   docker run --rm --init --shm-size=2g -p 8000:8000 -e WEBAGENT_ENV_AUTH_TOKEN webagent-env --tasks miniwob
# It listens on all interfaces of the container, so it does not start without a token: the variable
# above, or a mounted file (-v ./tokens:/run/secrets/tokens:ro ... --auth-token-file /run/secrets/tokens,
# one token a line). Then WebagentClient(base_url="http://localhost:8000") with the same
# WEBAGENT_ENV_AUTH_TOKEN (or token=...); other clients send "Authorization: Bearer $TOKEN". GET /health
# needs no token (the health check below). Web tasks rewarded by a validator need its endpoint:
# -e WEBAGENT_VALIDATOR_BASE_URL=... and --reward validator (docs/training.md).
FROM debian:bookworm-slim

# 1. System packages: Chromium + fonts, libatomic1 (Playwright's Node driver), Python, CA certificates.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      chromium fonts-liberation fonts-dejavu-core libatomic1 \
      python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin webagent \
 && mkdir -p /work \
 && chown webagent:webagent /work

ENV VIRTUAL_ENV=/opt/webagent \
    PATH=/opt/webagent/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# 2. Python dependencies: the [project] dependencies and what the server needs of the rl extra
#    (openenv-core, miniwob's pages, gymnasium; not verifiers, which trainers run on their side).
COPY pyproject.toml /tmp/webagent-src/pyproject.toml
RUN python3 -m venv "$VIRTUAL_ENV" \
 && python3 -c 'import sys, tomllib; d = tomllib.load(open(sys.argv[1], "rb")); print("\n".join(d["project"]["dependencies"] + [r for r in d["project"]["optional-dependencies"]["rl"] if not r.startswith("verifiers")]))' \
      /tmp/webagent-src/pyproject.toml > /tmp/requirements.txt \
 && pip install -q -r /tmp/requirements.txt \
 && pip uninstall -q -y setuptools \
 && rm -f /tmp/requirements.txt

# 3. The package.
COPY README.md /tmp/webagent-src/
COPY prompts /tmp/webagent-src/prompts
COPY webagent /tmp/webagent-src/webagent
RUN pip install -q --no-deps /tmp/webagent-src \
 && rm -rf /tmp/webagent-src \
 && webagent env serve --help > /dev/null

# 4. Runtime: an unprivileged user, Debian's Chromium, the server on all interfaces (behind its token).
ENV WEBAGENT_BROWSER_EXECUTABLE_PATH=/usr/bin/chromium \
    HOME=/home/webagent
USER webagent
WORKDIR /work
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"
ENTRYPOINT ["webagent", "env", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD []
