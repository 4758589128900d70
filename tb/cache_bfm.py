"""Internal-cache BFM: the K MESI caches behind one DCOH, following the golden model's rules.

Used on the device side of the RTL DCOH (amaranth.sim co-simulation and cocotb).  The caches hold
``line -> [MESI, value]`` exactly like ``models.dcoh.Device.caches``; they change only by

* a local hit (``models.dcoh.cache_hit``: the same decision the model makes): a store hit writes M;
* the DCOH's ``cmd`` (keep / downgrade to S / invalidate the named caches' copies of a line), answered
  with ``dirty`` (a copy was M), ``excl`` (a copy was E or M) and the line;
* the DCOH's ``cpu_rsp`` (install the granted state; a store's M takes the store's value).
"""

from collections import deque

from models.dcoh import CpuOp, cache_hit
from cxl.coherence import MESI
from hdl.dcoh.encodings import CmdOp

__all__ = ["CacheBFM", "CommandPort"]

_INSTALL = {"I": None, "S": MESI.S, "E": MESI.E, "M": MESI.M}


class CacheBFM:
    def __init__(self, caches, strict=False):
        self.caches = [dict() for _ in range(caches)]
        self.busy = [None] * caches          # the CpuOp each cache waits on, or None
        # ``strict``: a command that names a cache without the line is an error (the DCOH's presence
        # bits are exact, so such a command is a stale copy list: a second invalidation, say)
        self.strict = strict

    def access(self, op):
        """Start ``op`` (a :class:`CpuOp`).  Returns True if it finished in the cache (a hit); otherwise
        the cache waits for the DCOH (send the request, then :meth:`install`)."""
        if self.busy[op.k] is not None:
            raise RuntimeError(f"cache {op.k} already waits on {self.busy[op.k]!r}")
        if cache_hit(self.caches[op.k], op):
            if op.kind == "store":
                self.caches[op.k][op.line] = [MESI.M, op.value]
            return True
        self.busy[op.k] = op
        return False

    def command(self, line, mask, op):
        """Apply a DCOH command (``op`` named "KEEP", "TO_S" or "INV") to the caches in ``mask``;
        returns (dirty, excl, data)."""
        dirty, excl, data = 0, 0, 0
        for k, cache in enumerate(self.caches):
            if (mask >> k) & 1 and line not in cache and self.strict:
                raise RuntimeError(f"command {op} of line {line:#x} names cache {k}, which does not hold it")
            if not (mask >> k) & 1 or line not in cache:
                continue
            st, v = cache[line]
            if st is MESI.M or not dirty:
                data = v
            dirty |= st is MESI.M
            excl |= st is MESI.M or st is MESI.E
            if op == "INV":
                del cache[line]
            elif op == "TO_S":
                cache[line] = [MESI.S, v]
        return dirty, excl, data

    def install(self, k, line, state, data):
        """The DCOH finished cache ``k``'s access: install ``state`` ("I" installs nothing)."""
        op = self.busy[k]
        if op is None:
            raise RuntimeError(f"cpu_rsp for cache {k}, which waits on nothing")
        if op.line != line:
            raise RuntimeError(f"cpu_rsp for cache {k} names line {line:#x}, but it waits on {op!r}")
        st = _INSTALL[state]
        if st is not None:
            self.caches[k][line] = [st, op.value if st is MESI.M else data]
        self.busy[k] = None
        return op


class CommandPort:
    """The caches' side of a DCOH's ``cmd`` / ``cmd_rsp`` ports in a per-cycle amaranth.sim bench: a
    command taken is applied to ``bfm`` at once and its answer offered ``1 + randint(0, delay)`` cycles
    later, the answers in the commands' order (each held until taken).  Per cycle: :meth:`drive` before
    reading the design's outputs, :meth:`sample` after (both in the same cycle)."""

    def __init__(self, bfm, rng, delay=0):
        self.bfm, self.rng, self.delay = bfm, rng, delay
        self.answers = deque()          # (cycle due, (dirty, excl, data))
        self.cycles = []                # the cycles commands were taken

    def __bool__(self):
        return bool(self.answers)

    def drive(self, ctx, cmd_rsp, cyc):
        if self.answers and self.answers[0][0] <= cyc:
            dirty, excl, value = self.answers[0][1]
            ctx.set(cmd_rsp.valid, 1)
            ctx.set(cmd_rsp.p, {"dirty": dirty, "excl": excl, "data": value})
        else:
            ctx.set(cmd_rsp.valid, 0)

    def sample(self, ctx, cmd, cmd_rsp, cyc):
        if ctx.get(cmd.valid) and ctx.get(cmd.ready):
            c = ctx.get(cmd.p)
            res = self.bfm.command(int(c.line), int(c.caches), CmdOp(c.op).name)
            self.answers.append((cyc + 1 + self.rng.randint(0, self.delay), res))
            self.cycles.append(cyc)
        if ctx.get(cmd_rsp.valid) and ctx.get(cmd_rsp.ready):
            self.answers.popleft()
