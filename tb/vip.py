"""cocotb VIP for the six CXL.cache channels: a Source, Sink and Monitor per channel over
valid/ready, in the style of cocotbext-axi, built from the shared message definitions.

Messages are the field dicts of ``hdl.protocol.CODECS[channel]`` (enum fields as enum members); the
VIP packs and unpacks them with the same codec the RTL layout comes from, so no width or encoding is
restated here.  A data-channel port may carry the header alone or the header with its 64-byte line
(``hdl.link.ports.DataMsg``: the header in the low bits, the line above it); then the message dict has
one more key, ``"data"`` (the line as an integer).  Signals are found by prefix with Amaranth's ``__`` separator: ``<prefix>__valid``,
``<prefix>__ready``, ``<prefix>__payload``.

Pause and backpressure generators: any iterable of booleans (e.g. ``itertools.cycle([1, 0, 0])``);
True means "idle this cycle" for a Source and "not ready this cycle" for a Sink.
"""

from collections import deque

import cocotb
from cocotb.triggers import Event, RisingEdge

from hdl.link.ports import LINE_BITS
from hdl.protocol import CODECS, Channel

__all__ = ["ChannelCodec", "ChannelSource", "ChannelSink", "ChannelMonitor", "channel_endpoints"]


class ChannelCodec:
    """Packs and unpacks one channel's messages for a port ``width`` bits wide: the header alone, or
    (data channels) the header with its 64-byte line above it (``"data"`` key).  Used by the
    coroutine VIP below and by the system testbench's polled ports (tb/system_tb.py)."""

    def __init__(self, channel, width, name="port"):
        self.channel = Channel(channel)
        self.codec = CODECS[self.channel]
        data_chan = self.channel in (Channel.D2H_DATA, Channel.H2D_DATA)
        self.with_data = data_chan and width == self.codec.width + LINE_BITS
        if width != self.codec.width and not self.with_data:
            raise ValueError(f"{name} is {width} bits, but {self.channel.name} messages are "
                             f"{self.codec.width} bits" + (f" (or {self.codec.width + LINE_BITS} with the line)"
                                                           if data_chan else ""))
        self._mask = (1 << self.codec.width) - 1

    def encode(self, fields):
        if self.with_data:
            fields = dict(fields)
            data = int(fields.pop("data", 0))
            return self.codec.encode(fields) | (data << self.codec.width)
        return self.codec.encode(fields)

    def decode(self, value):
        value = int(value)
        if self.with_data:
            out = self.codec.decode(value & self._mask)
            out["data"] = value >> self.codec.width
            return out
        return self.codec.decode(value)


class _Channel:
    def __init__(self, dut, prefix, clock, channel):
        self.channel = Channel(channel)
        self.clock = clock
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.codec = ChannelCodec(channel, len(self.payload), f"{prefix}__payload")
        self.encode, self.decode = self.codec.encode, self.codec.decode
        self.name = prefix

    def _transferred(self):
        return self.valid.value.is_resolvable and self.ready.value.is_resolvable and \
            int(self.valid.value) and int(self.ready.value)


class ChannelSource(_Channel):
    """Drives ``valid``/``payload``; ``send()`` queues a message, ``wait_idle()`` waits for the queue."""

    def __init__(self, dut, prefix, clock, channel, pause=None):
        super().__init__(dut, prefix, clock, channel)
        self.queue = deque()
        self.pause = iter(pause) if pause is not None else None
        self.sent = 0
        self._idle = Event()
        self._idle.set()
        self.valid.value = 0
        self._task = cocotb.start_soon(self._run())

    def set_pause_generator(self, pause):
        self.pause = iter(pause) if pause is not None else None

    def send(self, fields):
        self.queue.append(self.encode(fields))
        self._idle.clear()

    async def wait_idle(self):
        await self._idle.wait()

    async def _run(self):
        current = None
        while True:
            await RisingEdge(self.clock)
            if current is not None and self._transferred():
                current = None
                self.sent += 1
            if current is None:
                paused = self.pause is not None and next(self.pause, False)
                if self.queue and not paused:
                    current = self.queue.popleft()
                    self.payload.value = current
                    self.valid.value = 1
                else:
                    self.valid.value = 0
                    if not self.queue:
                        self._idle.set()


class ChannelSink(_Channel):
    """Drives ``ready``; decodes every transfer into ``self.received``; ``recv()`` waits for one."""

    def __init__(self, dut, prefix, clock, channel, backpressure=None):
        super().__init__(dut, prefix, clock, channel)
        self.received = deque()
        self.backpressure = iter(backpressure) if backpressure is not None else None
        self._event = Event()
        self.ready.value = 1
        self._task = cocotb.start_soon(self._run())

    def set_backpressure_generator(self, backpressure):
        self.backpressure = iter(backpressure) if backpressure is not None else None

    async def recv(self):
        while not self.received:
            self._event.clear()
            await self._event.wait()
        return self.received.popleft()

    async def _run(self):
        # Sample right after the clock edge (the values the edge saw), then drive ready for the
        # next cycle: the cocotbext-axi pattern.
        while True:
            await RisingEdge(self.clock)
            if self._transferred():
                self.received.append(self.decode(self.payload.value))
                self._event.set()
            stall = self.backpressure is not None and next(self.backpressure, False)
            self.ready.value = 0 if stall else 1


class ChannelMonitor(_Channel):
    """Passive: records every transfer (decoded) into ``self.seen``; an illegal encoding from the DUT
    raises, naming the field."""

    def __init__(self, dut, prefix, clock, channel):
        super().__init__(dut, prefix, clock, channel)
        self.seen = []
        self._task = cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.clock)
            if self._transferred():
                self.seen.append(self.decode(self.payload.value))


def channel_endpoints(dut, clock, prefix_of):
    """Source/Sink pairs for a loopback-style DUT: ``prefix_of(channel, 'in'|'out')`` names the ports."""
    return {c: (ChannelSource(dut, prefix_of(c, "in"), clock, c), ChannelSink(dut, prefix_of(c, "out"), clock, c))
            for c in Channel}
