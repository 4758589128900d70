"""cocotb VIP for the six CXL.cache channels: a Source, Sink and Monitor per channel over
valid/ready, in the style of cocotbext-axi, built from the shared message definitions.

Messages are the field dicts of ``cxl.messages.CODECS[channel]`` (enum fields as enum members); the
VIP packs and unpacks them with the same codec the RTL layout comes from, so no width or encoding is
restated here.  A data-channel port may carry the header alone or the header with its 64-byte line
(``hdl.link.ports.DataMsg``: the header in the low bits, the line above it); then the message dict has
one more key, ``"data"`` (the line as an integer).  Signals are found by prefix with Amaranth's ``__`` separator: ``<prefix>__valid``,
``<prefix>__ready``, ``<prefix>__payload``.

Pause and backpressure generators: any iterable of booleans (e.g. ``itertools.cycle([1, 0, 0])``);
True means "idle this cycle" for a Source and "not ready this cycle" for a Sink (and for a FlitDriver).

Link side (68B flits, 528-bit words: payload 511:0, CRC 527:512, ``hdl.link.ports.flit_stream``):
``FlitDriver`` drives flits made by the golden ``models.flit.Packer`` (or any 66-byte flit from
``models.flit.seal`` / 68-byte ``frame``) into an RTL flit input (``<prefix>__valid/ready/payload``,
e.g. ``FlitUnpacker.flit`` or ``LinkPort.rx_flit``), with a pause generator and seeded single-bit
error injection; ``FlitStreamMonitor`` watches a flit wire every clock and decodes each flit with the
golden ``models.flit.Unpacker`` (per-flit verdict, messages, credits, coverage); ``FlitMonitor`` is its
decoder, also used polled by the system testbench (tb/system_tb.py).  No flit layout, CRC or slot
format is restated here: the formats are ``cxl.flit`` / ``cxl.control``, the checks ``models.flit``.
"""

import random
from collections import deque

import cocotb
from amaranth.hdl import Shape
from cocotb.triggers import Event, RisingEdge

from hdl.link.ports import FLIT_BITS, LINE_BITS
from cxl.messages import CODECS, Channel
from cxl.credits import Credits
from cxl.flit import FLIT_BYTES, SLOTS, WIRE_BYTES, Direction, FlitError, decode_header
from models.flit import Packer, Unpacker, deframe

__all__ = ["ChannelCodec", "StructCodec", "ChannelSource", "ChannelSink", "ChannelMonitor", "channel_endpoints",
           "channel_fields", "FlitMonitor", "FlitStreamMonitor", "FlitDriver"]


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


class StructCodec:
    """Packs/unpacks an Amaranth ``data.StructLayout`` as plain integers,
    field offsets and enums taken from the layout itself (the DCOH's cache ports, the link's credit
    fields, ...)."""

    def __init__(self, layout):
        self.fields = []
        for name, field in layout:
            shape = field.shape
            enum_cls = shape if isinstance(shape, type) and hasattr(shape, "__members__") else None
            self.fields.append((name, field.offset, Shape.cast(shape).width, enum_cls))
        # decode(): each field's offset, mask and, for an enum, its members by value (a dict lookup, not a
        # call of the enum class; an encoding that is no member raises ValueError as the call would)
        self._unpack = [(name, offset, (1 << width) - 1, {m.value: m for m in enum_cls} if enum_cls else None,
                         enum_cls) for name, offset, width, enum_cls in self.fields]

    def encode(self, **values):
        v = 0
        for name, offset, width, enum_cls in self.fields:
            x = values.get(name, 0)
            x = x.value if enum_cls is not None and isinstance(x, enum_cls) else int(x)
            v |= (x & ((1 << width) - 1)) << offset
        return v

    def decode(self, v):
        out = {}
        for name, offset, mask, members, enum_cls in self._unpack:
            x = (v >> offset) & mask
            if members is not None:
                member = members.get(x)
                if member is None:
                    raise ValueError(f"{x} is not a valid {enum_cls.__name__}")
                x = member
            out[name] = x
        return out


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


class _QueueDriver:
    """What a Source and a FlitDriver share: a queue of payload words driven on ``valid``/``payload``
    one at a time (held until ``ready``), a pause generator, and ``wait_idle()``.  Subclasses set
    ``self.valid``/``ready``/``payload``/``clock`` and call ``_start()``; ``_offer(word)`` may change a
    word as it is put on the wire."""

    def _start(self, pause):
        self.queue = deque()
        self.pause = iter(pause) if pause is not None else None
        self.sent = 0
        self._idle = Event()
        self._idle.set()
        self.valid.value = 0
        self._task = cocotb.start_soon(self._run())

    def set_pause_generator(self, pause):
        self.pause = iter(pause) if pause is not None else None

    def _queue(self, word):
        self.queue.append(word)
        self._idle.clear()

    async def wait_idle(self):
        """Wait until the queue is empty and the last word has been taken."""
        await self._idle.wait()

    def _offer(self, word):
        return word

    async def _run(self):
        current = None
        while True:
            await RisingEdge(self.clock)
            if current is not None and self.ready.value.is_resolvable and int(self.ready.value):
                current = None                  # valid was ours: ready alone makes the transfer
                self.sent += 1
            if current is None:
                paused = self.pause is not None and next(self.pause, False)
                if self.queue and not paused:
                    current = self._offer(self.queue.popleft())
                    self.payload.value = current
                    self.valid.value = 1
                else:
                    self.valid.value = 0
                    if not self.queue:
                        self._idle.set()


