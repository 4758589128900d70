"""The golden-model system: a host home agent and N devices joined by links, with invariants.

``System`` holds the state and the ways it can change (deliver a message, accept a CPU access, flush
the coalescer); two drivers use them:
  * ``run()`` here: cycle-timed simulation with a seeded random workload (``make sim``);
  * models.explore: breadth-first exploration of every interleaving of tiny configurations.

Invariants, checked after every step on the lines it touched (``check_all`` checks everything):
  SWMR over permissions, data value against the ghost last write, snoop-filter inclusion, credit
  conservation, and forward progress (a watchdog naming every outstanding request and its age).

Golden model speed (``bench.run.model_speed``: default scenario, 20k transactions, checks on).  The
timed loop visits only cycles with something due (``models.link.WakeTimes``: a heap of link deliveries,
credit returns, coalescer deadlines and issue timers, each time once, plus the next cycle while an
arbiter holds a sendable request), and on each visit works only where something is due:
``step_timed`` skips links whose ``next_due`` is later, drains a link's upstream messages in one pass
(a delivery never adds to the direction being drained) and rescans downstream only after a delivery
(it may unblock a snoop).  ``check_step`` checks
SWMR, data value, memory and inclusion of every touched line in one pass over the caches, and runs
the slower routines (``check_lines``, ``Device.check_line``) only to name a failure, so it raises the
same error at the same cycle; credit conservation is checked on the channels whose counters moved since
the last check (``Link.check_changed``; an unchanged channel holds totals that already passed).  Hot
code reads enum members as module constants (``_MESI_M``: not through the enum's metaclass), the
opcode enums hash by identity (cxl/messages.py), and the per-device and per-link containers the
loop reads are gathered once (``_check_units``, ``_step_units``).
Same seed, same messages: every change for speed keeps the message trace, the summary and the errors
of runs broken on purpose, cycle for cycle (tests/test_model_equivalence.py against digests recorded
before the change).  ``make fast-model`` compiles the hot modules with Cython, typed by the ``.pxd``
beside each (models/compiled.py): the classes become extension types with C fields and C-called
methods, messages (``Msg``) included.  What the compiled build had to be rid of, besides the
interpreter: a cpdef call on a class with an instance ``__dict__`` looks for a method replaced on the
instance (Device, Coalescer and Link have none now), a module attribute or an enum member read by
name is a dictionary lookup (module constants now), ``x in list`` compares each element (the device
counts its outstanding accesses), and a method of an untyped object is called by name (deque and
``dict.get`` on untyped globals; typed lists and locals now).  Instructions beyond imports (cachegrind,
2k transactions, seed 1): 1.01e9 pure Python, 0.337e9 compiled (~34k per message; 0.56e9 before those
changes, 0.92e9 compiled without static types).  BENCHMARKS.md has the wall-clock figures.  What
remains is spread over the handlers, the loop and the checks (the largest single item is the
dictionary lookups of lines, a tenth of the time, perf): the model's state is Python dictionaries,
sets and integers.
"""

import argparse
from collections import Counter
from bisect import bisect
from itertools import accumulate
import json
import os
import random
import sys
import time

from cxl.messages import Channel
from .checker import Checker, InvariantViolation
from .config import Config, ConfigError
from .coverage import closure, state_event_universe
from .dcoh import Device, CpuOp
from .host import Host
from .latency import latency_entry
from .link import INF, Link, WakeTimes
from cxl.coherence import Perm, DevState, MESI


__all__ = ["System", "Workload", "drive", "run", "state_event_coverage", "main"]

# The enum members hot code uses, as module constants (``_<enum>_<member>``): in the compiled build a
# module constant is one cached lookup, where an enum's attribute goes through its metaclass.
_Ch_D2H_REQ, _Ch_D2H_RSP, _Ch_H2D_REQ = Channel.D2H_REQ, Channel.D2H_RSP, Channel.H2D_REQ
_Ch_H2D_RSP = Channel.H2D_RSP
_D_I, _D_S = DevState.I, DevState.S
_MESI_E, _MESI_M = MESI.E, MESI.M
_Perm_READWRITE = Perm.READWRITE



