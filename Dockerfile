# a2e-host: the memory host for A2E agents.
#   docker build -t a2e-host .
#   docker run -p 8765:8765 -v a2e-data:/data -e A2E_HOST_AUTH_TOKENS='[...]' a2e-host
# Settings come from A2E_HOST_<SECTION>_<FIELD> variables or a mounted file named by
# A2E_HOST_CONFIG (see docs/configuration.md).
FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY host ./host
# the postgres extra (asyncpg) lets one image serve a SQLite file or a postgresql:// URL, and
# the picows extra lets it serve `server.transport = "picows"` (both optional in a checkout)
RUN pip install --no-cache-dir '.[postgres,picows]' \
    && useradd --system --uid 10001 --home-dir /data a2e \
    && mkdir -p /data && chown a2e /data

USER a2e
ENV A2E_HOST_SERVER_HOST=0.0.0.0 \
    A2E_HOST_STORE_DB=/data/a2e-host.db \
    PYTHONUNBUFFERED=1
EXPOSE 8765
VOLUME ["/data"]
# /readyz answers 200 once the store answers; no token needed for it.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/readyz', timeout=3)"]
# SIGTERM drains in-flight requests (server.drain_timeout, 10 s by default) and exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["a2e-host"]
CMD ["serve"]
