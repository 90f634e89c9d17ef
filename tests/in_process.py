"""``python -m autosearch ...`` called in the test process: the same ``main`` without a fresh interpreter's
TVM import (seconds a call). For tests that are not about the process itself; exit codes, signals and "no
traceback" of a real process stay with :func:`tests.conftest.run_cli`."""

from __future__ import annotations

import signal
import subprocess


def run_main(capfd, *args: str) -> subprocess.CompletedProcess:
    """``autosearch.cli.main(args)``; returns what :func:`tests.conftest.run_cli` would (exit code, stdout and
    stderr text, captured at the file descriptors so TVM's own output counts too). ``run`` installs a SIGTERM
    handler for the process: the test process gets its own back."""
    from autosearch.cli import main

    capfd.readouterr()  # only this call's output
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["autosearch", *args], code, out, err)
