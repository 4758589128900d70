"""The 68B-flit link layer reference (models/flit/, formats in cxl/flit.py): formats from the facts, round trips, the packing
policy, malformed input, and the test vectors.

Ref: docs/sources.md §2.1 (header, all-data flit, rollover), §2.2 (slot formats, per-flit maxima), §2.4
(credits), §2.5 (control flits).  The CRC has its own file, tests/test_crc.py.
"""

import itertools
import json
import random

import pytest
from hypothesis import given, strategies as st

from cxl.messages import CODECS, Channel, D2HRspOpcode, H2DReqOpcode, H2DRspOpcode
from models import flit as F
from models.flit import (CONTROL_KINDS, DATA_CHANNELS, MAX_PER_FLIT, SLOT_FORMATS, Credits, Direction, FlitError,
                         Packer, RandomPolicy, Unpacker, control, decode_control, decode_credit, decode_header,
                         encode_control, encode_credit, encode_header, make_msg, pack, seal, unpack)

UP, DOWN = Direction.UPSTREAM, Direction.DOWNSTREAM


# ---------------------------------------------------------------- formats against the facts
def test_slot_formats_use_the_bits_the_facts_list():
    # Ref: docs/sources.md §2.2 "Bits used" column, for every CXL.cache format.
    used = {(d.value, f"{k}{c}"): f.used_bits for (d, k, c), f in SLOT_FORMATS.items()}
    assert used == {
        ("downstream", "H0"): 96, ("downstream", "H1"): 88, ("downstream", "H2"): 88, ("downstream", "H3"): 96,
        ("downstream", "G0"): 128, ("downstream", "G1"): 128, ("downstream", "G2"): 120,
        ("downstream", "G3"): 128,
        ("upstream", "H0"): 87, ("upstream", "H1"): 96, ("upstream", "H2"): 88,
        ("upstream", "G0"): 128, ("upstream", "G1"): 119, ("upstream", "G2"): 116, ("upstream", "G3"): 68,
    }


def test_header_bit_positions():
    # Ref: docs/sources.md §2.1: [0] Type, [2] Ak, [3] BE, [4] Sz, [7:5] Slot0 .. [16:14] Slot3,
    # [23:20] RspCrd, [27:24] ReqCrd, [31:28] DataCrd.
    assert encode_header({"type": 1}) == 1 << 0
    assert encode_header({"ak": 1}) == 1 << 2 and encode_header({"be": 1}) == 1 << 3
    assert encode_header({"sz": 1}) == 1 << 4
    assert [encode_header({f"slot{s}": 0b111}) for s in range(4)] == [0b111 << (5 + 3 * s) for s in range(4)]
    assert encode_header({"rsp_crd": 0xF}) == 0xF << 20 and encode_header({"req_crd": 0xF}) == 0xF << 24
    assert encode_header({"data_crd": 0xF}) == 0xF << 28
    h = {"type": 1, "ak": 1, "slot2": 5, "req_crd": 9}
    assert {k: v for k, v in decode_header(encode_header(h)).items() if v} == h


def test_credit_encoding():
    # Ref: docs/sources.md §2.4: 000=0, 001=1, 010=2, 011=4, ... 111=64; bit 3 selects the protocol.
    assert [encode_credit(n) for n in (0, 1, 2, 4, 8, 16, 32, 64)] == list(range(8))
    assert encode_credit(64, F.CreditProtocol.MEM) == 0b1111
    assert [decode_credit(c)[1] for c in range(16)] == [0, 1, 2, 4, 8, 16, 32, 64] * 2
    with pytest.raises(ValueError):
        encode_credit(3)
    assert [F.credit_step(n) for n in (0, 1, 3, 5, 63, 64, 1000)] == [0, 1, 2, 4, 32, 64, 64]


def test_control_codes_are_the_facts_ones():
    # Ref: docs/sources.md §2.5 (LLCTRL, SubType).
    assert {k: v[:2] for k, v in CONTROL_KINDS.items()} == {
        "LLCRD": (0b0000, 0b0001), "RETRY.Idle": (0b0001, 0b0000), "RETRY.Req": (0b0001, 0b0001),
        "RETRY.Ack": (0b0001, 0b0010), "RETRY.Frame": (0b0001, 0b0011), "INIT.Param": (0b1100, 0b1000)}
    p = encode_control(control("INIT.Param"))
    assert p & 1 and (p >> 32) & 0xF == 0b1100 and (p >> 36) & 0xF == 0b1000 and (p >> 64) & 0xF == 0b0010


# ---------------------------------------------------------------- strategies
def _line(seed):
    return random.Random(seed).randbytes(64)


@st.composite
def messages(draw, chan):
    # Any valid message, reserved fields included: one draw for all the bits, then each enum field
    # (opcode, RSP_PRE) replaced by a legal encoding; the line comes from a drawn seed.  Few draws keep
    # generation cheap enough for the default profile's 300 examples.
    codec = CODECS[chan]
    value = draw(st.integers(0, (1 << codec.width) - 1)) | 1
    for _, offset, width, enum_cls in codec.fields:
        if enum_cls is not None:
            member = draw(st.sampled_from(list(enum_cls)))
            value = (value & ~(((1 << width) - 1) << offset)) | (member.value << offset)
    data = _line(draw(st.integers(0, 2**32 - 1))) if chan in DATA_CHANNELS else None
    return make_msg(chan, codec.decode(value), data)


