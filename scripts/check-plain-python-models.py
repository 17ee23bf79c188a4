#!/usr/bin/env python3
"""Checks that a user's own datamodel-codegen models of openapi.yaml accept the broker's nulls.

README.md tells users to generate with `--strict-nullable` and no other option (sdk-python's
pyproject.toml sets many more). Without it, datamodel-codegen ignores `nullable: true` on required
properties, and models such as PopResponse reject real answers. This generates models with that
one flag and fails if any required nullable property of a component schema refuses None.

Usage: check-plain-python-models.py SPEC  (run with a Python that has datamodel-code-generator,
e.g. sdk-python/.venv/bin/python; `make verify` runs it)
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from pydantic import BaseModel, TypeAdapter, ValidationError

GENERATOR_ARGS = [
    "--input-file-type", "openapi",
    "--output-model-type", "pydantic_v2.BaseModel",
    "--strict-nullable",
]  # fmt: skip


def required_nullable_properties(spec: dict[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name, schema in spec["components"]["schemas"].items():
        properties = schema.get("properties", {})
        for prop in schema.get("required", []):
            if properties.get(prop, {}).get("nullable") is True:
                found.append((name, prop))
    return found


def main() -> int:
    spec_path = Path(sys.argv[1]).resolve()
    spec = yaml.safe_load(spec_path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plain_models.py"
        generator = Path(sys.executable).with_name("datamodel-codegen")
        generated = subprocess.run(
            [str(generator), "--input", str(spec_path), "--output", str(out), *GENERATOR_ARGS],
            capture_output=True,
            text=True,
        )
        if generated.returncode != 0:
            print("datamodel-codegen failed:", generated.stderr, sep="\n")
            return 1
        module_spec = importlib.util.spec_from_file_location("plain_models", out)
        assert module_spec and module_spec.loader
        models = importlib.util.module_from_spec(module_spec)
        sys.modules["plain_models"] = models
        module_spec.loader.exec_module(models)

    checked, refused = 0, []
    for schema, prop in required_nullable_properties(spec):
        model = getattr(models, schema, None)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            refused.append(f"{schema}: no model generated")
            continue
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == prop), None)
        if field is None or field.annotation is None:
            refused.append(f"{schema}.{prop}: no field generated")
            continue
        checked += 1
        try:
            TypeAdapter[Any](field.annotation).validate_python(None)
        except ValidationError:
            refused.append(f"{schema}.{prop}: refuses null")
    if refused:
        print("plain datamodel-codegen models refuse what the spec allows:", *refused, sep="\n  ")
        return 1
    if checked == 0:
        print("no required nullable property found in the spec: the check checked nothing")
        return 1
    print(
        f"plain datamodel-codegen models accept null on all {checked} required nullable properties"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
