"""Test programs run in a fresh interpreter, where its exit and asyncio.run's end are real."""

import subprocess
import sys
import textwrap


def run_script(code: str) -> subprocess.CompletedProcess[str]:
    """Runs code (dedented) with this interpreter; fails on a non-zero exit or after 30 s."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
