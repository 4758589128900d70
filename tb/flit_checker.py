"""The system testbench's flit monitor in a process of its own: flits are checked in batches.

Decoding every flit of every wire with the golden ``Unpacker`` (tb.vip.FlitMonitor) is the largest
single cost of the cocotb system testbench's Python (about a fifth of it with 4 devices), and it needs
nothing from the simulation but the flits in wire order.  So the testbench only reads each flit and
stamps it with its cycle (:meth:`FlitChecker.take`), or, in the batched testbench, hands over the whole
stamped record its flits are fields of (:meth:`FlitChecker.take_record`: the worker cuts the flits out, so
the testbench's process neither shifts nor masks them); every ``batch`` items go to a worker process
(``python -m tb.flit_checker``, its own interpreter on the other core), which decodes them in order with
one ``FlitMonitor`` per wire.  The first flit that breaks a rule ends the worker with its cycle, device and
wire, and the testbench fails with that cycle named (a batch later than the flit itself: the check is per
batch, the cycle is exact).  :meth:`FlitChecker.close` sends the rest, waits for the worker and returns
the flit coverage.

The protocol over the pipes is pickle: the testbench sends, when it takes records, first
``{"record_fields": [(wire, valid bit, offset, mask), ...]}``, then lists of ``(cycle, device, wire, word)``
(``wire`` None: ``word`` is a record, holding a flit of each wire whose valid bit it has set) and finally
``None``; the worker answers once, ``{"error": (cycle, device, wire, text)}`` or
``{"coverage": {...}}``.
"""

import os
import pickle
import select
import subprocess
import sys

from cxl.flit import Direction, FlitError

__all__ = ["FlitChecker", "FlitRuleBroken"]

_DIRECTION = {"up": Direction.UPSTREAM, "down": Direction.DOWNSTREAM}


class FlitRuleBroken(AssertionError):
    """A flit on a wire breaks a link rule: ``cycle``, ``device``, ``wire`` and the rule (``text``)."""

    def __init__(self, cycle, device, wire, text):
        super().__init__(f"cycle {cycle} dev{device}: {wire}stream flit breaks a link rule: {text}")
        self.cycle, self.device, self.wire = cycle, device, wire


def _python():
    # Inside a simulator, sys.executable may be the simulator; cocotb names its interpreter here.
    return os.environ.get("PYGPI_PYTHON_BIN") or sys.executable


class FlitChecker:
    """The testbench's end: ``take`` flits, ``close`` at the end (raises :class:`FlitRuleBroken` if the
    worker found a broken rule; ``take`` raises it too as soon as the worker has reported)."""

    def __init__(self, batch=1024, record_fields=None):
        """``record_fields``: ``(wire, valid bit, offset, mask)`` of each wire's flit in a record, for
        :meth:`take_record` (the wire's flit is ``(record >> offset) & mask`` when ``record & valid bit``)."""
        if batch < 1:
            raise ValueError(f"batch={batch!r}: must be >= 1")
        self.record_fields = None
        if record_fields is not None:
            self.record_fields = [(w, valid, off, mask) for w, valid, off, mask in record_fields]
            for w, valid, off, mask in self.record_fields:
                if w not in _DIRECTION or valid <= 0 or valid & (valid - 1) or off < 0 or mask <= 0:
                    raise ValueError(f"record field {(w, valid, off, mask)!r}: want (up|down, one bit, offset >= 0, "
                                     "mask > 0)")
        self.batch = batch
        self.pending = []
        self.sent = 0
        self.proc = subprocess.Popen([_python(), "-m", "tb.flit_checker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": _root_path()})
        self.result = None
        if self.record_fields is not None:
            self._send({"record_fields": self.record_fields})

    def take(self, cycle, device, wire, word):
        self.pending.append((cycle, device, wire, word))
        if len(self.pending) >= self.batch:
            self._flush()

    def take_record(self, cycle, device, record):
        """A stamped record of ``device`` with at least one flit in it (its wire's valid bit set)."""
        if self.record_fields is None:
            raise RuntimeError("take_record: the checker was made without record_fields")
        self.pending.append((cycle, device, None, record))
        if len(self.pending) >= self.batch:
            self._flush()

    def _flush(self):
        self._poll()
        batch, self.pending = self.pending, []
        self._send(batch)
        self.sent += len(batch)

    def _send(self, obj):
        try:
            pickle.dump(obj, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except BrokenPipeError:            # the worker stopped: it has said why
            self._answer()
            self._raise()
            raise RuntimeError("the flit checker process ended without an answer") from None

    def _poll(self):
        if self.result is None and select.select([self.proc.stdout], [], [], 0)[0]:
            self._answer()
        self._raise()

    def _answer(self):
        if self.result is None:
            try:
                self.result = pickle.load(self.proc.stdout)
            except EOFError:
                self.proc.wait()
                raise RuntimeError(f"the flit checker process died (exit {self.proc.returncode})") from None

    def _raise(self):
        if self.result is not None and "error" in self.result:
            raise FlitRuleBroken(*self.result["error"])

    def close(self):
        """Check what is left, stop the worker; returns ``{coverage key: count}``."""
        if self.result is None:
            if self.pending:
                self._flush()
            try:
                pickle.dump(None, self.proc.stdin)
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            self._answer()
        self.proc.wait()
        self.proc.stdout.close()
        self._raise()
        return self.result["coverage"]

    def kill(self):
        """Stop the worker without waiting for its answer (the run failed elsewhere); closes the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if not pipe.closed:
                pipe.close()


def _root_path():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def _worker(inp, out):
    from tb.vip import FlitMonitor
    coverage = {}
    monitors = {}
    fields = ()

    def check(cycle, device, wire, word):
        mon = monitors.get((device, wire))
        if mon is None:
            mon = monitors[device, wire] = FlitMonitor(_DIRECTION[wire], coverage)
        try:
            mon.flit(word)
        except FlitError as e:
            pickle.dump({"error": (cycle, device, wire, str(e))}, out)
            out.flush()
            _discard(inp)      # the testbench may still be writing: never close the pipe under it
            return False
        return True

    while True:
        try:
            batch = pickle.load(inp)
        except EOFError:                   # the testbench went away
            return
        if batch is None:
            break
        if isinstance(batch, dict):
            fields = batch["record_fields"]
            continue
        for cycle, device, wire, word in batch:
            if wire is not None:
                if not check(cycle, device, wire, word):
                    return
                continue
            for w, valid, off, mask in fields:      # a record: the flit of each wire it has one of
                if word & valid and not check(cycle, device, w, (word >> off) & mask):
                    return
    pickle.dump({"coverage": coverage}, out)
    out.flush()


def _discard(inp):
    while True:
        try:
            if pickle.load(inp) is None:
                return
        except EOFError:
            return


if __name__ == "__main__":
    _worker(sys.stdin.buffer, sys.stdout.buffer)
