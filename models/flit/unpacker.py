"""RX side of the golden 68B-flit model: checks every rule and decodes flits back to messages
(:class:`Unpacker`, :func:`unpack`).

The unpacker is strict (it is the checker for the RTL): reserved or unsupported formats, illegal
opcodes, non-zero padding or reserved bits, broken rollover, the packing rules of CXL 1.1 / 3.x §4.2.5,
per-flit maxima exceeded and bad control flits all raise :class:`cxl.flit.FlitError`, which names the
rule and its specification section, and a rejected flit leaves the unpacker's state as it was.  The
RTL unpacker (hdl/link/rx.py) checks the same rules in the same order.

# Ref: docs/sources.md §2.1-2.5; CXL 1.1 §4.2.2-4.2.6, CXL 3.x §4.2.2-4.2.6 (docs/conformance.md).
"""

from collections import deque
from typing import NamedTuple, Optional

from cxl.control import ControlFlit, decode_control
from cxl.credits import CREDIT_CLASSES, CreditProtocol, Credits, decode_credit
from cxl.flit import (CHUNK_BYTES, CHUNKS_PER_LINE, DATA_CHANNELS, FLIT_BYTES, H_SLOT_BITS, HEADER_BITS,
                      MAX_PER_FLIT, PAYLOAD_BYTES, S2M_NDR, SLOT_BITS, SLOTS, Direction, FlitError, bits_text,
                      decode_header, get_bits, slot_format)
from cxl.messages import CODECS, LINE_BYTES

from .crc import crc16
from .messages import FlitMsg

__all__ = ["RxFlit", "Unpacker", "Unpacked", "unpack"]


class RxFlit(NamedTuple):
    """What one received flit delivered.  ``messages`` are complete messages in arrival order (a data
    header is delivered once its fourth chunk has arrived); credits are amounts, not codes."""
    kind: str                      # "protocol", "all-data" or "control"
    messages: list
    credits: Credits
    mem_credits: Credits
    acks: int
    control: Optional[ControlFlit]


