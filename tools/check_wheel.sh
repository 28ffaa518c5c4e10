#!/usr/bin/env bash
# `make dist-check` (part of `make test`): the wheel as a user meets it. Both archives are built
# (`make dist`) and checked as an index would (`twine check --strict`); the wheel is installed with
# the trl extra into a fresh venv (torch's CPU wheel first, as the README says), and from a folder
# outside the repository the README's wheel commands run: the version, the demo, the Python
# snippet, the verl recipes, a shipped TRL recipe's dry run by name, the docs.
#   tools/check_wheel.sh PYTHON DIST_DIR VENV_DIR
set -euo pipefail
python="$1" dist="$(realpath "$2")" venv="$(realpath -m "$3")"
repo="$(cd "$(dirname "$0")/.." && pwd)"

"$python" -m twine check --strict "$dist"/*.whl "$dist"/*.tar.gz
wheel=$(ls "$dist"/ebpo-*.whl)
sdist_files=$(tar tzf "$dist"/ebpo-*.tar.gz | cut -d/ -f2-)
for needed in LICENSE CHANGELOG.md Makefile tests/conftest.py docs/trl.md recipes/verl/README.md \
    requirements/unsloth-cpu.txt docs/unsloth.md \
    src/ebpo/integrations/trl/recipes/qwen3-1.7b/grpo.yaml; do
  grep -qx "$needed" <<< "$sdist_files" || { echo "dist-check: the sdist lacks $needed" >&2; exit 1; }
done
grep -q 'dist-info/licenses/LICENSE$' <<< "$(unzip -l "$wheel")" || { echo "dist-check: no LICENSE in the wheel" >&2; exit 1; }

rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q torch==2.13.0
"$venv/bin/python" -m pip install -q "$wheel[trl]" 2>&1 | tee "$venv/install.log"
if grep -q "does not provide the extra" "$venv/install.log"; then
  echo "dist-check: an extra that the venv's own pip does not resolve (above)" >&2; exit 1
fi
"$venv/bin/python" -m pip check

outside=$(mktemp -d)
trap 'rm -rf "$outside"' EXIT
cd "$outside"
export PATH="$venv/bin:$PATH" HF_HUB_OFFLINE=1
say() { echo "dist-check: $*"; }

version=$(ebpo --version)
metadata=$(python -c 'import importlib.metadata as m, ebpo; print(m.version("ebpo"), ebpo.__version__)')
[ "$version" = "ebpo $(echo "$metadata" | cut -d' ' -f1)" ] && [ "$(echo "$metadata" | tr ' ' '\n' | uniq | wc -l)" = 1 ]
say "$version; metadata and ebpo.__version__ agree"
python -c 'import ebpo, sys; assert "site-packages" in ebpo.__file__, ebpo.__file__'
ebpo demo > demo.txt && say "ebpo demo: $(wc -l < demo.txt) lines"
# the README's Python snippet, as the installed README (ebpo docs readme) gives it
ebpo docs readme | sed -n '/^```python$/,/^```$/p' | sed '1d;$d' > snippet.py
[ -s snippet.py ] && python snippet.py > snippet.txt && say "README snippet: $(wc -l < snippet.txt) lines"
grep -q '^ebpo ' <<< "$(ebpo verl recipe --list)" && say "ebpo verl recipe --list"
grep -q '^qwen3-1.7b/ebpo_batch ' <<< "$(ebpo grpo recipe --list)" && say "ebpo grpo recipe --list"
ebpo grpo --config qwen3-1.7b/ebpo_batch --dry-run > dry_run.txt
grep -q 'paper preset: ebpo_batch' dry_run.txt && say "ebpo grpo --config qwen3-1.7b/ebpo_batch --dry-run"
cmp <(ebpo docs trl) "$repo/docs/trl.md" && say "ebpo docs trl: the installed page"
say "passed"