class ForwardProgressError(AssertionError):
    pass


class System:
    def __init__(self, cfg, timed=True, device_class=None):
        """The host, ``cfg.devices`` devices and a link each.  ``device_class``: a subclass of
        :class:`~models.dcoh.Device` to build the devices from (a testbench's instrumented one,
        tb/hypothesis_traces.py); None: ``Device``.  A link is replaced with :meth:`replace_link`."""
        self.cfg = cfg
        self.timed = timed
        self.checker = Checker()
        self.links = [Link(cfg, timed) for _ in range(cfg.devices)]
        self.host = Host(cfg, self.links, self.checker)
        self.stats = {}
        device_class = Device if device_class is None else device_class
        self.devices = [device_class(d, cfg, self.links[d], self.checker, self.stats) for d in range(cfg.devices)]
        self.now = 0
        # What check_step and step_timed read per device, gathered once (these dicts, lists and deques are
        # never replaced, only changed):
        # (index, ((1 << k, cache k), ...), snoop-filter entries), and the coalescers' open groups.
        self._check_units = [(dev.index, tuple((1 << k, c) for k, c in enumerate(dev.caches)), dev.sf.entries)
                             for dev in self.devices]
        self._coal_units = [(dev, dev.coal.groups) for dev in self.devices]
        self._gather_links()

    def _gather_links(self):
        # per link, for step_timed: (device, link, its credit returns, upstream and downstream flight)
        self._step_units = [(d, link, link.returns, link.flight[True], link.flight[False], self.devices[d])
                            for d, link in enumerate(self.links)]

    def replace_link(self, d, link):
        """Put ``link`` (e.g. a subclass with costs of its own, models/cxl_timing.py) in place of device
        ``d``'s link, for the host, the device and the timed loop alike."""
        self.links[d] = link          # the host holds this list
        self.devices[d].link = link
        self._gather_links()

    # ---------------------------------------------------------------- steps
    def deliverable(self, d, upstream, now=None):
        """Indices of in-flight messages on link ``d`` that may be delivered now."""
        link = self.links[d]
        idx = link.deliverable(upstream, now)
        if upstream:
            return idx
        dev = self.devices[d]
        flight = link.flight[False]
        return [i for i in idx if flight[i][1].chan is not _Ch_H2D_REQ or dev.can_accept_snoop(flight[i][1])]

    def deliver(self, d, upstream, i):
        link = self.links[d]
        msg = link.flight[upstream].pop(i)[1]
        now = self.now
        link.consumed(msg.chan, now)
        if upstream:
            _to_host(self.host, d, msg, now)
        else:
            _to_device(self.devices[d], msg, now)
        self.checker.touched.add(msg.line)
        return msg

    def step_timed(self, now):
        """One cycle of timed delivery: on each link with something due, credit returns and then
        every ready message in send order; then the coalescer groups whose window closed.
        Returns the number of messages delivered.

        The same deliveries in the same order as repeatedly taking the first of
        :meth:`deliverable` and calling :meth:`deliver`, without rebuilding the index lists: in timed
        mode a delivery never adds to, or starts, a message on the direction being drained (the host
        sends only downstream, a device only upstream, and credits come back only in
        ``tick_credits``), so only the downstream pass needs rescanning after each delivery (it may
        unblock a snoop)."""
        self.now = now
        n = 0
        touched = self.checker.touched
        for unit in self._step_units:
            link = unit[1]
            if link.next_due > now:
                continue
            d, link, returns, up, down, dev = unit
            # next_due: sends and credit returns queued while this link is served lower it themselves
            # (Link._launch, Link.consumed); what was already queued is folded in below
            link.next_due = INF
            if returns and returns[0][0] <= now:
                while returns and returns[0][0] <= now:     # link.tick_credits(now), inline
                    chan = returns[0][1]
                    del returns[0]
                    link._credit_back(chan, now)
            nxt = returns[0][0] if returns else INF       # link.next_time(), computed on the way
            if up:
                host = self.host
                i = 0
                while i < len(up):
                    t = up[i][0]
                    if t is None or t > now:
                        i += 1
                        if t is not None and t < nxt:
                            nxt = t
                        continue
                    msg = up[i][1]
                    del up[i]
                    link.consumed(msg.chan, now)
                    _to_host(host, d, msg, now)
                    touched.add(msg.line)
                    n += 1
            if down:
                while True:
                    first = _first_down(dev, down, now)
                    if first is None:
                        break
                    msg = down[first][1]
                    del down[first]
                    link.consumed(msg.chan, now)
                    _to_device(dev, msg, now)
                    touched.add(msg.line)
                    n += 1
                    if not down:
                        break
                for e in down:
                    t = e[0]
                    if t is not None and t < nxt:
                        nxt = t
            if link.wake is None:                  # nobody lowers next_due: recount everything
                t = link.next_time()
                link.next_due = INF if t is None else t
            elif nxt < link.next_due:
                link.next_due = nxt
        for dev, groups in self._coal_units:
            if groups:
                for g in groups.values():
                    if g[0] <= now:          # some window closed: flush dev.coal.due(now), in order
                        for b in [b for b, g in groups.items() if g[0] <= now]:
                            dev.flush(b, now)
                        break
        return n

    def protocol_moves(self):
        """Every protocol event that may happen now, ignoring time (for the explorers): delivering any
        deliverable message, ("deliver", device, upstream, index), or flushing any coalescer group,
        ("flush", device, block).  CPU accesses are not protocol moves."""
        moves = []
        for d in range(self.cfg.devices):
            for up in (True, False):
                moves += [("deliver", d, up, i) for i in self.deliverable(d, up)]
            moves += [("flush", d, b) for b in self.devices[d].coal.groups]
        return moves

    def apply_move(self, move):
        """Carry out one of :meth:`protocol_moves`, then let the devices settle."""
        if move[0] == "deliver":
            self.deliver(*move[1:4])
        else:
            self.devices[move[1]].flush(move[2], self.now)
        self.settle()

    def settle(self, limit=None):
        """Deterministic device-internal progress: queued accesses, D2H request transmit."""
        for dev in self.devices:
            dev.service(self.now)
            dev.transmit(self.now, limit)

    # ---------------------------------------------------------------- invariants
    def check_lines(self, lines):
        for line in lines:
            writers, readers = [], []
            for dev in self.devices:
                for k, cache in enumerate(dev.caches):
                    c = cache.get(line)
                    if c is None:
                        continue
                    who = f"dev{dev.index} cache {k} ({c[0].name})"
                    if c[0].perm is _Perm_READWRITE:
                        writers.append(who)
                    else:
                        readers.append(who)
                    if c[1] != self.checker.value(line):
                        raise InvariantViolation(
                            f"data value: {who} holds {c[1]} in line {line:#x}; last write serialized was "
                            f"{self.checker.value(line)} (by {self.checker.writer_of(line)})")
            if len(writers) > 1 or (writers and readers):
                raise InvariantViolation(f"SWMR on line {line:#x}: writers {writers}, readers {readers}")
            self.check_host_directory(line)
            if not writers and self._line_quiet(line) and self.host.memory(line) != self.checker.value(line):
                raise InvariantViolation(
                    f"data value: memory holds {self.host.memory(line)} for line {line:#x} with no owner "
                    f"and nothing in flight; last write serialized was {self.checker.value(line)}")

    def check_host_directory(self, line):
        """Host-directory inclusion: every device with a copy of ``line`` is listed by the host (as 'E'
        when the copy may be written), and with a finite directory a listed line has an entry.  An entry
        dropped without snooping its holders breaks this."""
        host = self.host
        holders = host.dir.get(line) or {}
        for dev in self.devices:
            copies = [c[line][0] for c in dev.caches if line in c]
            if not copies:
                continue
            names = ", ".join(st.name for st in copies)
            if dev.index not in holders:
                raise InvariantViolation(
                    f"host directory inclusion: dev{dev.index} holds line {line:#x} ({names}) but the host "
                    f"lists {sorted(holders) or 'no holder'}" + (" (its entry is gone)" if host.sf is not None
                                                                 and line not in host.sf.entries else ""))
            if holders[dev.index] != "E" and any(st.perm is _Perm_READWRITE for st in copies):
                raise InvariantViolation(f"host directory inclusion: dev{dev.index} may write line {line:#x} "
                                         f"({names}) but the host lists it as {holders[dev.index]}")
        if holders and host.sf is not None and line not in host.sf.entries:
            raise InvariantViolation(f"host directory: line {line:#x} has holders {holders} but no entry")

    def _line_quiet(self, line):
        if line in self.host.active:
            return False
        for dev in self.devices:
            if line in dev.by_line or line in dev.work:      # dev.busy(line)
                return False
            e = dev.sf.entries.get(line)                     # dev.line_state(line), which is I or S
            if e is None or e.state is None:                 # unless the entry is dirty or in E
                continue
            if e.dirty or e.state is not _D_S:
                state = dev.line_state(line)
                if state is not _D_I and state is not _D_S:
                    return False
        return True

    def check_step(self):
        """Every invariant on every line touched since the last check, and credit conservation on every
        link whose counters moved (:meth:`Link.check_changed`).  Raises the same error as
        ``check_lines(touched)``, then ``dev.check_line`` for each device and line, then
        ``check_credits`` on every link, would: one pass over the lines computes all of them, and only
        when something is wrong are those slower routines run to name it."""
        lines = self.checker.touched
        ghost, initial = self.checker.ghost, self.checker.initial
        devices = self.devices
        host = self.host
        active, mem = host.active, host.mem
        host_dir, host_sf = host.dir, host.sf
        units = self._check_units
        inclusion_ok = True
        for line in lines:
            value = ghost.get(line, initial)
            writers = readers = 0
            holders = host_dir.get(line)
            if holders and host_sf is not None and line not in host_sf.entries:
                self.check_lines((line,))                 # raises: host directory without its entry
            for index, caches, entries in units:
                held = 0
                wrote = False
                for bit, cache in caches:
                    if line in cache:
                        held |= bit
                        c = cache[line]
                        st = c[0]
                        if st is _MESI_M or st is _MESI_E:
                            writers += 1
                            wrote = True
                        else:
                            readers += 1
                        if c[1] != value:
                            self.check_lines((line,))     # raises: data value, naming the copy
                if held and (holders is None or index not in holders
                             or (wrote and holders[index] != "E")):
                    self.check_lines((line,))             # raises: host directory inclusion
                e = entries.get(line)
                if e is not None:
                    if e.presence != held:
                        inclusion_ok = False
                elif held:
                    inclusion_ok = False
            if writers > 1 or (writers and readers):
                self.check_lines((line,))                 # raises: SWMR
            # memory first: _line_quiet is a pure query, and memory rarely differs from the ghost
            if not writers and mem.get(line, initial) != value and self._line_quiet(line):
                self.check_lines((line,))                 # raises: data value (memory)
        if not inclusion_ok:
            for dev in devices:
                for line in lines:
                    dev.check_line(line)                  # raises: inclusion
        lines.clear()
        for link in self.links:
            if link.changed:
                link.check_changed()

    def check_all(self):
        lines = set(self.checker.ghost) | set(self.host.mem)
        for dev in self.devices:
            for c in dev.caches:
                lines |= set(c)
            dev.check()
        self.host.check_directory()
        self.check_lines(lines)
        for link in self.links:
            link.check_credits(full=True)

    def outstanding(self):
        out = self.host.outstanding()
        for dev in self.devices:
            out += dev.outstanding()
        return sorted(out, reverse=True)

    def _oldest_age(self):
        """The largest age in :meth:`outstanding`, from the same items without describing them (-1:
        nothing outstanding)."""
        items = self.host.outstanding_items()
        for dev in self.devices:
            items += dev.outstanding_items()
        oldest = -1
        for age, _, _ in items:
            if age > oldest:
                oldest = age
        return oldest

    def watchdog(self):
        if self._oldest_age() <= self.cfg.watchdog:
            return                      # the common case: nothing to describe
        out = self.outstanding()
        if out and out[0][0] > self.cfg.watchdog:
            lines = "\n".join(f"  age {age:>7} cycles: {what}" for age, what in out)
            raise ForwardProgressError(f"forward progress: a request is older than {self.cfg.watchdog} "
                                       f"cycles at cycle {self.now}; outstanding:\n{lines}")

    def quiescent(self):
        return self.host.idle() and not any(l.busy() for l in self.links) and all(
            not d.txns and not d.work and not d.queue and not len(d.arb) for d in self.devices)

    def key(self):
        return (self.host.key(), tuple(d.key() for d in self.devices), tuple(l.key() for l in self.links),
                self.checker.key())


