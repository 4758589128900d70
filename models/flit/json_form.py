"""68B flits as JSON, for people: what ``python -m models.flit decode`` prints and ``encode`` reads.

``decode_stream(direction, wire_flits)`` checks a stream of 68-byte flits (the ``make vectors`` byte
order: the 2-byte protocol ID, then payload bytes 0..63 -- payload bit ``i`` is bit ``i % 8`` of byte
``i // 8`` -- then the CRC, low byte first) with the golden :class:`models.flit.Unpacker` and gives one
JSON object per flit:

* a good flit: ``{"flit": n, "direction", "kind", ...}`` with, by kind,
  ``protocol``: ``header`` (every header field, as numbers) and ``slots`` (per slot its ``format``,
  ``"H1"``, and either ``messages`` -- each valid message with its ``position`` in the format, its
  ``channel`` and its ``fields``, enum fields by name -- or, for G0, the 16-byte ``data`` chunk in hex);
  ``all-data``: the four ``chunks`` in hex; ``control``: ``control`` = ``{"kind", "fields"}``.
  Every good flit also has ``credits`` and ``mem_credits`` (amounts returned), ``acks`` and
  ``delivered``: the messages it completes (a data header once its fourth chunk has arrived, with the
  line), in the ``make vectors`` message form.
* a rejected flit: ``{"flit": n, "direction", "error": {"field", "message", "rule", "ref"}}`` -- the
  rule it breaks and where the specification writes it (``cxl.flit.RULE_REFS``).  The stream goes
  on from the state before that flit (as the link's retry would).

``encode_flit(obj)`` builds the 68-byte flit back from such an object (good flits only; the CRC is
computed), so ``encode(decode(x)) == x`` for every good flit.  Bad input to either raises ValueError
naming the problem.
"""

import enum

from cxl.control import CONTROL_KINDS, control, encode_control
from cxl.flit import (CHUNK_BYTES, H_SLOT_BITS, HEADER_BITS, PAYLOAD_BYTES, SLOT_BITS, SLOT_FORMATS, SLOTS, S2M_NDR,
                      Direction, FlitError, decode_header, encode_header, get_bits)
from cxl.messages import CODECS

from .crc import deframe, frame, seal
from .messages import msg_to_json
from .unpacker import Unpacker

__all__ = ["decode_stream", "encode_flit", "parse_hex"]


def parse_hex(text, where):
    """68 bytes from a hex string (spaces and a 0x prefix allowed), or ValueError naming ``where``."""
    t = text.strip().lower().replace(" ", "")
    if t.startswith("0x"):
        t = t[2:]
    try:
        return bytes.fromhex(t)
    except ValueError:
        raise ValueError(f"{where}: not a hex string: {text.strip()[:40]!r}") from None


def _fields_json(fields):
    return {k: (v.name if isinstance(v, enum.Enum) else int(v)) for k, v in fields.items()}


def _fields_from_json(chan, fields, where):
    enums = {name: enum_cls for name, _, _, enum_cls in CODECS[chan].fields if enum_cls is not None}
    out = {}
    for k, v in fields.items():
        if k in enums and isinstance(v, str):
            try:
                v = enums[k][v]
            except KeyError:
                raise ValueError(f"{where}: {chan.name}.{k}: {v!r} is not a {enums[k].__name__} name "
                                 f"(one of {[m.name for m in enums[k]]})") from None
        out[k] = v
    return out


def _slot_json(direction, kind, code, bits):
    fmt = SLOT_FORMATS[direction, kind, code]
    if fmt.data:
        return {"format": fmt.name, "data": bits.to_bytes(CHUNK_BYTES, "little").hex()}
    msgs = []
    for pos, (item, offset, width) in enumerate(fmt.fields):
        v = get_bits(bits, offset, width)
        if item == S2M_NDR or not v & 1:        # the unpacker has checked these positions are zero
            continue
        msgs.append({"position": pos, "channel": item.name,
                     "fields": _fields_json(CODECS[item].decode(v))})
    return {"format": fmt.name, "messages": msgs}


