"""The flit decoder for people: ``python -m models.flit decode`` / ``encode`` (models/flit/json_form.py)."""

import json
import random
import subprocess
import sys

import pytest

from models import flit as F
from models.flit import Direction, frame, seal
from models.flit.json_form import decode_stream, encode_flit

UP = Direction.UPSTREAM


def test_round_trip_over_make_vectors_flits(tmp_path):
    """Every flit of the ``make vectors`` stream (python -m models.flit --vectors) decodes without error and
    encodes back to the same 68 bytes; the messages the decoder reports delivered are the vector's."""
    path = F.write_vectors(tmp_path / "v.jsonl", count=300, seed=1)
    kinds = set()
    for line in path.read_text().splitlines():
        vec = json.loads(line)
        wire = [bytes.fromhex(h) for h in vec["flits"]]
        objs = list(decode_stream(vec["direction"], wire))
        assert not [o for o in objs if "error" in o]
        kinds |= {o["kind"] for o in objs}
        assert [encode_flit(json.loads(json.dumps(o))).hex() for o in objs] == vec["flits"]
        delivered = [m for o in objs for m in o["delivered"]]
        key = lambda m: m["channel"]                                   # noqa: E731
        for chan in {m["channel"] for m in vec["messages"]}:
            assert [m for m in delivered if key(m) == chan] == [m for m in vec["messages"] if key(m) == chan]
    assert kinds == {"protocol", "all-data", "control"}


def test_decoded_protocol_flit_reads_as_the_slots_carry_it():
    rng = random.Random(3)
    rsp, line = F.random_msg(rng, F.Channel.D2H_RSP), F.random_msg(rng, F.Channel.D2H_DATA)
    flits = F.pack(UP, [rsp, line])
    first, second = decode_stream(UP, [frame(f) for f in flits])
    assert first["kind"] == "protocol" and first["header"]["sz"] == 1
    h0 = first["slots"][0]
    assert h0["format"] == "H0"
    assert [(m["position"], m["channel"]) for m in h0["messages"]] == [(0, "D2H_DATA"), (1, "D2H_RSP")]
    assert h0["messages"][1]["fields"]["opcode"] == rsp.fields["opcode"].name
    assert [s["format"] for s in first["slots"][1:]] == ["G0"] * 3
    assert first["slots"][1]["data"] == line.data[:16].hex()
    assert [m["channel"] for m in first["delivered"]] == ["D2H_RSP"]
    assert second["delivered"][0]["data"] == line.data.hex()          # the line completes in flit 2


def test_a_broken_rule_is_named_with_its_specification_reference():
    value = F.encode_header({"slot1": 1, "slot2": 1, "slot3": 1, "rsvd1": 1})
    (obj,) = decode_stream(UP, [frame(seal(value))])
    assert obj["error"]["rule"] == "reserved" and obj["error"]["field"] == "reserved"
    assert "CXL 1.1 §4.2.2" in obj["error"]["ref"]
    with pytest.raises(ValueError, match="rejected flit has no content"):
        encode_flit(obj)


def test_the_stream_goes_on_after_a_rejected_flit():
    rng = random.Random(5)
    flits = [frame(f) for f in F.pack(UP, [F.random_msg(rng, F.Channel.D2H_DATA) for _ in range(2)])]
    bad = bytearray(flits[0])
    bad[10] ^= 1                                                         # CRC now wrong
    objs = list(decode_stream(UP, [bytes(bad)] + flits))
    assert objs[0]["error"]["rule"] == "crc"
    assert all("error" not in o for o in objs[1:])


def _cli(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "models.flit", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def test_command_line_decode_encode_and_errors():
    rng = random.Random(7)
    flits = [frame(f).hex() for f in F.pack(UP, [F.random_msg(rng, ch) for ch in UP.channels])]
    dec = _cli("decode", "-d", "upstream", *flits)
    assert dec.returncode == 0, dec.stderr
    assert _cli("encode", stdin=dec.stdout).stdout.split() == flits         # stdin, one per line
    bad = _cli("decode", "-d", "upstream", "5555" + "00" * 66)
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["rule"] == "no_data"
    for args, stdin, text in ((("decode", "-d", "upstream", "xyz"), "", "not a hex string"),
                              (("decode", "-d", "upstream", "55" * 10), "", None),
                              (("encode",), "{not json", "not JSON"),
                              (("encode",), '{"direction": "upstream", "kind": "banana"}', "kind 'banana'")):
        r = _cli(*args, stdin=stdin)
        if text is None:                                                   # a short flit: the length rule
            assert r.returncode == 1 and json.loads(r.stdout)["error"]["rule"] == "length"
        else:
            assert r.returncode == 2 and text in r.stderr, r.stderr


def test_encode_names_a_bad_field():
    obj = next(decode_stream(UP, [frame(F.pack(UP, [F.random_msg(random.Random(1), F.Channel.D2H_RSP)])[0])]))
    obj["slots"][0]["messages"][0]["fields"]["opcode"] = "RspBogus"
    with pytest.raises(ValueError, match="RspBogus.* is not a D2HRspOpcode name"):
        encode_flit(obj)
    obj["slots"][0]["format"] = "H2"
    with pytest.raises(ValueError, match="says H2 but the header's slot0 is H0"):
        encode_flit(obj)