def _to_host(host, d, msg, now):
    """Hand a D2H message delivered from device ``d`` to the host's handler for its channel."""
    c = msg.chan
    if c is _Ch_D2H_REQ:
        host.on_d2h_req(d, msg, now)
    elif c is _Ch_D2H_RSP:
        host.on_d2h_rsp(d, msg, now)
    else:
        host.on_d2h_data(d, msg, now)


def _to_device(dev, msg, now):
    """Hand an H2D message delivered to ``dev`` to its handler for the message's channel."""
    c = msg.chan
    if c is _Ch_H2D_REQ:
        dev.on_snoop(msg, now)
    elif c is _Ch_H2D_RSP:
        dev.on_h2d_rsp(msg, now)
    else:
        dev.on_h2d_data(msg, now)


def _first_down(dev, flight, now):
    """Index of the first downstream message deliverable at ``now`` (as ``System.deliverable(d, False,
    now)[0]``), or None.  Like :meth:`deliverable` it asks the device about every ready,
    unblocked snoop, so a snoop the device must refuse raises at the same step."""
    first = None
    rsp_lines = None
    i = -1
    for t, m, _ in flight:
        i += 1
        c = m.chan
        if c is _Ch_H2D_RSP:
            if rsp_lines is None:
                rsp_lines = [m.line]
            else:
                rsp_lines.append(m.line)
            if first is None and t is not None and t <= now:
                first = i
            continue
        if t is None or t > now:
            continue
        if c is _Ch_H2D_REQ:
            if rsp_lines is not None and m.line in rsp_lines:
                continue          # a snoop may not pass an earlier H2D Rsp to its line
            if not dev.can_accept_snoop(m):
                continue
        if first is None:
            first = i
    return first


