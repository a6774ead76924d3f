# Impri's image: one image for serve, worker, beat and migrate.
#
#   docker build -t impri .
#   docker run -p 8000:8000 -v impri-data:/data impri                   # embedded: SQLite in /data
#   docker run ... impri impri-start worker                             # scaled: see compose.yaml
#
# Stage 1 installs every dependency from requirements.lock (exact versions, each
# file checked against the lock's hashes), then Impri itself without resolving
# anything, into a virtualenv without pip. Stage 2 is the slim runtime:
# that virtualenv, the start script and nothing else (no source tree, no wheels,
# no compilers, no pip cache).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY requirements.lock ./
# Dependencies first: this layer is reused until the lock changes. --require-hashes
# refuses any file whose hash the lock does not list, and any package it does not pin.
RUN python -m venv --without-pip /opt/impri \
 && python -m pip --python /opt/impri/bin/python install --require-hashes -r requirements.lock
# The source tree (what .dockerignore lets through); it stays in this stage. Impri
# alone (--no-deps): the lock already put in everything it needs, and pip check says so.
COPY . ./
RUN python -m pip --python /opt/impri/bin/python install --no-deps . \
 && python -m pip --python /opt/impri/bin/python check

FROM python:3.11-slim
ARG IMPRI_VERSION=0.1.0
LABEL org.opencontainers.image.title="Impri" \
      org.opencontainers.image.description="A human between an AI agent and the actions that matter: approvals for refunds, charges, emails and deploys." \
      org.opencontainers.image.version="${IMPRI_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/impri/impri" \
      org.opencontainers.image.documentation="https://github.com/impri/impri/blob/main/docs/operations.md" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim"
ENV PATH=/opt/impri/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    IMPRI_DATA_DIR=/data IMPRI_HOST=0.0.0.0 IMPRI_PORT=8000
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home impri \
 && mkdir /data && chown impri:impri /data
COPY --from=build /opt/impri /opt/impri
COPY docker/impri-start /usr/local/bin/impri-start
USER impri
WORKDIR /data
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=30s \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('IMPRI_PORT', '8000'), timeout=2)"]
# impri-start waits for the database, then runs `impri serve` (host and port from
# IMPRI_HOST / IMPRI_PORT). Other roles: impri-start worker | beat | migrate | <any impri command>.
# Started as root (compose.yaml's `user: root`), it first copies the *_FILE secrets into
# memory for user impri and then runs as impri: file secrets keep the host's owner and mode.
CMD ["impri-start", "serve"]