ANY_MESSAGE = st.sampled_from(list(Channel)).flatmap(messages)


def per_channel(channels, msgs):
    return {ch: [m for m in msgs if m.chan == ch] for ch in channels}


credit_st = st.builds(Credits, *(st.integers(0, 400) for _ in range(3)))


# ---------------------------------------------------------------- round trips
@given(msgs=st.lists(ANY_MESSAGE, max_size=40), credits=credit_st, acks=st.integers(0, 700))
def test_pack_unpack_round_trip(msgs, credits, acks):
    # Any mix on the six channels: each direction's messages go through its own packer and unpacker.
    for direction in Direction:
        flits = pack(direction, [m for m in msgs if Direction.of(m.chan) is direction], credits, acks)
        assert all(len(f) == F.FLIT_BYTES for f in flits)
        got = unpack(direction, flits)
        assert got.messages == per_channel(direction.channels, msgs)      # identical, per-channel order
        assert got.credits == credits and got.mem_credits == Credits() and got.acks == acks


@given(schedule=st.lists(st.tuples(st.lists(ANY_MESSAGE, max_size=6), st.integers(0, 3)), max_size=6),
       wait=st.sampled_from([0, 0, 1, 4]))
def test_round_trip_with_messages_arriving_between_flits(schedule, wait):
    # Backpressure at the packers' input: messages arrive in batches and 0-3 flits go out each way between
    # batches, so flits are built from partly filled queues with data chunks still owed (and, with
    # ``wait``, from flits held while later batches join them).
    tx = {d: Packer(d, wait) for d in Direction}
    rx = {d: Unpacker(d) for d in Direction}
    sent, got = [], []
    for batch, flits_between in schedule:
        for m in batch:
            tx[Direction.of(m.chan)].push(m)
        sent += batch
        for d in Direction:
            for _ in range(flits_between):
                f = tx[d].next_flit()
                if f is not None:
                    got += rx[d].receive(f).messages
    for d in Direction:
        for f in tx[d].drain():
            got += rx[d].receive(f).messages
        assert rx[d].owed == 0
    assert per_channel(Channel, got) == per_channel(Channel, sent)


@given(msgs=st.lists(ANY_MESSAGE, max_size=30), seed=st.integers(0, 2**32 - 1))
def test_unpacker_decodes_any_legal_policy(msgs, seed):
    rng = random.Random(seed)
    for direction in Direction:
        tx = RandomPolicy(direction, rng)
        for m in msgs:
            if Direction.of(m.chan) is direction:
                tx.push(m)
        flits = []
        while tx.busy:
            flits.append(tx.next_flit())
            assert len(flits) < 1000
        assert unpack(direction, flits).messages == per_channel(direction.channels, msgs)


@given(kind=st.sampled_from(sorted(CONTROL_KINDS)), data=st.data())
def test_control_flit_round_trip(kind, data):
    spec = CONTROL_KINDS[kind][2]
    fields = {name: data.draw(st.integers(0, (1 << F.control_field_width(p)) - 1)) for name, p in spec.items()}
    ctl = control(kind, **fields)
    payload = encode_control(ctl)
    assert payload >> 128 == 0 and payload & 1          # slot 0 only, Type = 1
    assert decode_control(payload) == ctl
    r = Unpacker(UP).receive(seal(payload))
    assert r.kind == "control" and r.control == ctl


@given(kind=st.sampled_from(sorted(CONTROL_KINDS)), data=st.data())
def test_ack_only_llcrd_is_an_llcrd_with_no_credits(kind, data):
    """``cxl.control.is_ack_only_llcrd``: an LLCRD whose three credit fields are 0, whatever its acks;
    never another kind, nor a payload that is not a legal control flit (one reserved bit set)."""
    from cxl.control import is_ack_only_llcrd
    spec = CONTROL_KINDS[kind][2]
    fields = {name: data.draw(st.integers(0, (1 << F.control_field_width(p)) - 1)) for name, p in spec.items()}
    payload = encode_control(control(kind, **fields))
    credits = [v for name, v in fields.items() if name.endswith("_crd")]
    assert is_ack_only_llcrd(payload) == (kind == "LLCRD" and not any(credits))
    assert not is_ack_only_llcrd(payload | 1 << 200)            # bits in slot 1: not a control flit
# ---------------------------------------------------------------- packing rules and policy
def line(seed):
    return bytes((seed * 7 + i) & 0xFF for i in range(64))


def d2h_data(uqid):
    return make_msg(Channel.D2H_DATA, uqid=uqid, chunk_valid=0, bogus=0, poison=0, data=line(uqid))


def h2d_data(cqid):
    return make_msg(Channel.H2D_DATA, cqid=cqid, chunk_valid=0, poison=0, go_err=0, data=line(cqid))


def h2d_rsp(cqid):
    return make_msg(Channel.H2D_RSP, opcode=H2DRspOpcode.GO, rsp_data=0b0010, rsp_pre=0, cqid=cqid)


def snoop(uqid):
    return make_msg(Channel.H2D_REQ, opcode=H2DReqOpcode.SnpData, addr=uqid << 4, uqid=uqid)


def d2h_rsp(uqid):
    return make_msg(Channel.D2H_RSP, opcode=D2HRspOpcode.RspIHitI, uqid=uqid)


def headers(flits):
    return [decode_header(int.from_bytes(f[:4], "little")) for f in flits]


