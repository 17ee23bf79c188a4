"""Runs every ```python block of README.md, in order, in one namespace, against the broker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_snippets(broker_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANES_URL", broker_url)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 6
    ns: dict[str, object] = {"__name__": "readme"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md block {i}", "exec"), ns)
    client = ns["client"]
    client.close()  # type: ignore[attr-defined]


def test_readme_snippets_pass_mypy_strict(tmp_path: Path) -> None:
    """The blocks, read as one module, type-check as an app under ``mypy --strict`` would."""
    from mypy import api

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    module = tmp_path / "readme_blocks.py"
    module.write_text("\n\n".join(blocks))
    out, err, status = api.run(["--strict", "--no-incremental", str(module)])
    assert status == 0, out + err
