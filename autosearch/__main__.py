"""``python -m autosearch``."""

import sys

from autosearch.cli import main

if __name__ == "__main__":
    sys.exit(main())
