#!/usr/bin/env bash
# The cached environment of one leg of `make test-compat`: prints the path of its venv, building it
# first when missing. The venvs live outside the checkout, under $EBPO_COMPAT_CACHE (default
# ~/.cache/ebpo/compat), so a fresh clone (CI's) reuses them: <leg>-<key>, <key> a hash of the leg's
# requirements file, of ebpo's declared dependencies (pyproject.toml's [project] tables) and of the
# interpreter's version; a changed requirement builds a new one and the leg's stale ones go.
# ebpo itself is not installed there: the Makefile runs the checkout's src (PYTHONPATH), so the
# cached venv holds only what a user's stack holds.
#
# Usage: tools/compat_venv.sh PYTHON LEG    (LEG: requirements/compat-LEG.txt)
#
# As a user who keeps their own stack installs ebpo: torch first (its line in the file, alone: the
# CPU wheel, or pip would pull a CUDA build of another release), then the leg's pins together with
# ebpo *without* its trl/verl extras, in one resolution; no --no-deps. The legs pin every package
# they test, so the machine's own pip constraints (a torch cap) are set aside here.
set -euo pipefail
python=$1
leg=$2
req=requirements/compat-$leg.txt
[ -f "$req" ] || { echo "compat_venv.sh: no $req" >&2; exit 2; }
key=$(
    {
        cat "$req"
        "$python" -c 'import json, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(json.dumps([p["dependencies"], p["optional-dependencies"]], sort_keys=True))'
        "$python" -V
    } | sha256sum | cut -c1-12
)
cache=${EBPO_COMPAT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ebpo/compat}
venv=$cache/$leg-$key
if [ ! -f "$venv/.installed" ]; then
    mkdir -p "$cache"
    for stale in "$cache/$leg"-*; do  # only the venvs this script made: they hold its stamp file
        if [ "$stale" != "$venv" ] && [ -f "$stale/.ebpo-compat-venv" ]; then rm -rf "$stale"; fi
    done
    rm -rf "$venv"
    export PIP_CONSTRAINT=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
    {
        "$python" -m venv "$venv"
        "$venv/bin/python" -m pip install -q $(grep -E '^torch==' "$req")
        extras=$(sed -n 's/^# extras: *//p' "$req")
        "$venv/bin/python" -m pip install -q -r "$req" -e ".[${extras:-dev}]"
        "$venv/bin/python" -m pip uninstall -q -y ebpo  # its dependencies stay; src runs from the checkout
    } >&2
    touch "$venv/.ebpo-compat-venv"
    touch "$venv/.installed"
fi
echo "$venv"
