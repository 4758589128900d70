"""The DCOH top: snoop filter, request tracker, snoop handler, invalidation coalescer and QoS, with the
six CXL.cache channel ports on the host side and the internal-cache ports on the device side.  The
engine (its FSM) drives the blocks beside it: the tracker and the work table are registers written
through ports (hdl/dcoh/tracker.py, hdl/dcoh/work_table.py), the snoop filter, CQID allocator,
coalescer and QoS blocks have files of their own.  :meth:`DCOH.elaborate` builds the engine by role,
from the builders of hdl/dcoh/datapath.py, dispatch.py, rescan.py, snoop_path.py, host_responses.py and
side_path.py (docs/dcoh.md, "Source layout"); the encodings are in hdl/dcoh/encodings.py and the tables
generated from the model's in hdl/dcoh/engine_tables.py.

RTL counterpart of :class:`models.dcoh.Device` (the golden model).  Its transitions are not restated:
the snoop table, the request start states, the response table and the permission of each device state
are read from :mod:`cxl.coherence` / :mod:`cxl.device` at elaboration and turned into logic, so the
RTL cannot disagree with the model's tables; tests/test_rtl_dcoh.py checks the behaviour around them
(same messages, same final snoop-filter, tracker and internal-cache states) by co-simulating this top
against the model's device inside the model's whole system.

Ports
-----
Host side (``lib.stream``, payloads from :mod:`cxl.messages` / :mod:`hdl.link.ports`):
  ``h2d_req`` in (snoops), ``h2d_rsp`` in, ``h2d_data`` in (:class:`DataMsg`: header + 64 B line);
  ``d2h_req`` out, ``d2h_rsp`` out, ``d2h_data`` out (:class:`DataMsg`).
  ``crd_req`` / ``crd_rsp`` / ``crd_data`` in: D2H credits returned by the link (0..64 per cycle);
  the D2H outputs are valid only while their credit counter has a credit.
Device side (the internal caches; the cache decides its own hits, the DCOH sees only what it cannot):
  ``cpu_req`` in (:class:`CpuReq`): a miss, upgrade, eviction or uncached access of cache ``cache``
    (at most one outstanding per cache; ``data``: the value a store, ItoMWr or WrInv writes; an evicted
    copy is taken out of the cache with a ``cmd`` when the eviction issues, as the model does);
  ``cpu_rsp`` out (:class:`CpuRsp`): that access is finished; ``state`` is what the cache installs
    (I: nothing) and ``data`` the line (reads) -- the model's completion;
  ``probe`` out (:class:`Message` of the coalescer): a merged invalidation/recall notice for the lines
    of one block, to the caches in ``caches``; taking it acknowledges it (the model's ``flush``);
  ``cmd`` out (:class:`CacheCmd`) / ``cmd_rsp`` in (:class:`CacheCmdRsp`): when the DCOH applies a
    decision to the copies of one line (answering a snoop, evicting after a back-invalidation, an
    internal fill) it tells the holders to keep, downgrade to S or invalidate them, and they answer with
    ``dirty`` (one held M), ``excl`` (one held E or M) and ``data`` (the M copy's line, or any copy's).
Status: ``dispatch`` (the event the engine starts this cycle, see below; ``work_line``: the line of
  the work item it starts with WORK; ``scan_before``: a SCAN comes before ``dispatch`` in this cycle),
  ``idle`` (the engine has nothing it can do: no event in progress, no rescan or replay due, no
  D2H request queued; work waiting for the caches to take its probe does not count),
  ``devload`` (2-bit level from tracker occupancy), ``protocol_errors`` (messages from the host that
  name a CQID not in use or make an undeclared transition: counted and dropped; a second snoop to a
  line whose first snoop is unanswered, which CXL forbids: counted and held until the first is
  answered, then answered; a GO to a line whose snoop waits for its probe, which CXL forbids too:
  counted, the snoop answered after the line's data; a snoop with a reserved opcode: counted and
  dropped; ``last_error`` names the kind), ``msgs_in``/``msgs_out`` (the coalescer's counters).

Micro-architecture
------------------
One engine (an FSM) serializes every event -- the model's event order -- with this priority: the
rescan of the waiting accesses in arrival order that follows every event (the model's ``service``;
first, so that an event's rescan comes right after it as in the model even if a probe is acknowledged
meanwhile), probes acknowledged (work on their lines; once started, all ready work runs before its
rescan, the model's ``finish_probe`` and its service), H2D Rsp, H2D Data, the held snoop's replay,
snoops, new CPU accesses.  ``dispatch`` (:class:`Dispatch`) names what the engine starts in each
cycle, the rescan after an event included (SCAN, in its first cycle): a testbench feeds a shadow
golden model the steps in exactly that order (tb/system_tb.py, ``Device.defer_service``).  The last
cycle of an event outside a run of work, with no access waiting, dispatches the next one itself
(``chain``), so events follow each other without an IDLE cycle; the hazards that rule needs are listed
there.  The snoop filter has
one lookup per cycle (1-cycle latency).  A snoop that misses the snoop filter, the tracker and the
work table is answered RspIHitI on the **fast path**: the response is valid in the cycle after the
snoop is taken, and the next snoop's lookup is issued in that same cycle, so misses stream at one per
cycle.  Anything else goes to the slow path, which follows the model step by step.  While the engine
waits for an internal cache in the middle of an event, the **snoop side path** answers the snoops the
fast path would (hdl/dcoh/side_path.py), so that a slow cache does not stall them.

Where the RTL differs from the model (documented, not a behaviour difference at the boundary):
  * The DCOH cannot see a silent E->M upgrade in an internal cache.  A snoop to a line the device holds
    in E first queries the copies (``cmd`` KEEP: ``dirty`` says E or M, ``excl`` whether a copy is
    still E/M rather than S) and then decides to probe exactly as the model does, which looks into the
    caches directly.
  * The tracker, work table and coalescer are finite (parameters); the model's are not.  A snoop that
    needs a work entry when none is free is held (back-pressure on ``h2d_req``), as is a snoop that the
    model stalls (a line whose GO came before its data).  A probe the coalescer cannot take (no free
    group) waits in a queue of ``work`` entries in front of it; the engine does not wait for it.

# Ref: docs/sources.md §1.2-1.6 (opcodes, snoop-response table, field widths),
#      §2.4 (credits), §3.2 (DevLoad); states and transitions: cxl/coherence.py.
"""


