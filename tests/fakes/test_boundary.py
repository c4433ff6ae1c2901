"""No product package imports `fakes`: the fakes serve tests, demos and bench only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("router", "keys", "appproxy", "dashboard", "config")


def _imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("package", PRODUCT)
def test_product_package_never_imports_fakes(package: str) -> None:
    """Every module of a product package, function bodies included, imports nothing from `fakes`."""
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    offenders = [
        f"{path.relative_to(ROOT)}: import {name}"
        for path in files
        for name in _imported_modules(path)
        if name == "fakes" or name.startswith("fakes.")
    ]
    assert offenders == []
