# SPDX-License-Identifier: Apache-2.0
#
# pipvenv.sh — sourced by scripts/build_cuda.sh and scripts/cuda_emu.sh:
# one way to install pinned PyPI packages into the checkout's .cuda-venv/.
#
#   pip_into_venv VENV WHAT PIN...   makes VENV with $PYTHON (default
#                              python3) unless it has a python, then
#                              pip-installs PIN... into it. On failure it
#                              calls the caller's skip (when $ci is 1) or
#                              die, with pip's last 15 lines; WHAT names the
#                              packages in that message ("the CUDA
#                              headers"). The caller defines skip and die.

pip_into_venv() {
  local venv=$1 what=$2 py=${PYTHON:-python3} log reason
  shift 2
  command -v "$py" >/dev/null 2>&1 || {
    [ "${ci:-0}" = 1 ] && skip "no $py to install $what from PyPI ($*)"
    die "no $py to install $what from PyPI ($*)"
  }
  log=$(mktemp)
  if ! { { [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"; } &&
         "$venv/bin/python" -m pip install --disable-pip-version-check -q "$@"; } >"$log" 2>&1; then
    reason=$(tail -n 15 "$log")
    rm -f "$log"
    [ "${ci:-0}" = 1 ] && skip "$what could not be installed from PyPI ($*):
$reason"
    die "pip install $* failed:
$reason"
  fi
  rm -f "$log"
}
