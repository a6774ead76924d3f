FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    IMPRI_DATA_DIR=/data IMPRI_HOST=0.0.0.0 IMPRI_PORT=8000 \
    ALLOWED_HOSTS=localhost,127.0.0.1,[::1]

WORKDIR /app
COPY pyproject.toml README.md ./
COPY impri ./impri
COPY approvals ./approvals
COPY rules ./rules
COPY audit ./audit
COPY inbox ./inbox
COPY templates ./templates
RUN pip install --no-cache-dir . && useradd --system --home /data impri && mkdir -p /data && chown impri /data

USER impri
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
CMD ["impri", "serve"]