from types import SimpleNamespace

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hdl.link.ports import channel_shape
from cxl.messages import ADDR_WIDTH, Channel

from .encodings import (CacheCmd, CacheCmdRsp, CacheState, CmdOp, CpuKind, CpuReq, CpuRsp, Dispatch,
                        ErrorKind, STATE_CODE)
from .coalescer import InvalidationCoalescer, Message
from .cqid import CQIDAllocator
from .qos import DevLoad
from .snoop_filter import SnoopFilter
from .datapath import (build_blocks, build_d2h, build_lookup_helpers, build_probe_path, build_registers,
                       build_sf_ports, build_waiting_accesses, build_write_helpers)
from .dispatch import build_dispatch_helpers, build_dispatch_strobes, build_idle_state
from .rescan import build_access_states, build_rescan_helpers, build_rescan_states, build_wake_rule
from .snoop_path import build_answer_states, build_snoop_states, build_snoop_verdicts, build_work_states
from .host_responses import build_completion, build_response_states, build_response_verdicts
from .side_path import build_side_path
from .parameters import check_parameters

__all__ = ["CpuKind", "CmdOp", "CacheState", "CpuReq", "CpuRsp", "CacheCmd", "CacheCmdRsp", "DCOH",
           "STATE_CODE", "ErrorKind", "Dispatch"]


