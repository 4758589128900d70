# Static types for the compiled build of models/dcoh.py (``make fast-model``, models/compiled.py): Cython
# reads this file beside the .py, makes these classes extension types with the attributes below as C
# fields, and the methods listed cpdef (a C call when the receiver's type is known).  The pure-Python
# modules ignore it.  Every attribute an instance sets must be declared here, and a type named here must
# hold for every value the model stores there.  No class here has an instance ``__dict__``: Cython gives
# each instance of such a class a dictionary of its own, and then every cpdef call checks that instance
# for a replaced method, a check whose one-entry cache misses whenever the calls alternate between
# devices (8 % of the run's instructions).  Instrument a device with a subclass (tb/hypothesis_traces.py).
cimport cython
from models.link cimport Link as LinkT, Msg as MsgT, WakeTimes as WakeTimesT
from models.checker cimport Checker as CheckerT

@cython.locals(h=tuple, holders=dict)
cpdef tuple _holders(SFEntry e)
@cython.locals(table=dict)
cpdef tuple _snoop_step(state, snoop)
@cython.locals(table=dict)
cpdef tuple _response_step(state, event)
@cython.locals(c=list)
cpdef bint cache_hit(dict cache, CpuOp op)
@cython.locals(level=int)
cpdef int devload_level(occupied, capacity, thresholds)

cdef class SFEntry:
    cdef public object state
    cdef public bint dirty
    cdef public object presence
    cdef public object set
    cdef public object way

cdef class SnoopFilter:
    cdef public Py_ssize_t sets
    cdef public Py_ssize_t ways
    cdef public list tags
    cdef public list plru
    cdef public dict entries
    cpdef set_of(self, line)
    cpdef lookup(self, line)
    @cython.locals(node=long, bits=long, parent=long)
    cpdef touch(self, s, way)
    @cython.locals(node=long, bits=long)
    cpdef plru_way(self, s)
    @cython.locals(tags=list, w=Py_ssize_t)
    cpdef free_way(self, s)
    @cython.locals(tags=list, w=Py_ssize_t)
    cpdef victim(self, s, busy)
    @cython.locals(e=SFEntry)
    cpdef allocate(self, line, way)
    @cython.locals(e=SFEntry)
    cpdef free(self, line)

cdef class Coalescer:
    cdef public object window
    cdef public object block
    cdef public dict groups
    cdef public object msgs_in
    cdef public object msgs_out
    cdef public WakeTimesT wake
    @cython.locals(g=list)
    cpdef add(self, line, caches, now)
    @cython.locals(g=list)
    cpdef pop(self, b, only=*)

cdef class TxArbiter:
    cdef public object bound
    cdef public list queues
    cdef public list passed
    cdef public object max_passed
    cdef public Py_ssize_t count
    cpdef push(self, txn)
    @cython.locals(queues=list, passed=list, waiting=list, starved=list, c=Py_ssize_t, o=Py_ssize_t)
    cpdef pop(self)

cdef class CpuOp:
    cdef public object kind
    cdef public object k
    cdef public object line
    cdef public object value
    cdef public object variant
    cdef public object t0
    cdef public object victim
    cdef public object why

cdef class Txn:
    cdef public object cqid
    cdef public object op
    cdef public object line
    cdef public object state
    cdef public CpuOp cpu
    cdef public object value
    cdef public object data
    cdef public object granted
    cdef public object t0

cdef class LineWork:
    cdef public object snoop
    cdef public object evict

cdef class Device:
    cdef public object index
    cdef public object cfg
    cdef public LinkT link
    cdef public CheckerT checker
    cdef public list caches
    cdef public SnoopFilter sf
    cdef public dict txns
    cdef public dict by_line
    cdef public list free_cqids
    cdef public dict work
    cdef public object work_cap
    cdef public list ops
    cdef public Py_ssize_t active_ops
    cdef public list queue
    cdef public Coalescer coal
    cdef public TxArbiter arb
    cdef public list done
    cdef public dict stats
    cdef public dict coverage
    cdef public object now
    cdef public bint defer_service
    cdef public bint defer_complete
    cdef public set woken
    cdef public object skipped_services
    cdef public object skipped_tries
    @cython.locals(t=Txn, e=SFEntry)
    cpdef line_state(self, line)
    cpdef accept(self, CpuOp op, now)
    @cython.locals(op=CpuOp)
    cpdef list woken_accesses(self)
    @cython.locals(queue=list, first=list)
    cpdef service(self, now)
    @cython.locals(op=CpuOp, progress=bint)
    cpdef _round(self, list ops, now)
    cpdef _finish_op(self, CpuOp op)
    cpdef _alloc_cqid(self)
    @cython.locals(t=Txn)
    cpdef _new_txn(self, op_code, line, from_state, CpuOp cpu, value, now, cqid=*)
    cpdef _way_for(self, CpuOp op, now)
    @cython.locals(w=LineWork)
    cpdef _new_work(self, line)
    @cython.locals(work=LineWork)
    cpdef _back_invalidate(self, line, now)
    @cython.locals(cache=dict, e=SFEntry)
    cpdef _try_issue(self, CpuOp op, now)
    cpdef _issue_miss(self, CpuOp op, code, now)
    cpdef _internal_fill(self, SFEntry e, k, line, write)
    @cython.locals(link=LinkT, arb=TxArbiter, t=Txn, sent=Py_ssize_t)
    cpdef transmit(self, now, limit=*)
    @cython.locals(w=LineWork)
    cpdef can_accept_snoop(self, MsgT msg)
    @cython.locals(e=SFEntry, caches=list)
    cpdef _snoop_probes(self, line, state, nxt, data)
    @cython.locals(w=LineWork)
    cpdef on_snoop(self, MsgT msg, now)
    @cython.locals(t=Txn, e=SFEntry, woken=set)
    cpdef _answer_snoop(self, MsgT msg, now, extra)
    cpdef flush(self, block, now, only=*)
    cpdef close_probe(self, block, only=*)
    @cython.locals(w=LineWork, woken=set)
    cpdef finish_probe(self, lines, now)
    @cython.locals(e=SFEntry)
    cpdef _evict_after_back_invalidation(self, line, cqid, now)
    @cython.locals(t=Txn, w=LineWork)
    cpdef on_h2d_rsp(self, MsgT msg, now)
    @cython.locals(t=Txn)
    cpdef on_h2d_data(self, MsgT msg, now)
    cpdef _advance(self, Txn t, nxt, now)
    @cython.locals(e=SFEntry, op=CpuOp)
    cpdef _complete(self, Txn t, now)