class ChannelSource(_Channel, _QueueDriver):
    """Drives ``valid``/``payload``; ``send()`` queues a message, ``wait_idle()`` waits for the queue."""

    def __init__(self, dut, prefix, clock, channel, pause=None):
        super().__init__(dut, prefix, clock, channel)
        self._start(pause)

    def send(self, fields):
        self._queue(self.encode(fields))


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


# ---------------------------------------------------------------- link side: flits
def channel_fields(msg):
    """A golden ``models.flit.FlitMsg`` as the message dict a ChannelSink/ChannelMonitor on a port of
    its channel yields (data channels: the line as an integer under ``"data"``, byte 0 lowest)."""
    out = dict(msg.fields)
    if msg.data is not None:
        out["data"] = int.from_bytes(msg.data, "little")
    return out


class FlitMonitor:
    """Decodes every flit of one wire with the golden ``Unpacker`` (any rule broken is a mismatch)
    and counts flit kinds and slot formats for coverage.

    ``flit(word)`` takes the 528-bit flit as an integer, raises ``models.flit.FlitError`` if it breaks a
    rule (the unpacker's state is then unchanged), and returns the golden ``RxFlit`` otherwise.  Coverage
    keys: ``"<direction> H<code>"`` / ``"G<code>"`` per slot of a protocol flit, ``"<direction>
    all-data"``, ``"<direction> control <kind>"``."""

    def __init__(self, direction, coverage=None):
        self.unpacker = Unpacker(direction)
        self.name = Direction(direction).value
        self.coverage = {} if coverage is None else coverage
        # Control flits received while no data chunk is owed, by word: the unpacker's verdict on them is
        # a function of the word alone (CRC, control decoding) and leaves its state as it was, and a busy
        # link repeats the same few (LLCRD with the same acks and credits) thousands of times.
        self._control = {}

    def flit(self, word):
        known = self._control.get(word) if word & 1 else None
        if known is not None and not self.unpacker.waiting:
            rx, key = known
            self.coverage[key] = self.coverage.get(key, 0) + 1
            return rx
        rx = self.unpacker.receive(word.to_bytes(FLIT_BYTES, "little"))    # FlitError if a rule is broken
        cov = self.coverage
        if rx.kind == "protocol":
            h = decode_header(word)
            for s in range(SLOTS):
                key = f"{self.name} {'H' if s == 0 else 'G'}{h[f'slot{s}']}"
                cov[key] = cov.get(key, 0) + 1
        else:
            key = f"{self.name} {rx.kind}" + (f" {rx.control.kind}" if rx.control is not None else "")
            cov[key] = cov.get(key, 0) + 1
            if rx.kind == "control" and len(self._control) < 4096:
                self._control[word] = (rx, key)
        return rx


def _flit_handles(dut, prefix, need_ready):
    valid = getattr(dut, f"{prefix}__valid")
    payload = getattr(dut, f"{prefix}__payload")
    try:
        ready = getattr(dut, f"{prefix}__ready")
    except AttributeError:
        if need_ready:
            raise
        ready = None
    if len(payload) != FLIT_BITS:
        raise ValueError(f"{prefix}__payload is {len(payload)} bits; a flit is {FLIT_BITS} "
                         "(payload 511:0, CRC 527:512)")
    return valid, ready, payload


