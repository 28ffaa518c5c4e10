"""``ebpo.integrations.unsloth`` imported before ``unsloth``: one line saying to import unsloth
first (no unsloth needed: the check comes before anything is imported)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_importing_before_unsloth_is_one_line_saying_so():
    done = subprocess.run(
        [sys.executable, "-c", "import ebpo.integrations.unsloth"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ebpo.integrations.unsloth: import unsloth first")
    assert "import unsloth` before this import" in last


def test_the_page_shows_what_the_user_sees():
    """docs/unsloth.md promised "one line"; Python prints the ImportError's traceback (a library
    does not replace the interpreter's hook). The page now quotes the line the traceback ends in,
    exactly as printed (issue #52 item 7)."""
    done = subprocess.run(
        [sys.executable, "-c", "import ebpo.integrations.unsloth"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    page = (REPO / "docs" / "unsloth.md").read_text(encoding="utf-8")
    assert f"\n{last}\n" in page
    assert "stops with one line" not in " ".join(page.split())
    assert "Python prints its traceback" in page


def test_the_page_names_the_versions_the_suite_installs_and_what_pip_brings():
    """The Unsloth suite's pins (requirements/unsloth-cpu.txt: unsloth, trl, transformers, CPU
    torch) are the versions docs/unsloth.md says it tests; the page also says what a plain
    ``pip install unsloth`` brought instead (issue #52 item 4; checked without a network)."""
    pins = (REPO / "requirements" / "unsloth-cpu.txt").read_text(encoding="utf-8")
    versions = dict(re.findall(r"^(trl|transformers)==(\S+)$", pins, flags=re.M))
    versions["unsloth"] = re.search(r"--no-deps unsloth==(\S+)", pins).group(1)
    versions["torch"] = re.search(r"torch==(\S+) \(CPU\)", pins).group(1)
    page = " ".join((REPO / "docs" / "unsloth.md").read_text(encoding="utf-8").split())
    tested = page[page.index("Tested with") :].split(". ")[0]
    for package, version in versions.items():
        assert version in tested, (package, version, tested)
    brought = page[page.index("What `pip install unsloth` brings") :]
    for fact in ("torch with 2.14.1", "CUDA 13", "nvidia-*", "triton", "xformers",
                 "bitsandbytes", "torchvision", "transformers to 5.17.0", "6.5 GB"):  # fmt: skip
        assert fact in brought, fact