def test_one_line_rolls_one_chunk_into_the_next_flit():
    flits = pack(UP, [d2h_data(1)])
    assert len(flits) == 2
    h0, h1 = headers(flits)
    assert (h0["slot0"], h0["slot1"], h0["slot2"], h0["slot3"], h0["sz"]) == (0, 0, 0, 0, 1)   # H0 + 3 x G0
    assert (h1["slot1"], h1["sz"]) == (0, 0)                                                  # rollover in slot 1
    assert flits[0][16:64] == line(1)[:48] and flits[1][16:32] == line(1)[48:]


def test_four_lines_use_all_data_flits():
    # H3 (4 headers) + 3 chunks, 13 owed: three all-data flits (12), then 1 rolls into slot 1.
    flits = pack(DOWN, [h2d_data(i) for i in range(4)])
    assert len(flits) == 5
    assert headers(flits)[0]["slot0"] == 3
    rx = Unpacker(DOWN)
    assert [rx.receive(f).kind for f in flits] == ["protocol", "all-data", "all-data", "all-data", "protocol"]
    assert b"".join(flits[k][:64] for k in (1, 2, 3)) == b"".join(line(i) for i in range(4))[48:240]


def test_per_flit_maxima_hold():
    # Ref: docs/sources.md §2.2: at most 2 H2D Req and 4 H2D Rsp per downstream flit, 2 D2H Rsp upstream.
    for direction, make in ((DOWN, snoop), (DOWN, h2d_rsp), (UP, d2h_rsp)):
        flits = pack(direction, [make(i) for i in range(20)])
        chan = make(0).chan
        assert len(flits) == -(-20 // MAX_PER_FLIT[chan])
        rx = Unpacker(direction)
        assert all(len(rx.receive(f).messages) == MAX_PER_FLIT[chan] for f in flits)


def test_rotating_priority_keeps_a_response_from_starving_behind_a_read_stream():
    # 40 lines of read data and one GO: a plain "most messages" rule would pick H3 (4 data headers)
    # in every header flit until the data headers ran out.
    tx, rx = Packer(DOWN), Unpacker(DOWN)
    for i in range(40):
        tx.push(h2d_data(i))
    tx.push(h2d_rsp(7))
    protocol_flits = 0
    while True:
        r = rx.receive(tx.next_flit())
        protocol_flits += r.kind == "protocol"
        if any(m.chan is Channel.H2D_RSP for m in r.messages):
            break
    assert protocol_flits <= 3


def d2h_req(seed):
    return F.random_msg(random.Random(seed), Channel.D2H_REQ)


def test_a_chunk_goes_before_a_header_worth_no_more_than_its_slot():
    """The flit with the best score (cxl.packing): a header slot costs a slot (SLOT_COST), a chunk
    nothing, as it has to go in some flit anyway.  A Data Header and two Reqs: H1 (Req + Data Header),
    G0 (its first chunk: forced); the second Req is worth exactly the slot it would take, and on that
    tie the flit with fewer header slots wins: the line's next two chunks go now, the Req in the next
    flit beside the last chunk (the old "headers first" rule sent the Req now and rolled two chunks
    over)."""
    tx, rx = Packer(UP), Unpacker(UP)
    tx.push(d2h_data(1))
    tx.push(d2h_req(1))
    tx.push(d2h_req(2))
    first, second = tx.drain()
    h = headers([first])[0]
    assert (h["slot0"], h["slot1"], h["slot2"], h["slot3"]) == (1, 0, 0, 0)
    assert [m.chan for m in rx.receive(first).messages] == [Channel.D2H_REQ]
    assert headers([second])[0]["slot1"] == 0                                        # the rolled-over chunk
    assert sorted(m.chan for m in rx.receive(second).messages) == [Channel.D2H_REQ, Channel.D2H_DATA]


def test_a_request_is_worth_more_than_a_slot_of_data_headers():
    """cxl.packing.MESSAGE_VALUE: with no priority channel to place, slot 0 takes H1 (a Req and a Data
    Header, worth 4 + 1) over H2 (four Data Headers, more messages but worth 4)."""
    tx = Packer(UP)
    tx.push(d2h_rsp(1))
    assert tx.next_flit() is not None               # the first flit (REQ priority) sends the response
    tx.push(d2h_req(1))
    for i in range(4):
        tx.push(d2h_data(i))
    assert headers([tx.next_flit()])[0]["slot0"] == 1     # RSP priority, no response queued


def test_the_priority_channel_counts_only_where_the_flit_would_miss_it():
    """RSP priority, two Reqs, a Rsp and a Data Header queued: the flit planned without a priority
    carries the Rsp anyway (in G1 beside the second Req), so slot 0 keeps H1 (Req + Data Header);
    putting the priority channel into slot 0 regardless would take H0 (Data Header + Rsp) and push a
    Req out of the flit."""
    tx, rx = Packer(UP), Unpacker(UP)
    tx.push(d2h_rsp(9))
    rx.receive(tx.next_flit())                        # the first flit (REQ priority) sends it
    for m in (d2h_req(1), d2h_req(2), d2h_rsp(1), d2h_data(1)):
        tx.push(m)
    flit = tx.next_flit()
    assert headers([flit])[0]["slot0"] == 1
    # (the Data Header comes out of the receiver with its line, once the rolled-over chunks arrive)
    assert sorted(m.chan for m in rx.receive(flit).messages) == [Channel.D2H_REQ, Channel.D2H_REQ, Channel.D2H_RSP]


def test_ak_and_credits_ride_in_headers_then_llcrd():
    tx = Packer(UP)
    tx.push(d2h_rsp(1))
    tx.acknowledge(20)
    tx.return_credits(req=70, rsp=3, data=1)
    flits = tx.drain()
    rx = Unpacker(UP)
    first = rx.receive(flits[0])
    assert first.kind == "protocol" and first.acks == 8 and first.credits == Credits(64, 2, 1)
    rest = [rx.receive(f) for f in flits[1:]]
    assert all(r.kind == "control" and r.control.kind == "LLCRD" for r in rest)
    assert sum((r.credits for r in rest), Credits()) == Credits(6, 1, 0) and sum(r.acks for r in rest) == 12


def test_mixed_workload_is_within_its_bound():
    """The mixed workload's optimum is a lower bound on flits: the packer can never beat it."""
    e = F.efficiency("mixed", n=256)
    assert e["optimum"]["bound"] and e["flits"] >= e["optimum"]["flits"]
    assert 0.85 < e["efficiency"] / e["optimum"]["efficiency"] <= 1


def _fewest_by_search(direction, counts):
    """The fewest flits to send ``counts`` messages per channel (all queued, no control flits), by
    searching every legal flit sequence: each slot any format the unpacker accepts there (G0 where the
    rollover or next-data-slot rule forces it, else a G0 while chunks are owed or any header format;
    an MDH format only with 2+ Data Headers; Data Headers in one slot per flit; the per-flit maxima),
    each format filled as far as the queues and maxima allow.  Breadth first over flits, keeping only
    states no other state of the same depth is at least as far along in every queue and chunk count."""
    chans = direction.channels
    data = chans.index(direction.data_channel)
    mine = [f for (d, _, _), f in SLOT_FORMATS.items() if d is direction and not f.data]
    h_formats, g_formats = [f for f in mine if f.kind == "H"], [f for f in mine if f.kind == "G"]

    def after_one_flit(queued, owed):
        if owed >= 4:                                       # all-data flit
            return {(queued, owed - 4)}
        out, rollover = set(), owed

        def slot(s, queued, owed, in_flit, hdr_slot):
            if s == 4:
                out.add((queued, owed))
                return
            forced = s >= 1 and (s <= rollover or (hdr_slot is not None and s == max(hdr_slot + 1, rollover + 1)))
            if s >= 1 and owed:
                slot(s + 1, queued, owed - 1, in_flit, hdr_slot)
            if forced:
                return
            for fmt in h_formats if s == 0 else g_formats:
                took = [0, 0, 0]
                for item, _, _ in fmt.fields:
                    if item in chans and not (chans.index(item) == data and hdr_slot is not None):
                        i = chans.index(item)
                        if took[i] < queued[i] and in_flit[i] + took[i] < MAX_PER_FLIT[item]:
                            took[i] += 1
                if fmt.mdh and took[data] < 2:
                    continue
                slot(s + 1, tuple(q - t for q, t in zip(queued, took)), owed + 4 * took[data],
                     tuple(c + t for c, t in zip(in_flit, took)), s if took[data] else hdr_slot)

        slot(0, queued, owed, (0, 0, 0), None)
        return out

    layer, flits = {(tuple(counts), 0)}, 0
    while ((0, 0, 0), 0) not in layer:
        reached = set().union(*(after_one_flit(q, o) for q, o in layer))
        ordered = sorted(reached, key=lambda st_: sum(st_[0]) + st_[1])
        layer = set()
        for q, o in ordered:
            if not any(o2 <= o and all(a <= b for a, b in zip(q2, q)) for q2, o2 in layer):
                layer.add((q, o))
        flits += 1
    return flits


@pytest.mark.parametrize("n", [4, 8, 12, 16, 24])
def test_mixed_bound_is_the_exact_optimum(n):
    """fewest_flits (an integer programme over slot counts) equals the fewest flits an exhaustive search
    of legal flit sequences finds, per direction of the mixed workload."""
    for direction, msgs in F.workload_streams("mixed", n, random.Random(0)):
        counts = [sum(m.chan is c for m in msgs) for c in direction.channels]
        assert F.fewest_flits(direction, msgs) == _fewest_by_search(direction, counts), (direction, counts)


def test_mixed_bound_never_above_the_search():
    """On every mix of up to 4 messages per channel the bound is at most the searched optimum (it is a
    bound), and where one Data Header slot per flit is what binds it is exact."""
    rng = random.Random(0)
    for direction in Direction:
        for counts in itertools.product(range(5), repeat=3):
            msgs = [F.random_msg(rng, ch) for ch, k in zip(direction.channels, counts) for _ in range(k)]
            assert F.fewest_flits(direction, msgs) <= _fewest_by_search(direction, list(counts)), (direction, counts)
    # Four H2D Req and four single Data Headers: without the one-slot-per-flit rule 5 flits would do.
    msgs = [F.random_msg(rng, ch) for ch, k in zip(DOWN.channels, (4, 1, 4)) for _ in range(k)]
    assert F.fewest_flits(DOWN, msgs) == _fewest_by_search(DOWN, [4, 1, 4]) == 6


@pytest.mark.parametrize("workload", [w for w in F.WORKLOADS if w != "mixed"])
def test_fewest_flits_gives_the_closed_forms(workload):
    for n in (1, 3, 4, 5, 16, 17, 100):
        streams = F.workload_streams(workload, n, random.Random(0))
        assert sum(F.fewest_flits(d, msgs) for d, msgs in streams) == F.optimum(workload, n)["flits"], n


@given(msgs=st.lists(ANY_MESSAGE, max_size=40))
def test_no_packer_beats_the_bound(msgs):
    for direction in Direction:
        mine = [m for m in msgs if Direction.of(m.chan) is direction]
        assert len(pack(direction, mine)) >= F.fewest_flits(direction, mine)


@pytest.mark.parametrize("workload", [w for w in F.WORKLOADS if w != "mixed"])
def test_efficiency_reaches_the_analytic_optimum(workload):
    e = F.efficiency(workload, n=256)
    assert e["flits"] == e["optimum"]["flits"]
    assert e["efficiency"] == pytest.approx(e["optimum"]["efficiency"])
    assert 0 < e["limit"]["efficiency"] < 64 / 68


def test_efficiency_figures():
    # Streaming: 17 flits per 16 lines -> 1024 / (17 * 68) of data.  Snoops: 2 per flit each way.
    assert F.optimum("streaming_reads")["data_efficiency"] == pytest.approx(1024 / 1156)
    assert F.optimum("streaming_reads")["efficiency"] == pytest.approx(16 * (64 + 3) / 1156)
    assert F.optimum("streaming_writes")["efficiency"] == pytest.approx(16 * (64 + 17 / 8) / 1156)
    assert F.optimum("snoop_storm")["efficiency"] == pytest.approx(16 * (8 + 2.5) / (16 * 68))


# ---------------------------------------------------------------- malformed input
def slot_bits(direction, kind, code, msgs):
    """Slot contents for format ``kind``/``code`` with ``msgs`` (a raw int for a position or None)."""
    fmt = SLOT_FORMATS[direction, kind, code]
    bits = 0
    for (_, offset, _), v in zip(fmt.fields, msgs):
        bits |= (v or 0) << offset
    return bits


def protocol_flit(slots, **hdr):
    """slots: four (code, bits) pairs; header fields default to a legal CXL.cache protocol flit."""
    header = {"type": 0, **{f"slot{s}": code for s, (code, _) in enumerate(slots)}, **hdr}
    payload = encode_header(header) | slots[0][1] << 32
    for s in range(1, 4):
        payload |= slots[s][1] << (128 * s)
    return seal(payload)


EMPTY_G = (1, 0)
SNP = CODECS[Channel.H2D_REQ].encode(snoop(1).fields)


def rejects(direction, flits, field, words=""):
    rx = Unpacker(direction)
    with pytest.raises(FlitError) as e:
        for f in flits:
            rx.receive(f)
    assert e.value.field == field and words in str(e.value), str(e.value)
    return rx


def test_good_hand_built_flit_decodes():
    flit = protocol_flit([(0, slot_bits(DOWN, "H", 0, [SNP, None])), EMPTY_G, EMPTY_G, EMPTY_G])
    assert Unpacker(DOWN).receive(flit).messages == [snoop(1)]


@pytest.mark.parametrize("direction, slot, code, words", [
    (DOWN, 1, 7, "reserved"), (DOWN, 2, 6, "reserved"), (UP, 3, 7, "reserved"), (DOWN, 0, 7, "reserved"),
    (UP, 0, 7, "reserved"), (DOWN, 0, 4, "CXL.mem"), (DOWN, 1, 5, "CXL.mem"), (UP, 0, 3, "CXL.mem"),
    (UP, 2, 6, "CXL.mem"), (DOWN, 0, 6, "IDE"),
])
def test_reserved_and_unsupported_slot_formats(direction, slot, code, words):
    slots = [(0, 0), EMPTY_G, EMPTY_G, EMPTY_G]
    slots[slot] = (code, 0)
    rejects(direction, [protocol_flit(slots)], f"Slot{slot}", words)


def test_reserved_opcode_names_the_field():
    bad = SNP & ~(0b111 << 1)                             # H2D Req opcode 000 is no H2DReqOpcode
    rejects(DOWN, [protocol_flit([(0, slot_bits(DOWN, "H", 0, [bad, None])), EMPTY_G, EMPTY_G, EMPTY_G])],
            "Slot0", "opcode")
    bad_rsp = CODECS[Channel.D2H_RSP].encode(d2h_rsp(1).fields) | (0b11111 << 1)
    rejects(UP, [protocol_flit([(0, 0), (1, slot_bits(UP, "G", 1, [None, bad_rsp, None])), EMPTY_G, EMPTY_G])],
            "Slot1", "opcode")


def test_nonzero_padding_ndr_and_invalid_messages():
    rejects(DOWN, [protocol_flit([(1, 1 << 90), EMPTY_G, EMPTY_G, EMPTY_G])], "Slot0", "padding")
    ndr_offset = SLOT_FORMATS[UP, "H", 0].fields[3][1]
    rejects(UP, [protocol_flit([(0, 1 << ndr_offset), EMPTY_G, EMPTY_G, EMPTY_G])], "Slot0", "S2M NDR")
    rejects(DOWN, [protocol_flit([(0, SNP & ~1), EMPTY_G, EMPTY_G, EMPTY_G])], "Slot0", "invalid")


def test_data_slot_rules():
    rejects(DOWN, [protocol_flit([(0, 0), (0, 0), EMPTY_G, EMPTY_G])], "Slot1", "no data header")
    hdr = CODECS[Channel.H2D_DATA].encode(h2d_data(3).fields)
    # H2 with a data header, two chunks now: 2 owed, so the next flit's slots 1-2 must be G0.
    first = protocol_flit([(2, slot_bits(DOWN, "H", 2, [None, hdr])), (0, 0), (0, 0), EMPTY_G], sz=1)
    second = protocol_flit([(0, 0), (0, 0), EMPTY_G, EMPTY_G])
    rejects(DOWN, [first, second], "Slot2", "roll over")
    ctl = seal(encode_control(control("RETRY.Idle")))
    rejects(DOWN, [first, ctl], "Type", "owed")
    rejects(DOWN, [protocol_flit([(2, slot_bits(DOWN, "H", 2, [None, hdr])), (0, 0), (0, 0), EMPTY_G])], "Sz")
    rejects(DOWN, [protocol_flit([(0, 0), EMPTY_G, EMPTY_G, EMPTY_G], sz=1)], "Sz")
    rejects(DOWN, [protocol_flit([(0, 0), EMPTY_G, EMPTY_G, EMPTY_G], be=1)], "BE")
    with pytest.raises(FlitError) as e:
        unpack(DOWN, [first])
    assert e.value.field == "stream"


def test_per_flit_maximum_enforced_on_receive():
    rsp = CODECS[Channel.D2H_RSP].encode(d2h_rsp(1).fields)
    flit = protocol_flit([(0, slot_bits(UP, "H", 0, [None, rsp, rsp, None])),
                          (2, slot_bits(UP, "G", 2, [None, None, rsp])), EMPTY_G, EMPTY_G])
    rejects(UP, [flit], "Slot1", "more than 2 D2H_RSP")


def test_header_reserved_bits_crc_length_and_framing():
    good = protocol_flit([(0, 0), EMPTY_G, EMPTY_G, EMPTY_G])
    rejects(DOWN, [protocol_flit([(0, 0), EMPTY_G, EMPTY_G, EMPTY_G], rsvd1=1)], "reserved")
    rejects(DOWN, [good[:10] + bytes([good[10] ^ 4]) + good[11:]], "CRC")
    rejects(DOWN, [good[:65]], "length")
    with pytest.raises(FlitError) as e:
        F.deframe(b"\xff\xff" + good)                      # CXL.io protocol ID
    assert e.value.field == "ProtocolID"
    assert F.deframe(F.frame(good)) == good


@pytest.mark.parametrize("payload, field", [
    (1 | 0b0111 << 32, "LLCTRL"),                           # LLCTRL 0111 reserved
    (1 | 0b0001 << 32 | 0b0100 << 36, "SubType"),           # RETRY SubType 0100 reserved
    (1 | 0b0000 << 32 | 0b0000 << 36, "SubType"),           # LLCRD needs SubType Ack
    (1 | 0b010 << 5, "CTL_FMT"),                            # CTL_FMT 010 reserved
    (1 | 0b001 << 5 | 0b0010 << 32, "CTL_FMT"),             # IDE not supported
    (1 | 0b0010 << 32, "LLCTRL"),                           # IDE LLCTRL under CTL_FMT 000
    (encode_control(control("RETRY.Idle")) | 1 << 40, "reserved"),      # bits 63:40 must be zero
    (encode_control(control("RETRY.Req")) | 1 << 76, "reserved"),       # RETRY.Req payload gap
    (encode_control(control("LLCRD")) | 1 << 67, "reserved"),           # between Acknowledge pieces
    (encode_control(control("RETRY.Frame")) | 1 << 2, "reserved"),      # no Ak outside LLCRD
    (encode_control(control("INIT.Param")) | 1 << 200, "Slot1-3"),      # slot 0 only
])
def test_bad_control_flits(payload, field):
    rejects(UP, [seal(payload)], field)


def test_a_rejected_flit_leaves_the_unpacker_unchanged():
    flits = pack(DOWN, [h2d_data(1), snoop(2)])
    rx = Unpacker(DOWN)
    rx.receive(flits[0])
    owed = rx.owed
    with pytest.raises(FlitError):
        rx.receive(flits[1][:3] + bytes([flits[1][3] ^ 1]) + flits[1][4:])
    assert rx.owed == owed
    assert [m.chan for m in rx.receive(flits[1]).messages] == [Channel.H2D_DATA]


def test_make_msg_rejects_bad_messages():
    with pytest.raises(ValueError):
        make_msg(Channel.H2D_DATA, cqid=1, chunk_valid=0, poison=0, go_err=0)        # no line
    with pytest.raises(ValueError):
        make_msg(Channel.H2D_REQ, valid=0, opcode=H2DReqOpcode.SnpInv, addr=0, uqid=0)
    with pytest.raises(ValueError):
        Packer(UP).push(snoop(1))                                                     # wrong direction


# ---------------------------------------------------------------- vectors
def test_vectors_round_trip_through_the_unpacker(tmp_path):
    path = tmp_path / "flits.jsonl"
    assert F.main(["--vectors", str(path), "--count", "1000", "--seed", "1"]) == 0
    lines = path.read_text().splitlines()
    assert len(lines) == 1000
    kinds = set()
    for text in lines:
        obj = json.loads(text)
        direction = Direction(obj["direction"])
        msgs = [F.msg_from_json(m) for m in obj["messages"]]
        wire = [bytes.fromhex(h) for h in obj["flits"]]
        assert all(len(w) == F.WIRE_BYTES and w[:2] == b"\x55\x55" for w in wire)
        flits = [F.deframe(w) for w in wire]
        rx = Unpacker(direction)
        kinds |= {rx.receive(f).kind for f in flits}
        got = unpack(direction, flits)
        assert got.messages == per_channel(direction.channels, msgs)
        assert got.credits == Credits(**obj["credits"]) and got.acks == obj["acks"]
        assert [F.msg_to_json(m) for m in msgs] == obj["messages"]
        assert pack(direction, msgs, Credits(**obj["credits"]), obj["acks"]) == flits   # reproducible
    assert kinds == {"protocol", "all-data", "control"}


# ---------------------------------------------------------------- waiting to fill a flit (``wait``)
def _warm(tx, direction=UP):
    """A packer that has just sent a protocol flit (one lone message: a cold packer sends it at once)."""
    tx.push(d2h_rsp(99) if direction is UP else snoop(99))
    assert tx.next_flit() is not None and not tx.busy
    return tx


def test_wait_holds_only_right_after_a_protocol_flit():
    tx, rx = Packer(UP, wait=3), Unpacker(UP)
    tx.push(d2h_rsp(1))
    assert [m.fields["uqid"] for m in rx.receive(tx.next_flit()).messages] == [1]   # cold: at once
    tx.push(d2h_rsp(2))
    assert tx.next_flit() is None and tx.next_flit() is None      # a flit just went: held, more may join
    tx.push(d2h_rsp(3))                                           # 2 D2H Rsp: the per-flit maximum
    r = rx.receive(tx.next_flit())                                # full: sent before the third hold
    assert [m.fields["uqid"] for m in r.messages] == [2, 3]
    tx.push(d2h_rsp(4))
    assert [tx.next_flit() for _ in range(3)] == [None] * 3       # at most wait = 3 decisions after it
    assert [m.fields["uqid"] for m in rx.receive(tx.next_flit()).messages] == [4]
    tx.push(d2h_rsp(5))
    assert tx.next_flit() is None                                 # 1 decision after the flit: held
    assert [tx.next_flit() for _ in range(2)] == [None] * 2       # (pushed right after the flit: the
    assert [m.fields["uqid"] for m in rx.receive(tx.next_flit()).messages] == [5]   # whole window again)
    assert [tx.next_flit() for _ in range(3)] == [None] * 3       # idle for wait decisions: cold again
    tx.push(d2h_rsp(6))
    assert [m.fields["uqid"] for m in rx.receive(tx.next_flit()).messages] == [6]


def test_wait_window_counts_from_the_last_protocol_flit():
    tx = _warm(Packer(UP, wait=4))
    assert [tx.next_flit() for _ in range(2)] == [None] * 2       # two idle decisions of the window
    tx.push(d2h_rsp(1))
    assert [tx.next_flit() for _ in range(2)] == [None] * 2       # the two left
    assert tx.next_flit() is not None


def test_wait_zero_is_the_eager_policy():
    msgs = [d2h_rsp(i) for i in range(3)] + [d2h_data(i) for i in range(2)]
    assert pack(UP, msgs, Credits(5, 0, 1), 3, wait=0) == pack(UP, msgs, Credits(5, 0, 1), 3)
    eager = Packer(UP)
    eager.push(d2h_rsp(1))
    assert eager.next_flit() is not None


def test_wait_sends_a_full_flit_at_once():
    tx = Packer(UP, wait=5)
    for ch in UP.channels:          # every channel at its per-flit maximum: nothing more can join
        for i in range(MAX_PER_FLIT[ch]):
            tx.push(F.random_msg(random.Random(i), ch))
    assert tx.full() and tx.next_flit() is not None
    lone = _warm(Packer(UP, wait=5))
    lone.push(d2h_rsp(1))
    assert not lone.full() and lone.next_flit() is None       # a second response could join
    pair = _warm(Packer(DOWN, wait=5), DOWN)                  # 2 snoops: the H2D Req maximum per flit;
    pair.push(snoop(1))                                       # other channels are idle and do not count
    pair.push(snoop(2))
    assert pair.full() and pair.next_flit() is not None


def test_wait_never_holds_owed_chunks_or_due_returns():
    tx = _warm(Packer(UP, wait=4))
    tx.push(d2h_data(1))
    for _ in range(4):
        assert tx.next_flit() is None                    # a lone data header may wait for company
    assert tx.next_flit() is not None and tx.chunks      # header + 3 chunks; one chunk owed
    tx.push(d2h_rsp(1))
    assert tx.next_flit() is not None                    # the owed chunk goes at once
    for acks, credits, holds in ((15, (0, 0, 0), True), (16, (0, 0, 0), False),
                                 (0, (0, 31, 0), True), (0, (0, 0, 32), False), (0, (32, 0, 0), False)):
        tx = _warm(Packer(UP, wait=4))
        tx.push(d2h_rsp(1))
        tx.acknowledge(acks)
        tx.return_credits(*credits)
        assert (tx.next_flit() is None) == holds, (acks, credits)


@given(msgs=st.lists(ANY_MESSAGE, max_size=30), wait=st.integers(1, 6))
def test_wait_round_trip(msgs, wait):
    for direction in Direction:
        mine = [m for m in msgs if Direction.of(m.chan) is direction]
        got = unpack(direction, pack(direction, mine, Credits(3, 0, 70), 9, wait=wait))
        assert got.messages == per_channel(direction.channels, mine)
        assert got.credits == Credits(3, 0, 70) and got.acks == 9


@pytest.mark.parametrize("wait", [-1, 256, 2.0, True, "3"])
def test_wait_must_be_a_small_integer(wait):
    with pytest.raises(ValueError, match="wait"):
        Packer(UP, wait=wait)


@given(order=st.lists(st.sampled_from(["rsp", "req", "data", "flit"]), max_size=60),
       wait=st.sampled_from([0, 1, 3]))
def test_no_snoop_overtakes_a_go(order, wait):
    """CXL 3.x §3.2.5.2 (docs/sources.md §1.7): an H2D Req goes in a flit after every H2D Rsp pushed
    before it, whatever else is queued and whatever the wait; and everything still arrives, per channel
    in order.  ``order``: pushes of each kind and flit decisions, in the drawn order."""
    tx, rx = Packer(DOWN, wait=wait), Unpacker(DOWN)
    make = {"rsp": h2d_rsp, "req": snoop, "data": h2d_data}
    pushed, n = [], 0
    flits = []
    for what in order:
        if what == "flit":
            flit = tx.next_flit()
            if flit is not None:
                flits.append(flit)
        else:
            n += 1
            tx.push(make[what](n))
            pushed.append((what, n))
    flits += tx.drain()
    where = {}                                     # (kind, id) -> the flit that completed it
    for i, flit in enumerate(flits):
        for msg in rx.receive(flit).messages:
            kind = {Channel.H2D_RSP: "rsp", Channel.H2D_REQ: "req", Channel.H2D_DATA: "data"}[msg.chan]
            where[kind, msg.fields["cqid" if kind != "req" else "uqid"]] = i
    assert sorted(where) == sorted(pushed)
    for k, (what, ident) in enumerate(pushed):
        if what == "req":
            before = [where[p] for p in pushed[:k] if p[0] == "rsp"]
            assert all(f < where[what, ident] for f in before), (
                f"snoop {ident} in flit {where[what, ident]}, an earlier GO in flit {max(before)}")


def test_slot_plan_names_bad_counts():
    """The shared slot planner (cxl.packing) says which count is wrong rather than planning nonsense."""
    from cxl.packing import flit_full, plan_flit
    with pytest.raises(ValueError, match="avail"):
        plan_flit(UP, (1, 2), 0, 0)                   # two counts for three channels
    with pytest.raises(ValueError, match="avail"):
        flit_full(DOWN, (1, -1, 0), 0)
    with pytest.raises(ValueError, match="owed"):
        plan_flit(UP, (1, 0, 0), 0, 4)                # four chunks owed make an all-data flit
    with pytest.raises(ValueError, match="priority"):
        plan_flit(UP, (1, 0, 0), 3, 0)
    plan = plan_flit(UP, (9, 9, 9), 0, 0)             # counts above the per-flit maxima are capped
    assert plan == plan_flit(UP, tuple(MAX_PER_FLIT[ch] for ch in UP.channels), 0, 0)


def test_an_idle_packer_gathers_credits_into_batches():
    """``credit_batch`` = 4: a packer quiet since reset returns a credit at once; after that LLCRD it
    gathers credits for 3 decisions before the next, unless 4 of one class wait; B = 1 never gathers."""
    def returned(flit):
        got = Unpacker(UP).receive(flit)
        assert got.kind == "control" and got.control.kind == "LLCRD"
        return got.credits
    tx = Packer(UP, credit_batch=4)
    tx.return_credits(rsp=1)
    assert returned(tx.next_flit()) == Credits(0, 1, 0)
    tx.return_credits(rsp=1)
    assert [tx.next_flit() for _ in range(3)] == [None] * 3
    tx.return_credits(req=2)
    assert returned(tx.next_flit()) == Credits(2, 1, 0)
    tx.return_credits(data=4)                                 # a whole batch: at once
    assert returned(tx.next_flit()) == Credits(0, 0, 4)
    eager = Packer(UP)
    eager.return_credits(rsp=1)
    eager.next_flit()
    eager.return_credits(rsp=1)
    assert returned(eager.next_flit()) == Credits(0, 1, 0)
    with pytest.raises(ValueError, match="credit_batch"):
        Packer(UP, credit_batch=0)


@pytest.mark.parametrize("depth", range(1, 6))
def test_drain_worst_placement_is_a_two_step_one(depth):
    """models/flit/drain.py's shortcut: of every placement of the H2D Reqs among the H2D Rsps, one of the
    two-step placements (the first Reqs behind the same Rsps, the rest behind every Rsp) takes the most
    flits to drain, as the shortcut assumes."""
    from models.flit.drain import drain_flits, worst_drain
    every = worst_drain(Direction.DOWNSTREAM, depth, orders="all")
    assert worst_drain(Direction.DOWNSTREAM, depth, orders="worst")[0] == every[0]
    if depth == 4:
        # the placement matters: with every Req first the same state drains in fewer flits, and every
        # Req behind every Rsp is not the worst here
        owed, prio, _ = every[1]
        assert drain_flits(Direction.DOWNSTREAM, 4, owed, prio, (0, 0, 0, 0)) < every[0]
        assert max(drain_flits(Direction.DOWNSTREAM, 4, o, p, (4, 4, 4, 4))
                   for o in range(17) for p in range(3)) < every[0]


def test_drain_shortcut_names_a_bad_order():
    from models.flit.drain import worst_drain
    with pytest.raises(ValueError, match="orders"):
        worst_drain(Direction.UPSTREAM, 4, orders="some")
