#!/bin/sh
# Makes (once) and prints the Python of the virtual environment that the
# benchmark scripts run PyTorch 2.x in: a pinned PyTorch from the Python
# package index (its default Linux build, with CUDA libraries it does not
# use here: about 5 GB, so it is kept between runs), and NumPy. Nothing
# else in the repository uses it: the module and its tests never need
# Python.
#
#   py=$(docs/bench/torch2_env.sh)     # GOTRAIN_TORCH2_VENV=DIR to keep it elsewhere
set -eu
TORCH_VERSION=2.15.0
venv=${GOTRAIN_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/gotrain/torch2-venv}
py=$venv/bin/python
if ! "$py" -c "import torch, numpy, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
	echo "torch2_env: installing torch==$TORCH_VERSION into $venv (about 5 GB, once)" >&2
	python3 -m venv "$venv" >&2
	"$venv/bin/pip" install --quiet "torch==$TORCH_VERSION" numpy >&2
fi
echo "$py"
