# graphfuse — the README's two commands: `make train` and `make test`.
# Each works alone on a fresh machine: it creates .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed first, pinned, when it is missing. Which build comes depends on pip's index: PyPI's Linux
# wheel is the multi-GB CUDA build; TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU wheel (CI's
# pip configuration already offers the CPU wheel). Override TORCH for another version, e.g. TORCH=torch==2.11.0.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
EXTRAS ?= dev
# Offline mirror of raw dataset files (Planetoid/Cora, MUSAE Facebook, ...) when one sits beside the checkout.
SHARED_DATASETS := $(abspath $(wildcard ../shared/datasets))
ifneq ($(SHARED_DATASETS),)
export GRAPHFUSE_DATA_MIRROR ?= $(SHARED_DATASETS)
endif
ARGS ?=

.PHONY: install train test lint clean

# One stamp per EXTRAS value: `make install EXTRAS=dev,wandb` after a first install still installs wandb.
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

train: install
	$(PY) scripts/train.py $(ARGS)

test: install
	$(PY) -m pytest -q -m "not gpu" $(ARGS)

lint: install
	$(VENV)/bin/ruff check framework kernels samplers trainers scripts tests

clean:
	rm -rf $(VENV) runs .pytest_cache
