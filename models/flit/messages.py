"""A CXL.cache message as the flit model carries it (:class:`FlitMsg`: channel, fields, line), and its JSON
form (the ``make vectors`` format).
"""

import enum
from typing import NamedTuple, Optional

from cxl.flit import DATA_CHANNELS
from cxl.messages import CODECS, LINE_BYTES, Channel

__all__ = ["FlitMsg", "make_msg", "msg_to_json", "msg_from_json", "stream_payload"]


class FlitMsg(NamedTuple):
    """One CXL.cache message: its channel, every field of its layout (enum fields as members), and the
    64-byte line for a data header (None otherwise)."""
    chan: Channel
    fields: dict
    data: Optional[bytes] = None


def make_msg(chan, fields=None, data=None, **kwargs):
    """Build a :class:`FlitMsg` from anything ``CODECS[chan].encode`` accepts; fills defaulted fields
    so that equal messages compare equal."""
    chan = Channel(chan)
    codec = CODECS[chan]
    full = codec.decode(codec.encode(dict(fields or {}, **kwargs)))
    if full["valid"] != 1:
        raise ValueError(f"{chan.name}: a message to send must have valid = 1")
    if chan in DATA_CHANNELS:
        if data is None or len(data) != LINE_BYTES:
            raise ValueError(f"{chan.name}: a data header needs its {LINE_BYTES}-byte line")
        data = bytes(data)
    elif data is not None:
        raise ValueError(f"{chan.name} carries no data")
    return FlitMsg(chan, full, data)


def msg_to_json(msg):
    """JSON form used by the vectors: channel name, fields (enum members by name), data as hex."""
    out = {"channel": msg.chan.name,
           "fields": {k: (v.name if isinstance(v, enum.Enum) else int(v)) for k, v in msg.fields.items()}}
    if msg.data is not None:
        out["data"] = msg.data.hex()
    return out


def msg_from_json(obj):
    chan = Channel[obj["channel"]]
    enums = {name: enum_cls for name, _, _, enum_cls in CODECS[chan].fields if enum_cls is not None}
    fields = {k: (enums[k][v] if k in enums else v) for k, v in obj["fields"].items()}
    data = bytes.fromhex(obj["data"]) if "data" in obj else None
    return make_msg(chan, fields, data)


def stream_payload(msg):
    """A FlitMsg as the RTL's channel stream payload: the header, then the line for a data header
    (hdl.link.ports.DataMsg: ``hdr`` first, ``data`` above it, line byte 0 lowest)."""
    value = CODECS[msg.chan].encode(msg.fields)
    if msg.data is not None:
        value |= int.from_bytes(msg.data, "little") << CODECS[msg.chan].width
    return value