# ------------------------------------------------------------------------------------------------
class Workload:
    """Seeded random accesses from every internal cache.  Address layouts (per seed, rotating):
    a hot set of lines shared by everyone (true sharing), adjacent lines of one block (false
    sharing at block granularity), lines that all map to one snoop-filter set (set conflicts), and
    a wider random pool.  :meth:`host_op` draws the host's own accesses (Config.host_traffic) from the
    same layouts, from a generator of their own, so the devices' accesses stay those of the seed."""

    MIX = (("load", 45), ("store", 25), ("evict", 15), ("rdcurr", 4), ("itomwr", 4), ("wrinv", 4),
           ("clflush", 3))
    # The host's own accesses (models/host.py HOST_ACCESS); assumption: reads a little more often than
    # writes, as for the devices.
    HOST_MIX = (("read", 4), ("read_current", 3), ("write", 3))

    def __init__(self, cfg, rng, lines=256, think=8):
        self.cfg, self.rng, self.think = cfg, rng, think
        sets = cfg.sf_sets
        conflict = [0x1000 + i * sets for i in range(cfg.sf_ways * 3)]
        hot = [0x40 + i for i in range(4)]
        block = [0x80 + i for i in range(cfg.coalesce_block * 2)]
        pool = [0x2000 + rng.randrange(lines * 4) for _ in range(lines)]
        self.layouts = [hot, block, conflict, pool]
        rng.shuffle(self.layouts)
        self.weights = [4, 3, 2, 1]
        self.kinds = [k for k, _ in self.MIX]
        self.kind_w = [w for _, w in self.MIX]
        self._layout_cum = list(accumulate(self.weights))     # what choices() sums, summed once
        self._kind_cum = list(accumulate(self.kind_w))
        self.value = 0
        self.host_value = 1 << 32       # host writes store 2^32 + 1, ...: not a device's value (and a
                                        # line's data is unsigned: the RTL carries it as 512 bits)

    def host_op(self, rng):
        """(kind, line, value) of one host access, drawn from ``rng``."""
        layout = rng.choices(self.layouts, self.weights)[0]
        line = rng.choice(layout)
        kind = rng.choices([k for k, _ in self.HOST_MIX], [w for _, w in self.HOST_MIX])[0]
        self.host_value += 1
        return kind, line, self.host_value

    def next_op(self, k):
        """``rng.choices(layouts, weights)``, ``rng.choice(layout)``, ``rng.choices(kinds, kind_w)``,
        ``rng.randrange(2)``: the same draws from the generator, with the cumulative weights summed
        here the way ``choices`` sums them (so the same floats, the same picks)."""
        rng = self.rng
        random, bits = rng.random, rng.getrandbits    # choice(s) is s[_randbelow(len(s))], randrange(n)
        cum = self._layout_cum                        # is _randbelow(n): the same draws, fewer calls
        layout = self.layouts[bisect(cum, random() * (cum[-1] + 0.0), 0, len(cum) - 1)]
        line = layout[randbelow(bits, len(layout))]
        cum = self._kind_cum
        kind = self.kinds[bisect(cum, random() * (cum[-1] + 0.0), 0, len(cum) - 1)]
        self.value += 1
        return CpuOp(kind, k, line, self.value, randbelow(bits, 2))