def decode_stream(direction, wire_flits):
    """One JSON-ready dict per 68-byte flit of ``wire_flits`` (see the module docstring)."""
    direction = Direction(direction)
    rx = Unpacker(direction)
    for n, wire in enumerate(wire_flits):
        base = {"flit": n, "direction": direction.value}
        try:
            flit = deframe(wire)
            r = rx.receive(flit)
        except FlitError as e:
            yield dict(base, error={"field": e.field, "message": str(e), "rule": e.rule, "ref": e.ref})
            continue
        value = int.from_bytes(flit[:PAYLOAD_BYTES], "little")
        obj = dict(base, kind=r.kind)
        if r.kind == "all-data":
            obj["chunks"] = [get_bits(value, SLOT_BITS * s, SLOT_BITS).to_bytes(CHUNK_BYTES, "little").hex()
                             for s in range(SLOTS)]
        elif r.kind == "control":
            obj["control"] = {"kind": r.control.kind, "fields": dict(r.control.fields)}
        else:
            header = decode_header(value)
            obj["header"] = header
            obj["slots"] = []
            for s in range(SLOTS):
                bits = (get_bits(value, HEADER_BITS, H_SLOT_BITS) if s == 0
                        else get_bits(value, SLOT_BITS * s, SLOT_BITS))
                obj["slots"].append(_slot_json(direction, "H" if s == 0 else "G", header[f"slot{s}"], bits))
        obj.update(credits=r.credits._asdict(), mem_credits=r.mem_credits._asdict(), acks=r.acks,
                   delivered=[msg_to_json(m) for m in r.messages])
        yield obj


def _need(obj, key, where):
    if key not in obj:
        raise ValueError(f"{where}: missing {key!r}")
    return obj[key]


def encode_flit(obj, where="flit"):
    """The 68-byte wire flit described by a decoded object (the inverse of :func:`decode_stream`)."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "error" in obj:
        raise ValueError(f"{where}: a rejected flit has no content to encode ({obj['error'].get('message')})")
    try:
        direction = Direction(_need(obj, "direction", where))
    except ValueError as e:
        raise ValueError(f"{where}: direction: {e}") from None
    kind = _need(obj, "kind", where)
    if kind == "all-data":
        chunks = _need(obj, "chunks", where)
        if len(chunks) != SLOTS:
            raise ValueError(f"{where}: an all-data flit has {SLOTS} chunks, got {len(chunks)}")
        payload = 0
        for s, c in enumerate(chunks):
            b = parse_hex(c, f"{where}: chunk {s}")
            if len(b) != CHUNK_BYTES:
                raise ValueError(f"{where}: chunk {s} is {len(b)} bytes, not {CHUNK_BYTES}")
            payload |= int.from_bytes(b, "little") << (SLOT_BITS * s)
    elif kind == "control":
        ctl = _need(obj, "control", where)
        k = _need(ctl, "kind", f"{where}: control")
        if k not in CONTROL_KINDS:
            raise ValueError(f"{where}: unknown control flit {k!r}; known: {sorted(CONTROL_KINDS)}")
        payload = encode_control(control(k, **ctl.get("fields", {})))
    elif kind == "protocol":
        header = dict(_need(obj, "header", where))
        slots = _need(obj, "slots", where)
        if len(slots) != SLOTS:
            raise ValueError(f"{where}: a protocol flit has {SLOTS} slots, got {len(slots)}")
        payload = encode_header(header)
        for s, slot in enumerate(slots):
            sk = "H" if s == 0 else "G"
            code = header.get(f"slot{s}", 0)
            fmt = SLOT_FORMATS.get((direction, sk, code))
            if fmt is None:
                raise ValueError(f"{where}: slot {s}: header code {code} is no supported {sk} format "
                                 f"{direction.value}")
            if slot.get("format", fmt.name) != fmt.name:
                raise ValueError(f"{where}: slot {s} says {slot['format']} but the header's slot{s} is {fmt.name}")
            shift = HEADER_BITS if s == 0 else SLOT_BITS * s
            if fmt.data:
                b = parse_hex(_need(slot, "data", f"{where}: slot {s}"), f"{where}: slot {s}")
                if len(b) != CHUNK_BYTES:
                    raise ValueError(f"{where}: slot {s} data is {len(b)} bytes, not {CHUNK_BYTES}")
                payload |= int.from_bytes(b, "little") << shift
                continue
            for msg in slot.get("messages", []):
                pos = _need(msg, "position", f"{where}: slot {s} message")
                if not 0 <= pos < len(fmt.fields) or fmt.fields[pos][0] == S2M_NDR:
                    raise ValueError(f"{where}: slot {s}: {fmt.name} has no CXL.cache message at position {pos}")
                item, offset, _ = fmt.fields[pos]
                if msg.get("channel", item.name) != item.name:
                    raise ValueError(f"{where}: slot {s} position {pos} of {fmt.name} holds {item.name}, "
                                     f"not {msg['channel']}")
                fields = _fields_from_json(item, msg.get("fields", {}), f"{where}: slot {s}")
                payload |= CODECS[item].encode(fields) << (shift + offset)
    else:
        raise ValueError(f"{where}: kind {kind!r} is not protocol, all-data or control")
    return frame(seal(payload))
