"""The golden device's steps at the pipelined engine's request-side commits (hdl/dcoh/pipe/engine.py), written
once for the engine bench (tb/engine.py) and the system testbench's pipelined device side (tb/system_pipe.py).

Each raises :class:`ShadowDisagrees` naming what the model cannot do; the caller adds its seed and cycle.
"""

from models.dcoh import cache_hit

__all__ = ["ShadowDisagrees", "shadow_hit", "shadow_commit"]


class ShadowDisagrees(Exception):
    """The model cannot take a step the RTL took."""


def shadow_hit(dev, op, now):
    """Cache ``op.k`` finished ``op`` alone (a hit): the model takes it and tries it at once, and nothing else
    (its waiting accesses wait for the RTL's commits)."""
    k = op.k
    if not cache_hit(dev.caches[k], op) or not dev.take(op, now) or not dev._try_issue(op, now) or \
            dev.ops[k] is not None:
        raise ShadowDisagrees(f"{op!r} hits in the RTL's cache but not in the model's "
                              f"({dev.caches[k].get(op.line)})")
    dev.queue.remove(op)


def shadow_commit(dev, k, now, back_invalidation=False):
    """Request C committed cache ``k``'s access (``commit``): the model's try must issue it, finish it inside
    the device or evict; or (``commit_bi``) fail having started a back-invalidation.  Returns the access."""
    op = dev.ops[k]
    if op is None or op not in dev.queue:
        raise ShadowDisagrees(f"the RTL committed cache {k}'s access, which the model does not hold")
    if back_invalidation:
        work = set(dev.work)
        if dev._try_issue(op, now) or len(dev.work) != len(work) + 1:
            raise ShadowDisagrees(f"the RTL started a back-invalidation for {op!r}; the model's try does not "
                                  f"(its work: {sorted(work)} -> {sorted(dev.work)})")
        return op
    requests = len(dev.txns)
    if not dev._try_issue(op, now):
        raise ShadowDisagrees(f"the RTL committed {op!r}, which the model cannot do now (waits: {op.why})")
    dev.queue.remove(op)
    if dev.ops[k] is not None and len(dev.txns) != requests + 1:
        raise ShadowDisagrees(f"{op!r}: the model neither finished it nor started a request")
    return op