class DCOH(wiring.Component):
    """Device coherency engine (ports and behaviour in the module docstring).

    Parameters (each checked; a bad one raises ValueError naming it):
      caches (1..32), sf_sets / sf_ways (powers of two), tracker (CQIDs, 2..4096), work (work-table
      entries: lines with probes outstanding, >= 1), coalesce_window (>= 0), coalesce_block (power of
      two), coalesce_groups (>= 1), starvation_bound (>= 2), credits (initial D2H credits per channel,
      1..1023), devload_thresholds, addr_width (> log2(sf_sets) and > log2(coalesce_block)).
    """

    #: the wake-up rule per access (a rescan's first round tries only the woken accesses); False: every
    #: round tries every waiting access, as before the rule (for measurements: bench/dcoh_bench.py)
    wake_per_access = True

    def __init__(self, *, caches=2, sf_sets=64, sf_ways=4, tracker=16, work=4, coalesce_window=4,
                 coalesce_block=4, coalesce_groups=4, starvation_bound=4, credits=8,
                 devload_thresholds=(0.25, 0.5, 0.75), addr_width=ADDR_WIDTH):
        check_parameters("DCOH", caches=caches, sf_sets=sf_sets, sf_ways=sf_ways, tracker=tracker, work=work,
                         coalesce_window=coalesce_window, coalesce_block=coalesce_block,
                         coalesce_groups=coalesce_groups, starvation_bound=starvation_bound, credits=credits,
                         addr_width=addr_width)
        self.caches, self.sf_sets, self.sf_ways = caches, sf_sets, sf_ways
        self.tracker, self.work = tracker, work
        self.coalesce_window, self.coalesce_block, self.coalesce_groups = \
            coalesce_window, coalesce_block, coalesce_groups
        self.starvation_bound, self.credits = starvation_bound, credits
        self.devload_thresholds, self.addr_width = tuple(devload_thresholds), addr_width
        # sub-blocks built here so that tests can reach their state (snoop-filter storage)
        self.sf = SnoopFilter(sf_sets, sf_ways, caches, addr_width, busy_at_result=True)
        self.coal = InvalidationCoalescer(coalesce_window, coalesce_block, coalesce_groups, caches,
                                          addr_width)
        self.cqids = CQIDAllocator(tracker)
        self.devload_block = DevLoad(tracker, self.devload_thresholds)  # ValueError names bad thresholds
        data_in = lambda chan: In(stream.Signature(channel_shape(chan)))
        data_out = lambda chan: Out(stream.Signature(channel_shape(chan)))
        super().__init__({
            "h2d_req": data_in(Channel.H2D_REQ), "h2d_rsp": data_in(Channel.H2D_RSP),
            "h2d_data": data_in(Channel.H2D_DATA),
            "d2h_req": data_out(Channel.D2H_REQ), "d2h_rsp": data_out(Channel.D2H_RSP),
            "d2h_data": data_out(Channel.D2H_DATA),
            "crd_req": In(range(65)), "crd_rsp": In(range(65)), "crd_data": In(range(65)),
            "cpu_req": In(stream.Signature(CpuReq(caches, addr_width))),
            "cpu_rsp": Out(stream.Signature(CpuRsp(caches, addr_width))),
            "probe": Out(stream.Signature(Message(addr_width - exact_log2(coalesce_block),
                                                  coalesce_block, caches))),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "idle": Out(1), "dispatch": Out(Dispatch), "scan_before": Out(1), "work_line": Out(addr_width),
            "devload": Out(2),
            "protocol_errors": Out(16), "last_error": Out(ErrorKind),
            "msgs_in": Out(32), "msgs_out": Out(32),
        })

    # ------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        # The engine is built by role, one builder at a time (docs/dcoh.md, "Source layout").  This
        # order is also the order of their statements, which matters where two assign the same signal
        # in one cycle (the later takes precedence: the dispatch strobes below the FSM over a state's
        # own).  ``ctx`` carries the signals and helpers each builder makes to the builders after it.
        ctx = SimpleNamespace()
        build_blocks(self, ctx)                # the sub-blocks, the tracker, the work table
        build_waiting_accesses(self, ctx)      # one slot per cache, the queue, the wake-up bits
        build_lookup_helpers(self, ctx)        # CQID -> tracker index, the line compares
        build_sf_ports(self, ctx)              # the snoop filter's lookup and update ports
        build_d2h(self, ctx)                   # the D2H request transmit, response and data outputs
        build_probe_path(self, ctx)            # probes to the coalescer and the caches
        build_registers(self, ctx)             # the engine's registers
        build_write_helpers(self, ctx)         # the tables' write ports, a command's answer
        build_dispatch_helpers(self, ctx)      # the dispatch decision, the end of an event
        build_rescan_helpers(self, ctx)        # the access being tried, SCAN's choice
        build_snoop_verdicts(self, ctx)        # the snoop table on the latched lookup
        build_response_verdicts(self, ctx)     # the response table on the H2D Rsp / Data offered
        build_completion(self, ctx)            # a request's completion
        m = ctx.m
        with m.FSM(name="engine") as engine:
            ctx.engine = engine
            build_idle_state(self, ctx)
            build_snoop_states(self, ctx)      # snoops: the fast path, the slow path, the query
            build_answer_states(self, ctx)     # a snoop's answer
            build_work_states(self, ctx)       # the work of a probed line
            build_response_states(self, ctx)   # H2D Rsp / Data, completion
            build_rescan_states(self, ctx)     # the rescan: SCAN, S_RES, S_TRY
            build_access_states(self, ctx)     # what S_TRY decided for the access
        build_dispatch_strobes(self, ctx)      # what a dispatch takes and loads; the reports
        build_wake_rule(self, ctx)             # what frees a waiting access
        build_side_path(self, ctx)             # snoops answered while the engine waits; ``idle``
        self.debug = ctx                       # the engine's signals by name, for formal harnesses
        return m
