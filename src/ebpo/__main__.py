"""``python -m ebpo`` = the ``ebpo`` command, so launchers that take a module run it
(``accelerate launch -m ebpo grpo ...``, ``torchrun -m ebpo train ...``)."""

import sys

from ebpo.cli import main

if __name__ == "__main__":
    sys.exit(main())