def randbelow(getrandbits, n):
    """``random.Random._randbelow(n)`` for a generator whose ``getrandbits`` is given: the same draws
    (``n.bit_length()`` bits, drawn again while the number is n or more), in a function the compiled
    build compiles (the generator's own method is interpreted Python)."""
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
        r = getrandbits(k)
    return r


def state_event_coverage(devices):
    """How often the devices' DCOHs took each (state, event) pair: {"<state> / <event>": count}, sorted."""
    coverage = {}
    for dev in devices:
        for (state, event), n in dev.coverage.items():
            key = f"{getattr(state, 'name', state)} / {getattr(event, 'name', event)}"
            coverage[key] = coverage.get(key, 0) + n
    return dict(sorted(coverage.items()))


def drive(sysm, next_op, pace, stop, on_done=None, progress=None, max_cycles=None):
    """The timed cycle loop of the golden model, for any source of accesses; returns (cycles, messages,
    completed accesses).

    Each cycle: the links deliver what is due and the coalescers flush (``System.step_timed``); per
    device, every idle internal cache whose think time is over takes ``next_op(d, k)`` (None: that
    cache has nothing more to issue), its next access ``1 + pace()`` cycles later at the earliest; the
    DCOH services its queue and sends one D2H request; completed accesses go to ``on_done(dev, done)``
    (then cleared); the touched lines are checked.  Only cycles with something due are visited.
    ``stop(done)``, asked before each cycle and when nothing is left to happen, ends the loop (an
    integer N for ``stop``: once N accesses have completed, without a call per cycle); nothing left to
    happen otherwise, or more than ``max_cycles``, is a ``ForwardProgressError``."""
    target = stop if isinstance(stop, int) else -1
    if target >= 0:
        stop = None
    cfg = sysm.cfg
    watchdog = cfg.watchdog
    devs = sysm.devices
    now = 0
    msgs = 0
    done = 0
    last_watchdog = 0
    never = float("inf")
    wake = WakeTimes()              # event times; every timer below pushes here
    for link in sysm.links:
        link.wake = wake
    for dev in devs:
        dev.coal.wake = wake
    next_issue = [[pace() for _ in range(cfg.caches)] for _ in devs]
    for nd in next_issue:
        for t in nd:
            wake.push(t)
    touched = sysm.checker.touched
    heap = wake.heap
    ncaches = cfg.caches
    ndevs = len(devs)
    while (done < target) if stop is None else not stop(done):
        msgs += sysm.step_timed(now)
        # Each device: issue from idle caches whose think time is over, DCOH service, one D2H request,
        # completions.  Then whether it has something to do next cycle: a request the arbiter could
        # send, or an internal cache that finished and may issue again.  (Nothing after its turn in
        # this cycle changes a device's caches, arbiter or credits, so that is known here already.)
        soon = False
        for d in range(ndevs):
            dev = devs[d]
            nd, ops, arb, dev_done = next_issue[d], dev.ops, dev.arb, dev.done
            if dev.active_ops < ncaches:          # some cache is idle (None in ops)
                for k in range(ncaches):
                    if ops[k] is None and nd[k] <= now:
                        op = next_op(d, k)
                        if op is None:
                            nd[k] = never        # this cache is done
                            continue
                        dev.accept(op, now)
                        nd[k] = t = now + 1 + pace()
                        wake.push(t)
            if dev.queue:
                dev.service(now)
            if arb.count:
                dev.transmit(now, 1)
                if arb.count and dev.link.credits[_Ch_D2H_REQ] > 0:
                    soon = True
            if dev_done:
                if on_done is not None:
                    on_done(dev, dev_done)
                done += len(dev_done)
                dev_done.clear()
            if dev.active_ops < ncaches:          # some cache is idle (None in ops)
                for k in range(ncaches):
                    if ops[k] is None and nd[k] <= now:
                        nd[k] = now + 1
                        soon = True
        if touched:
            sysm.check_step()
        if now - last_watchdog >= 1000:
            last_watchdog = now
            sysm.watchdog()
            if progress:
                progress(done, now)
        while heap and heap[0] <= now:
            wake.pop()
        if soon:
            nxt = now + 1
        else:
            if not heap:
                if (done >= target) if stop is None else stop(done):
                    break
                sysm.watchdog()
                raise ForwardProgressError(f"nothing left to happen at cycle {now} with "
                                           f"{len(sysm.outstanding())} requests outstanding: "
                                           f"{sysm.outstanding()}")
            nxt = wake.pop()
        if nxt - now > watchdog:
            sysm.now = nxt
            sysm.watchdog()
        now = nxt
        if max_cycles is not None and now > max_cycles:
            raise ForwardProgressError(f"not finished after {max_cycles} cycles; outstanding: "
                                       f"{sysm.outstanding()[:8]}")
    return now, msgs, done


