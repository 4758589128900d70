"""Port shapes shared by the link-layer RTL (TX packer, RX unpacker, retry, loopback).

One definition, used by every link block and its tests:

* a channel port carries one CXL.cache message per handshake, its payload the channel's layout from
  :mod:`cxl.messages`; a *data* channel (D2H/H2D Data) carries the data header together with its whole
  64-byte line, as :class:`DataMsg` (``data`` bit ``i`` = bit ``i % 8`` of line byte ``i // 8``, the
  byte order of ``models.flit``);
* a flit is 528 bits: payload bits 511:0 (slot 0 byte 0 = bits 7:0) and the CRC in bits 527:512 --
  the integer whose 66 little-endian bytes are the flit of ``models.flit`` (without the protocol ID).

# Ref: docs/sources.md §2.1 (528-bit flit, CRC in bits 527:512), §1.1 (64 B lines).
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from cxl.messages import CHANNEL_LAYOUTS, LINE_BYTES, Channel

__all__ = ["FLIT_BITS", "PAYLOAD_BITS", "LINE_BITS", "DataMsg", "channel_shape", "channel_stream",
           "flit_stream", "direction_channels"]

PAYLOAD_BITS = 512
FLIT_BITS = PAYLOAD_BITS + 16
LINE_BITS = 8 * LINE_BYTES


class DataMsg(data.StructLayout):
    """A data header and its line, as one stream payload."""
    def __init__(self, hdr_layout):
        super().__init__({"hdr": hdr_layout, "data": LINE_BITS})


def channel_shape(chan):
    """Payload shape of the stream that carries ``chan``."""
    chan = Channel(chan)
    layout = CHANNEL_LAYOUTS[chan]
    if chan in (Channel.D2H_DATA, Channel.H2D_DATA):
        return DataMsg(layout)
    return layout


def channel_stream(chan):
    """The stream signature of one channel (as seen by its source)."""
    return stream.Signature(channel_shape(chan))


def flit_stream():
    """The stream signature of a flit link (as seen by its source)."""
    return stream.Signature(FLIT_BITS)


def direction_channels(upstream):
    """The (req, rsp, data) channels of one direction: D2H if ``upstream``, else H2D."""
    if upstream:
        return (Channel.D2H_REQ, Channel.D2H_RSP, Channel.D2H_DATA)
    return (Channel.H2D_REQ, Channel.H2D_RSP, Channel.H2D_DATA)
