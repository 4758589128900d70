"""The batched system testbench (tb/system_batch.py) on the native Verilator driver (tb/native.py): its checks
hold, the run does not depend on how often Python looks (K) or on whether the devices run while Python
checks (pipelined), it makes at least the transactions asked for, its checks fail when their input is
broken on purpose, and the driver refuses bad port accesses by name.

The device is Verilated once (about a minute; build/sim/native, reused while the RTL is unchanged) for
every test here.  Its RTL blocks are tested on their own too: tests/test_rtl_caches.py (the caches and
their traffic), tests/test_stamped.py (the stamped queues)."""

from pathlib import Path

import pytest

from tb.native import NativeSystem
from tb.run_system import DEFAULT_BATCH, PIPELINE_BATCH, build, run
from tb.seed import env_seed
from tb.system_top import UNIT_RESET_CYCLES

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "sim"
SEED = env_seed(3)
SAME = ("cycles", "transactions", "messages", "cache_hits", "latency_cycles", "dispatch", "coverage", "host",
        "coalescing")


@pytest.fixture(scope="module")
def native_build():
    runner, build_dir, _ = build("verilator", 2, BUILD, batched=True)
    return runner, build_dir


def _run(native_build, tmp_path, name, transactions=400, **kw):
    runner, build_dir = native_build
    return run(runner, build_dir, None, SEED, transactions, tmp_path / f"{name}.json", **kw)


def test_batched_system_is_clean_and_the_same_for_any_k(native_build, tmp_path):
    assert DEFAULT_BATCH == 9 and PIPELINE_BATCH == 4          # what the names below say
    out = {}
    for name, kw in (("k2", dict(batch=2)), ("k9", dict(batch=DEFAULT_BATCH)),
                     ("k4_pipelined", dict(batch=PIPELINE_BATCH, pipeline=True))):
        s = _run(native_build, tmp_path, name, **kw)
        assert not s.get("violations"), f"seed {SEED} {name}: {s.get('error')}"
        assert s["batch"]["late"] == 0, (name, s["batch"])
        assert s["transactions"] >= 400, f"seed {SEED} {name}: {s['transactions']} transactions, 400 asked for"
        # snoops went into the link right behind a GO to their line (the link and the DCOH keep the order)
        assert s["snoops_behind_rsp"] > 0, f"seed {SEED} {name}: no snoop entered the link behind an H2D Rsp"
        out[name] = s
    for name in ("k9", "k4_pipelined"):
        diff = [key for key in SAME if out["k2"].get(key) != out[name].get(key)]
        assert not diff, f"seed {SEED}: K=2 and {name} differ in {diff}"
    assert (BUILD / "native" / f"results_{SEED}.xml").exists()          # the JUnit file of the run
    # without the flit monitor the devices record no flit-only cycles: nothing else may change (the flit
    # kinds and slot formats in the coverage come from the monitor)
    s = _run(native_build, tmp_path, "noflits", batch=DEFAULT_BATCH, flit_monitor=False)
    assert not s.get("violations"), f"seed {SEED} K={DEFAULT_BATCH}, no flit monitor: {s.get('error')}"
    diff = [key for key in SAME if key != "coverage" and s.get(key) != out["k9"].get(key)]
    diff += [] if s["coverage"]["state_event"] == out["k9"]["coverage"]["state_event"] else ["coverage.state_event"]
    assert not diff, f"seed {SEED}: K={DEFAULT_BATCH} with and without the flit monitor differ in {diff}"


@pytest.mark.parametrize("broken, words", [("mirror", ("cache",)), ("flit", ("flit breaks a link rule", "CRC"))])
def test_batched_system_checks_fail_on_a_broken_input(native_build, tmp_path, monkeypatch, broken, words):
    monkeypatch.setenv("SIM_BREAK", broken)
    s = _run(native_build, tmp_path, "broken")
    assert s.get("violations") == 1, f"SIM_BREAK={broken} went unnoticed"
    assert f"seed {SEED}" in s["error"] and all(w in s["error"] for w in words), s["error"]


def test_native_ports_refuse_bad_accesses(native_build):
    runner, _ = native_build
    system = NativeSystem(runner.lib, runner.ports, 2)
    try:
        system.step(UNIT_RESET_CYCLES + 5)                                # the reset edges, then 5 cycles
        assert system.d0_now.value == system.d1_now.value == 5          # every device, every cycle
        with pytest.raises(AttributeError, match="d0_now is an output"):
            system.d0_now.value = 1
        bits = len(system.d1_rec_pop)
        with pytest.raises(ValueError, match=f"d1_rec_pop: .* does not fit its {bits} bits"):
            system.d1_rec_pop.value = 1 << bits
        # what is written is what the model holds: a narrow port (a ctypes scalar) and a wide one (bytes)
        for name in ("rec_pop", "h2d_req_push"):
            port = system.port(1, name)
            value = int(("10" * len(port))[:len(port)], 2)          # alternating bits, the top one set
            assert value >> (len(port) - 1) == 1
            port.value = value
            assert port.value == value and bytes(port.buf) == value.to_bytes(port.nbytes, "little"), name
            port.value = 0
        with pytest.raises(KeyError, match="no port 'no_such_port'"):
            system.port(0, "no_such_port")
        with pytest.raises(KeyError, match="device 2"):
            system.port(2, "now")
        with pytest.raises(ValueError, match="cycles must be >= 0"):
            system.step(-1)
        system.start(3)
        with pytest.raises(RuntimeError, match="wait"):
            system.start(1)
        system.wait()
        assert system.d0_now.value == 8 and system.d1_now.value == 8
    finally:
        system.close()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_batched_slow_caches(tmp_path, seed):
    """Slow internal caches (tb/rtl_caches.py ``stall_bits=3``: cmd and cpu_rsp held back, cmd answers late),
    4 devices, 20 000 transactions (make regress): every message still matches the shadows, and the DCOH's
    snoop side path answered snoops while a cache owed it a command's answer (docs/dcoh.md), so the shadows
    checked snoops taken in the middle of an event."""
    runner, build_dir, _ = build("verilator", 4, BUILD / "cache-stall3", batched=True, cache_stall=3)
    s = run(runner, build_dir, None, seed, 20000, tmp_path / "slow.json", batch=DEFAULT_BATCH)
    assert not s.get("violations"), f"seed {seed}: {s.get('error')}"
    assert s["transactions"] >= 20000
    assert s["snoops_while_cmd_owed"] > 0, f"seed {seed}: no snoop was taken while a cache owed an answer"
    assert s["snoops_while_held"] > 0, f"seed {seed}: no snoop was taken while the caches held the DCOH up"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_batched_four_devices_any_k(tmp_path, seed):
    """4 devices, 3 000 transactions: K = 1 against a pipelined K = 4 (make regress)."""
    runner, build_dir, _ = build("verilator", 4, BUILD, batched=True)
    out = []
    for k, pipe in ((1, False), (4, True)):
        s = run(runner, build_dir, None, seed, 3000, tmp_path / f"s{k}.json", batch=k, pipeline=pipe)
        assert not s.get("violations"), f"seed {seed} K={k}: {s.get('error')}"
        assert s["transactions"] >= 3000 and s["batch"]["late"] == 0, (s["transactions"], s["batch"])
        out.append(s)
    diff = [key for key in SAME if out[0].get(key) != out[1].get(key)]
    assert not diff, f"seed {seed}: K=1 and pipelined K=4 differ in {diff}"