class Unpacker:
    """RX side of one direction: checks CRC and every rule, decodes back to messages.

    A flit that breaks a rule raises :class:`FlitError` and leaves the unpacker as it was, so the
    caller (the retry logic) can drop it and carry on."""

    def __init__(self, direction):
        self.direction = Direction(direction)
        self.waiting = deque()     # [data header FlitMsg without data, bytearray of chunks so far]

    @property
    def owed(self):
        """Data chunks announced by headers and not yet received."""
        return sum(CHUNKS_PER_LINE - len(buf) // CHUNK_BYTES for _, buf in self.waiting)

    def receive(self, flit):
        flit = bytes(flit)
        if len(flit) != FLIT_BYTES:
            raise FlitError("length", f"a flit is {FLIT_BYTES} bytes, got {len(flit)}", "length")
        payload, crc = flit[:PAYLOAD_BYTES], int.from_bytes(flit[PAYLOAD_BYTES:], "little")
        good = crc16(payload)
        if crc != good:
            raise FlitError("CRC", f"received {crc:#06x}, payload gives {good:#06x}", "crc")
        value = int.from_bytes(payload, "little")
        waiting = deque([hdr, bytearray(buf)] for hdr, buf in self.waiting)   # commit only on success
        owed = self.owed
        out = []
        if owed >= CHUNKS_PER_LINE:
            for s in range(SLOTS):
                self._chunk(waiting, get_bits(value, SLOT_BITS * s, SLOT_BITS), out, "all-data flit")
            result = RxFlit("all-data", out, Credits(), Credits(), 0, None)
        elif value & 1:
            if owed:
                raise FlitError("Type", f"control flit while {owed} data chunk(s) are owed "
                                        "(they must roll over into this flit)", "control_rollover")
            ctl = decode_control(value)
            cache, mem, acks = Credits(), Credits(), 0
            if ctl.kind == "LLCRD":
                cache, mem = _credits({k: ctl.fields[f"{k}_crd"] for k in CREDIT_CLASSES})
                acks = ctl.fields["acks"]
            result = RxFlit("control", out, cache, mem, acks, ctl)
        else:
            result = self._protocol(value, owed, waiting, out)
        self.waiting = waiting
        return result

    def _chunk(self, waiting, bits, out, where):
        for hdr, buf in waiting:
            if len(buf) < LINE_BYTES:
                buf += bits.to_bytes(CHUNK_BYTES, "little")
                break
        else:
            raise FlitError(where, "G0 data slot but no data header is waiting for data", "no_data")
        while waiting and len(waiting[0][1]) == LINE_BYTES:
            hdr, buf = waiting.popleft()
            out.append(hdr._replace(data=bytes(buf)))

    def _protocol(self, value, owed, waiting, out):
        """Checks in this order (the RTL, hdl/link/rx.py, reports the first failing one the same way):
        header reserved bits, BE; per slot: format, rollover, next data slot, then for G0 a header
        waiting for the chunk, else padding, per message NDR / Valid / encodings / per-flit maximum,
        tight packing and the MDH slot rule; then the Data Headers of the flit, then Sz."""
        header = decode_header(value)
        if header["rsvd0"] or header["rsvd1"]:
            raise FlitError("reserved", "flit header bits 1 and 19:17 must be zero", "reserved")
        if header["be"]:
            raise FlitError("BE", "byte-enable data transfers are not supported (CXL.cache data is a full "
                                  "line)", "be_sz")
        data_chan = self.direction.data_channel
        counts = dict.fromkeys(self.direction.channels, 0)
        hdr_slots = {}                       # slot -> (valid Data Headers in it, MDH format)
        for s in range(SLOTS):
            name = f"Slot{s}"
            fmt = slot_format(self.direction, "H" if s == 0 else "G", header[f"slot{s}"], name)
            bits = (get_bits(value, HEADER_BITS, H_SLOT_BITS) if s == 0
                    else get_bits(value, SLOT_BITS * s, SLOT_BITS))
            if 1 <= s <= owed and not fmt.data:
                raise FlitError(name, f"{owed} data chunk(s) roll over into this flit, so slot {s} must "
                                      f"be G0, not {fmt.name}", "rollover")
            # "If a valid Data Header is packed in a given slot, the next available slot for data
            # transfer ... will be guaranteed to have data associated with the header": for a header
            # in slot h that slot is max(h + 1, owed + 1) (slots 1..owed carry the rollover).
            first = [h for h in hdr_slots if max(h + 1, owed + 1) == s]
            if first and not fmt.data:
                raise FlitError(name, f"slot {s} is the next slot for data after the Data Header in slot "
                                      f"{first[0]}, so it carries that header's first chunk (G0), not "
                                      f"{fmt.name}", "data_slot")
            if fmt.data:
                self._chunk(waiting, bits, out, name)
                continue
            if bits >> fmt.used_bits:
                raise FlitError(name, f"{fmt.name}: padding bit(s) {bits_text(bits >> fmt.used_bits)} above "
                                      f"bit {fmt.used_bits - 1} are set", "reserved")
            seen = {}                        # channel -> Valid bits of its positions, in order
            for item, offset, width in fmt.fields:
                v = get_bits(bits, offset, width)
                if item == S2M_NDR:
                    if v:
                        raise FlitError(name, f"{fmt.name}: S2M NDR (CXL.mem) is not supported; its "
                                              f"{width} bits must be zero", "unsupported")
                    continue
                codec = CODECS[item]
                seen.setdefault(item, []).append(v & 1)
                if not v & 1:           # Valid is bit 0 of every message (cxl.messages)
                    if v:
                        raise FlitError(name, f"{fmt.name}: invalid {item.name} with non-zero bits",
                                        "reserved")
                    continue
                try:
                    fields = codec.decode(v, strict=True)
                except ValueError as e:
                    raise FlitError(name, f"{fmt.name}: {e}", "message") from None
                counts[item] += 1
                if counts[item] > MAX_PER_FLIT[item]:
                    raise FlitError(name, f"more than {MAX_PER_FLIT[item]} {item.name} messages in one flit",
                                    "max")
                msg = FlitMsg(item, fields)
                if item in DATA_CHANNELS:
                    waiting.append([msg, bytearray()])
                else:
                    out.append(msg)
            for item, valid in seen.items():
                if any(not a and b for a, b in zip(valid, valid[1:])):
                    raise FlitError(name, f"{fmt.name}: {item.name} messages are not tightly packed "
                                          f"(Valid by position: {valid})", "packing")
            n_hdrs = sum(seen.get(data_chan, ()))
            if fmt.mdh and n_hdrs < 2:
                raise FlitError(name, f"{fmt.name} is a multi-data-header (MDH) slot; it may be chosen only "
                                      f"for 2 or more Data Headers, not {n_hdrs}", "mdh")
            if n_hdrs:
                hdr_slots[s] = (n_hdrs, fmt.mdh)
        total = counts[data_chan]
        if total > 1 and not any(mdh and n == total for n, mdh in hdr_slots.values()):
            raise FlitError("DataHeaders", f"{total} valid Data Headers in slots {sorted(hdr_slots)}: a flit "
                                           "without an MDH slot carries at most 1, and a flit with one "
                                           "carries no other", "mdh")
        if header["sz"] != (total > 0):
            raise FlitError("Sz", "must be 1 exactly when the flit carries a data header (64 B lines; "
                                  "32 B transfers are not supported)", "be_sz")
        cache, mem = _credits({k: header[f"{k}_crd"] for k in CREDIT_CLASSES})
        return RxFlit("protocol", out, cache, mem, 8 * header["ak"], None)


def _credits(codes):
    amounts = {CreditProtocol.CACHE: dict.fromkeys(CREDIT_CLASSES, 0),
               CreditProtocol.MEM: dict.fromkeys(CREDIT_CLASSES, 0)}
    for name, code in codes.items():
        protocol, n = decode_credit(code)
        amounts[protocol][name] = n
    return Credits(**amounts[CreditProtocol.CACHE]), Credits(**amounts[CreditProtocol.MEM])


# ---------------------------------------------------------------- whole streams
class Unpacked(NamedTuple):
    messages: dict            # channel -> list of FlitMsg, in arrival order
    credits: Credits
    mem_credits: Credits
    acks: int
    controls: list



def unpack(direction, flits, *, complete=True):
    """Decode a flit stream.  With ``complete``, data still owed at the end is an error."""
    rx = Unpacker(direction)
    messages = {ch: [] for ch in rx.direction.channels}
    credits, mem_credits, acks, controls = Credits(), Credits(), 0, []
    for flit in flits:
        r = rx.receive(flit)
        for msg in r.messages:
            messages[msg.chan].append(msg)
        credits += r.credits
        mem_credits += r.mem_credits
        acks += r.acks
        if r.control is not None:
            controls.append(r.control)
    if complete and rx.owed:
        raise FlitError("stream", f"ends with {rx.owed} data chunk(s) owed", "stream")
    return Unpacked(messages, credits, mem_credits, acks, controls)
