"""The repository's documents keep up with the code and stand alone.

* docs/protocol.md's transition tables are the ones cxl/coherence.py defines (``make table UPDATE_DOCS=1``
  rewrites them), and ``make table`` without UPDATE_DOCS leaves the committed document alone.
* No tracked file points its reader outside the repository (a machine's absolute path, a sibling
  folder of reference notes) or at the way the work was organised (issue or session numbers)."""

import re
import subprocess
from pathlib import Path

import pytest

from models import tables

ROOT = Path(__file__).resolve().parent.parent


def test_protocol_doc_has_the_current_tables():
    committed = (ROOT / "docs" / "protocol.md").read_text()
    assert tables.document(committed) == committed, \
        "docs/protocol.md is out of date with cxl/coherence.py: run `make table UPDATE_DOCS=1`"


def test_make_table_leaves_the_checkout_alone(tmp_path, monkeypatch):
    """By default the document goes under build/ (relative to where it runs), never over the committed one."""
    committed = ROOT / "docs" / "protocol.md"
    before = committed.stat().st_mtime_ns, committed.read_bytes()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tables, "markdown", lambda: "CHANGED TABLES")   # a document that would differ
    tables.main(["--csv-dir", "csv", "--template", str(committed)])
    assert "CHANGED TABLES" in (tmp_path / "build" / "tables" / "protocol.md").read_text()
    assert (committed.stat().st_mtime_ns, committed.read_bytes()) == before


# Assembled from pieces so that this file does not match itself.
_OUTSIDE = [r"\.\./" + "shared/", "/" + r"work/(main|shared|steering)\b", "shared/" + "reference",
            "cxl_" + r"facts\.md"]
_ORGANISATION = [r"\b[Ii]ssue" + r" #?\d+", r"\b[Ii]ssue" + r"-\d+", r"\b[Ss]ession" + r" \d+\b", r"\(session\)",
                 r"\bthe issue" + r"'s\b", r"Foundation " + "issue", r"\bhand-" + "off\b"]


def _tracked():
    r = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"git ls-files failed: {r.stderr}")
    return [ROOT / f for f in r.stdout.split() if not f.startswith(".ci/") and not f.endswith(".json")]


@pytest.mark.parametrize("kind,patterns", [("a path outside the repository", _OUTSIDE),
                                           ("a work-organisation word", _ORGANISATION)])
def test_repository_stands_alone(kind, patterns):
    rx = re.compile("|".join(patterns))
    hits = []
    for f in _tracked():
        try:
            text = f.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                hits.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not hits, f"{len(hits)} line(s) cite {kind}:\n" + "\n".join(hits[:20])