class FlitStreamMonitor:
    """Passive, on its own: every clock, a flit that crosses ``<prefix>__valid``/``__ready`` (or, with no
    ``__ready`` port, a tap whose ``valid`` marks a flit) is decoded with the golden ``Unpacker``.

    Per flit, in wire order: ``flits`` (the 528-bit words), ``verdicts`` (``"good"``, ``"crc"`` for a CRC
    error, ``"rule"`` for any other broken rule), ``rx`` (the golden ``RxFlit``, None for a bad flit).
    ``messages[chan]``: the messages the golden receiver delivers, in order (a data header once its line
    is complete); ``credits``/``acks``: their sums; ``errors``: ``(flit number, FlitError)``.  With
    ``strict=True`` (the default) a bad flit fails the test (an ``AssertionError`` naming the flit number
    and the broken rule); with ``strict=False`` it is recorded and skipped, as a receiver drops it.
    ``name`` (default: the prefix) starts that message, e.g. to carry the test's seed."""

    def __init__(self, dut, prefix, clock, direction, *, strict=True, coverage=None, name=None):
        self.direction = Direction(direction)
        self.clock = clock
        self.name = prefix if name is None else name
        self.valid, self.ready, self.payload = _flit_handles(dut, prefix, need_ready=False)
        self.decoder = FlitMonitor(self.direction, coverage)
        self.coverage = self.decoder.coverage
        self.strict = strict
        self.flits, self.verdicts, self.rx, self.errors = [], [], [], []
        self.messages = {ch: [] for ch in self.direction.channels}
        self.credits, self.acks = Credits(), 0
        self._event = Event()
        self._task = cocotb.start_soon(self._run())

    def _transferred(self):
        if not (self.valid.value.is_resolvable and int(self.valid.value)):
            return False
        return self.ready is None or (self.ready.value.is_resolvable and bool(int(self.ready.value)))

    def take(self, word):
        """Decode one flit (also usable without the coroutine, from a polled testbench)."""
        n = len(self.flits)
        self.flits.append(word)
        try:
            rx = self.decoder.flit(word)
        except FlitError as e:
            self.verdicts.append("crc" if e.field == "CRC" else "rule")
            self.rx.append(None)
            self.errors.append((n, e))
            if self.strict:
                raise AssertionError(f"{self.name}: flit {n} breaks a {self.direction.value} flit rule: {e}") from None
            return None
        self.verdicts.append("good")
        self.rx.append(rx)
        for msg in rx.messages:
            self.messages[msg.chan].append(msg)
        self.credits += rx.credits
        self.acks += rx.acks
        return rx

    async def wait_for(self, count):
        """Wait until ``count`` flits have been seen."""
        while len(self.flits) < count:
            self._event.clear()
            await self._event.wait()

    async def _run(self):
        while True:
            await RisingEdge(self.clock)
            if self._transferred():
                self.take(int(self.payload.value))
                self._event.set()


class FlitDriver(_QueueDriver):
    """Drives flits into an RTL flit input ``<prefix>__valid/__ready/__payload`` (valid/ready rules of
    ``amaranth.lib.stream``: valid and payload held until the transfer).

    ``send(flit)`` queues one flit: 66 bytes (``models.flit.seal``), 68 framed bytes (``frame``; the
    protocol ID is checked and stripped) or a 528-bit integer.  ``send_messages(msgs, credits, acks)``
    packs golden ``FlitMsg`` messages (and credit returns / acks) with the driver's own
    ``models.flit.Packer`` (``direction`` given) and queues the flits; it returns them.

    ``pause``: a boolean iterable, True = idle this cycle (checked whenever a new flit could be offered).
    Bit errors: flit number ``k`` (0 = the first flit driven) gets exactly one flipped bit, chosen by the
    seeded generator, when ``k in corrupt`` or a per-flit draw is below ``error_rate``; every such flit
    is listed in ``injected`` as ``(k, bit)``.  A single flipped bit is always a CRC error
    (tests/test_crc.py).  ``clean``/``wire``: every flit offered, before / after injection (integers);
    ``sent``: flits transferred.  ``wait_idle()`` waits until the queue is empty and the last flit taken."""

    def __init__(self, dut, prefix, clock, *, direction=None, pause=None, error_rate=0.0, corrupt=(), seed=0):
        self.clock = clock
        self.name = prefix
        self.valid, self.ready, self.payload = _flit_handles(dut, prefix, need_ready=True)
        self.packer = Packer(direction) if direction is not None else None
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate={error_rate}: a per-flit probability in [0, 1]")
        self.error_rate = error_rate
        self.corrupt = set(corrupt)
        self.rng = random.Random(seed)
        self.clean, self.wire, self.injected = [], [], []
        self._start(pause)

    def send(self, flit):
        if isinstance(flit, int):
            if not 0 <= flit < 1 << FLIT_BITS:
                raise ValueError(f"a flit is {FLIT_BITS} bits")
            word = flit
        else:
            flit = bytes(flit)
            if len(flit) == WIRE_BYTES:
                flit = deframe(flit)
            if len(flit) != FLIT_BYTES:
                raise ValueError(f"a flit is {FLIT_BYTES} bytes ({WIRE_BYTES} framed), got {len(flit)}")
            word = int.from_bytes(flit, "little")
        self._queue(word)

    def send_messages(self, messages, credits=Credits(), acks=0):
        if self.packer is None:
            raise ValueError(f"{self.name}: send_messages needs the driver's direction")
        for msg in messages:
            self.packer.push(msg)
        self.packer.return_credits(*credits)
        self.packer.acknowledge(acks)
        flits = self.packer.drain()
        for f in flits:
            self.send(f)
        return flits

    def _offer(self, word):
        """Error injection as the flit goes on the wire."""
        k = len(self.clean)
        self.clean.append(word)
        hit = k in self.corrupt
        if self.error_rate and self.rng.random() < self.error_rate:
            hit = True
        if hit:
            bit = self.rng.randrange(FLIT_BITS)
            word ^= 1 << bit
            self.injected.append((k, bit))
        self.wire.append(word)
        return word
