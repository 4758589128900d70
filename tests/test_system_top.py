"""The key of the cached system Verilog (tb/system_top.py ``source_hash``) changes with every source the RTL
is elaborated from, hdl/ and the definitions in cxl/, and not with the golden model's code."""

from pathlib import Path

from tb import system_top

ROOT = Path(__file__).resolve().parent.parent


def _key_with(monkeypatch, changed):
    real = Path.read_bytes

    def read_bytes(self):
        data = real(self)
        return data + b"\n# changed" if self.resolve() == changed.resolve() else data
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    try:
        return system_top.source_hash({"p": 1})
    finally:
        monkeypatch.setattr(Path, "read_bytes", real)


def test_key_follows_the_rtl_sources(monkeypatch):
    base = system_top.source_hash({"p": 1})
    for f in (ROOT / "cxl" / "coherence.py", ROOT / "cxl" / "flit.py", ROOT / "hdl" / "dcoh" / "dcoh.py",
              ROOT / "hdl" / "link" / "tx.py", ROOT / "tb" / "linked_device.py"):
        assert _key_with(monkeypatch, f) != base, f"a change to {f.relative_to(ROOT)} keeps stale Verilog"
    assert system_top.source_hash({"p": 2}) != base


def test_key_ignores_the_golden_model(monkeypatch):
    base = system_top.source_hash({"p": 1})
    assert _key_with(monkeypatch, ROOT / "models" / "host.py") == base
