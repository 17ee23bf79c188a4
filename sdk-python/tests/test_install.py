"""``pip install ./sdk-python`` into a fresh virtual environment, then a produce/consume round
trip from that environment against the broker, and warm AsyncLanes requests that try no import
(the declared dependencies are enough)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

SDK = Path(__file__).resolve().parent.parent

ROUND_TRIP = textwrap.dedent(
    """
    import asyncio, sys, lanes
    url, queue = sys.argv[1], sys.argv[2]
    with lanes.Lanes(url) as c:
        assert c.queue(queue).push([{"data": {"hello": "world"}}])[0].status == "queued"
        got = []
        c.queue(queue).wait(False).limit(1).consume(lambda m: got.append(m.data)).closed(timeout=30)
        assert got == [{"hello": "world"}], got
        assert c.queue(queue).wait(False).pop() == []

    # A warm AsyncLanes request tries no import: httpcore's `import sniffio`, retried on every
    # request when the package is missing, is what the sniffio dependency is for.
    looked_for = []
    class ImportSpy:
        def find_spec(self, name, path=None, target=None):
            looked_for.append(name)
    async def warm_async_requests():
        async with lanes.AsyncLanes(url) as c:
            await c.health()
            sys.meta_path.insert(0, ImportSpy())
            try:
                await c.health()
                await c.health()
            finally:
                del sys.meta_path[0]
    asyncio.run(warm_async_requests())
    assert looked_for == [], looked_for
    print("round trip ok")
    """
)


def test_pip_install_into_fresh_venv(broker_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(
        SDK, src, ignore=shutil.ignore_patterns(".venv", "*_cache", "build", "*.egg-info", "tests")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        check=True,
        timeout=600,
    )
    out = subprocess.run(
        [str(py), "-c", ROUND_TRIP, broker_url, f"py-install-{uuid.uuid4().hex[:8]}"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert "round trip ok" in out.stdout
