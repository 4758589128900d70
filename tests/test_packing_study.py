"""bench/packing_study.py: its flit census and loss breakdown (the figures docs/link_layer.md quotes)."""

import random

from bench.packing_study import loss, main, random_mixes, wire_census
from cxl.flit import Direction
from cxl.messages import Channel
from models.flit import MIXED, pack, random_msg


def test_census_counts_slots_chunks_and_llcrds():
    rng = random.Random(3)
    up = Direction.UPSTREAM
    # One request alone: a protocol flit with the request in a header slot and three empty slots.
    one = wire_census(up, pack(up, [random_msg(rng, Channel.D2H_REQ)]))
    assert one == {"flits": 1, "llcrds": 0, "chunks": 0, "header_slots": 4, "empty_slots": 3}
    # Acks alone: one LLCRD.
    assert wire_census(up, pack(up, [], acks=8))["llcrds"] == 1
    # Eight lines: 32 chunks wherever they go, every flit counted once.
    lines = wire_census(up, pack(up, [random_msg(rng, Channel.D2H_DATA) for _ in range(8)]))
    assert lines["chunks"] == 32
    assert 4 * (lines["flits"] - lines["llcrds"]) == lines["chunks"] + lines["header_slots"]


def test_loss_breakdown_adds_up_to_the_flits_above_the_bound():
    counts = {ch: k * 64 // 4 for ch, k in MIXED.items()}
    r = loss(counts, wait=3, depth=4, seed=1)
    total = 0
    for d in ("upstream", "downstream"):
        n = r[d]
        assert n["flits"] >= n["bound_flits"]
        assert n["under_filled_in_flits"] >= 0 and n["empty_slots"] <= n["header_slots"]
        total += n["llcrds"] + n["empty_in_flits"] + n["under_filled_in_flits"]
    assert total == r["above_bound"] > 0


def test_random_mixes_are_seeded_and_never_empty():
    assert random_mixes(6, 7) == random_mixes(6, 7) != random_mixes(6, 8)
    assert all(any(m.values()) for m in random_mixes(24, 7))


def test_cli_runs_both_studies(capsys):
    assert main(["--lines", "32", "--mix-count", "2", "--depths", "4"]) == 0
    out = capsys.readouterr().out
    assert '"loss"' in out and '"mixes"' in out