def run(cfg, transactions, seed, progress=None):
    """Timed simulation until ``transactions`` D2H requests have completed.  Returns the summary."""
    rng = random.Random(seed)
    sysm = System(cfg, timed=True)
    wl = Workload(cfg, rng)
    devs = sysm.devices
    latency = {}
    devload_hist = [0, 0, 0, 0]
    bits, think1 = rng.getrandbits, wl.think + 1       # rng.randrange(think1), the same draw

    def on_done(dev, dev_done):
        devload_hist[dev.devload()] += 1
        for op, lat in dev_done:
            latency.setdefault(op._name_, []).append(lat)

    host_rng, host_traffic, host = random.Random(f"host traffic {seed}"), cfg.host_traffic, sysm.host
    host_draw, cpu_op = host_rng.random, wl.next_op     # bound once: called for every access

    def next_op(d, k):
        if host_traffic and host_draw() < host_traffic:
            host.host_access(*wl.host_op(host_rng), sysm.now)
        return cpu_op(k)

    t_start = time.perf_counter()
    now, msgs, done = drive(sysm, next_op, lambda: randbelow(bits, think1), transactions, on_done, progress)
    sysm.check_all()
    wall = time.perf_counter() - t_start
    coal_in = sum(d.coal.msgs_in for d in devs)
    coal_out = sum(d.coal.msgs_out for d in devs)
    pairs = state_event_coverage(devs)
    return {
        "engine": "model",
        "simulator": None,
        "devices": cfg.devices,
        "transactions": done,
        "violations": 0,
        "seed": seed,
        "cycles": now,
        "messages": msgs,
        "wall_s": round(wall, 3),
        "model_msgs_per_s": round(msgs / wall) if wall else None,
        "latency_cycles": {op: latency_entry(Counter(v)) for op, v in sorted(latency.items())},
        "coalescing": {"invalidations_in": coal_in, "messages_out": coal_out, "saved": coal_in - coal_out},
        "arbiter_max_passed": max(d.arb.max_passed for d in devs),
        "devload_histogram": dict(zip(("light", "optimal", "moderate", "severe"), devload_hist)),
        "counters": dict(sorted(sysm.stats.items())),
        "host": dict(sysm.host.counts),
        "coverage": {"state_event": pairs,
                     "closure": {"state_event": closure(pairs, state_event_universe())}},
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.as_dict().items()},
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description="Golden-model CXL.cache system simulation")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--caches", type=int, default=Config.caches)
    ap.add_argument("--sf-sets", type=int, default=Config.sf_sets)
    ap.add_argument("--sf-ways", type=int, default=Config.sf_ways)
    ap.add_argument("--credits", type=int, default=Config.credits)
    ap.add_argument("--max-outstanding", type=int, default=Config.max_outstanding)
    ap.add_argument("--transactions", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--config", default="", metavar="NAME=VALUE,...",
                    help="other Config fields, e.g. host_dir=exact or host_dir_sets=8,host_traffic=0.1")
    ap.add_argument("--out", default="build/model/summary.json")
    args = ap.parse_args(argv)
    try:
        cfg = Config(devices=args.devices, caches=args.caches, sf_sets=args.sf_sets, sf_ways=args.sf_ways,
                     credits=args.credits, max_outstanding=args.max_outstanding).with_overrides(args.config)
    except ConfigError as e:
        print(f"error: bad configuration: {e}", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)

    marks = iter(range(20000, args.transactions, 20000))
    mark = [next(marks, None)]

    def progress(done, now):
        if mark[0] is not None and done >= mark[0]:
            print(f"  {done} transactions, cycle {now}", file=sys.stderr)
            mark[0] = next(marks, None)

    try:
        summary = run(cfg, args.transactions, args.seed, progress)
    except AssertionError as e:   # invariant, forward progress
        summary = {"engine": "model", "simulator": None, "devices": cfg.devices, "transactions": None,
                   "violations": 1, "seed": args.seed, "error": str(e), "latency_cycles": {}}
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
        print(f"FAILED (seed {args.seed}; reproduce with make sim SEED={args.seed}): {e}", file=sys.stderr)
        return 1
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"golden model: {summary['devices']} devices, {summary['transactions']} transactions, "
          f"{summary['cycles']} cycles, {summary['violations']} violations, seed {summary['seed']}, "
          f"{summary['wall_s']} s ({summary['model_msgs_per_s']} messages/s)")
    for op, v in summary["latency_cycles"].items():
        print(f"  {op:<17} n={v['count']:>7}  p50={v['p50']:>5}  p99={v['p99']:>5} cycles")
    h = summary["host"]
    print(f"  host ({cfg.host_dir} directory): {h['back_invalidations']} back-invalidations; its own reads "
          f"{h['host_read']}, current reads {h['host_read_current']}, writes {h['host_write']}")
    c = summary["coalescing"]
    print(f"  coalescing: {c['invalidations_in']} invalidations -> {c['messages_out']} messages "
          f"({c['saved']} saved); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
