"""``python -m kqlab.cli``: the ``kqlab`` console script without the installed entry point."""

import sys

from kqlab.cli import main

if __name__ == "__main__":  # importing this module (doctest discovery) must not run the CLI
    sys.exit(main())
