"""Running ``python -m autosearch`` as a user would, from an experiment."""

from __future__ import annotations

import subprocess
import sys

from experiments.lib.io import ROOT


def autosearch(*args: str, check: bool = True, echo: bool = False) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh process from the repository root; ``check``: exit (with its stderr) when it fails;
    ``echo``: print the tail of its stdout."""
    proc = subprocess.run([sys.executable, "-m", "autosearch", *args], cwd=ROOT, text=True, capture_output=True)
    if echo:
        sys.stdout.write(proc.stdout[-6000:])
    if check and proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"autosearch {' '.join(args)} failed with exit code {proc.returncode}")
    return proc
