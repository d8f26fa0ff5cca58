#!/usr/bin/env bash
# A CPU PyTorch + timm for the benchmarks and the timm checks, in a venv
# (default /work/torch/venv). Never a CI dependency: the tests skip what
# needs torch when it is missing. torch's wheel names the whole CUDA stack
# as dependencies; it imports without most of them on a machine with no
# GPU, so only the few it loads at import time are installed (~1 GB
# instead of ~5 GB).
#
#   scripts/torch-venv.sh [VENV]
set -euo pipefail
. "$(dirname "$0")/args.sh"
htp_script_args torch-venv "scripts/torch-venv.sh [VENV]" 1 "$@"
venv=${1:-/work/torch/venv}
wheels=$(dirname "$venv")/wheels
python3 -m venv "$venv"
mkdir -p "$wheels"
pip() { "$venv/bin/pip" --disable-pip-version-check -q "$@"; }
pip download --no-deps -d "$wheels" torch torchvision timm
nccl=$(unzip -p "$wheels"/torch-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: \(nvidia-nccl-cu[0-9]*==[^ ;]*\).*/\1/p')
pip download --no-deps -d "$wheels" nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 "$nccl"
pip install --no-deps "$wheels"/*.whl
# torch's and timm's small pure-Python needs.
pip install filelock typing-extensions sympy networkx jinja2 fsspec numpy pyyaml \
  huggingface_hub safetensors pillow matplotlib
"$venv/bin/python" -c 'import torch, timm; print("torch", torch.__version__, "timm", timm.__version__)'
