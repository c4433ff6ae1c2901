# One image for every process of a node; pick the process with the command:
#   docker run IMAGE                                   # whole node (web + tasks + events)
#   docker run IMAGE web | tasks | events              # one process each (compose/k8s)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    ROUTER_HOST=0.0.0.0 ROUTER_PORT=8000 ROUTER_VAR_DIR=/var/lib/router

WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# Bytecode in the image: PYTHONDONTWRITEBYTECODE stops a process writing it,
# not reading it, and every process start would compile the project again.
RUN python -m compileall -q appproxy config dashboard fakes keys node router manage.py
RUN useradd --system --home /var/lib/router router && mkdir -p /var/lib/router \
    && chown router /var/lib/router && chmod +x scripts/entrypoint.sh
USER router
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,os; urllib.request.urlopen(f'http://127.0.0.1:{os.environ[\"ROUTER_PORT\"]}/livez', timeout=2)"
ENTRYPOINT ["scripts/entrypoint.sh"]
CMD ["node"]
