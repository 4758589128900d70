"""The package layering: ``cxl`` (the CXL.cache definitions) imports neither ``hdl`` (the RTL) nor
``models`` (the golden model); ``hdl`` and ``models`` import ``cxl`` and never each other; ``tb`` (the VIP)
may use both, but no name private to another package."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_IMPORT_ALL = """
import importlib, pkgutil, sys
pkg = importlib.import_module({pkg!r})
for m in pkgutil.walk_packages(pkg.__path__, {pkg!r} + "."):
    if not m.name.endswith("__main__"):
        importlib.import_module(m.name)
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules}} & {{"cxl", "hdl", "models", "tb"}})))
"""


@pytest.mark.parametrize("pkg, allowed", [("cxl", {"cxl"}), ("hdl", {"cxl", "hdl"}),
                                          ("models", {"cxl", "models"})])
def test_package_imports_only_what_it_may(pkg, allowed):
    """Every module of ``pkg``, imported in a fresh interpreter, pulls in only ``allowed`` packages."""
    r = subprocess.run([sys.executable, "-c", _IMPORT_ALL.format(pkg=pkg)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert set(r.stdout.split()) <= allowed, f"{pkg} imports {set(r.stdout.split()) - allowed}"


def test_no_package_imports_another_ones_private_names():
    hits = []
    for pkg in ("cxl", "hdl", "models", "tb"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    top = node.module.split(".")[0]
                    if top in ("cxl", "hdl", "models", "tb") and top != pkg:
                        hits += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                                 if a.name.startswith("_")]
    assert not hits, hits
