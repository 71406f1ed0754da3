# Attention Lab: the Streamlit app and its torch compute core (attncore).
#
# Default build: CPU-only torch on python:3.11-slim.
#   docker build -t attention-lab .
#   docker run --rm -p 8501:8501 attention-lab
#
# GPU build (see README, "Docker"): same Dockerfile, CUDA torch wheels. The CUDA
# wheels bring the CUDA user-space libraries as pip dependencies, so a plain
# Python base works; the host needs only the NVIDIA driver + container toolkit.
#   docker build -t attention-lab:cuda \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
#   docker run --rm --gpus all -p 8501:8501 attention-lab:cuda
#
# BASE_IMAGE may be any image that has python3 (>= 3.11) with the venv module.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# Extra pip index that serves torch. The CPU index holds torch==X+cpu, which
# pip prefers over PyPI's torch==X (a CUDA build with multi-GB nvidia-* deps).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

LABEL org.opencontainers.image.title="Attention Lab" \
      org.opencontainers.image.description="Interactive attention-mechanism explorer (Streamlit + Plotly + torch)"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    STREAMLIT_SERVER_HEADLESS=true \
    STREAMLIT_SERVER_FILE_WATCHER_TYPE=none

# Unprivileged runtime user (numeric uid/gid so Kubernetes' runAsNonRoot can
# verify it) and the virtualenv that holds every Python dependency.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid 10001 --create-home \
       --home-dir /home/app --shell /usr/sbin/nologin app \
    && python3 -m venv /opt/venv

WORKDIR /app

# Dependencies first: this layer is rebuilt only when requirements.txt changes.
COPY requirements.txt ./
RUN pip install --no-cache-dir --extra-index-url "${TORCH_INDEX_URL}" -r requirements.txt

# The app runs from the source tree; attncore is imported from /app.
COPY pyproject.toml app.py ./
COPY .streamlit/ ./.streamlit/
COPY attncore/ ./attncore/
COPY ui/ ./ui/
COPY pages/ ./pages/

USER 10001:10001

EXPOSE 8501

HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; r = urllib.request.urlopen('http://localhost:8501/_stcore/health', timeout=5); sys.exit(0 if r.status == 200 else 1)"]

CMD ["streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501", "--server.headless=true"]
