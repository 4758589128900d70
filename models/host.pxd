# Static types for the compiled build of models/host.py (``make fast-model``; see models/dcoh.pxd).
cimport cython
from models.link cimport Link as LinkT, Msg as MsgT
from models.dcoh cimport SnoopFilter as SnoopFilterT, SFEntry as SFEntryT
from models.checker cimport Checker as CheckerT

cdef class EveryNth:
    cdef public double fraction
    cdef public double credit
    cpdef bint tick(self)

cdef class HostTxn:
    cdef public object dev
    cdef public object op
    cdef public object cqid
    cdef public object line
    cdef public object value
    cdef public object pending
    cdef public object fwd
    cdef public object pull
    cdef public bint expect_bogus
    cdef public object snap
    cdef public object t0

cdef class _SnoopWait:
    cdef public HostTxn txn
    cdef public object dev
    cdef public object snoop
    cdef public object rsp
    cdef public object data
    cdef public bint has_data
    cdef public object snap

cdef class Host:
    cdef public object cfg
    cdef public list links
    cdef public CheckerT checker
    cdef public EveryNth _data_first
    cdef public EveryNth _data_late
    cdef public EveryNth _pull_clean
    cdef public dict mem
    cdef public dict dir
    cdef public dict active
    cdef public dict queue
    cdef public dict snoops
    cdef public dict pulls
    cdef public set used_uqids
    cdef public object served
    cdef public object bogus_dropped
    cdef public object now
    cdef public SnoopFilterT sf
    cdef public dict evicting
    cdef public dict set_wait
    cdef public set _retrying
    cdef public dict counts
    @cython.locals(link=LinkT)
    cpdef _send(self, dev, MsgT msg, now, lag=*)
    @cython.locals(used=set)
    cpdef _uqid(self)
    cpdef _free(self, uqid)
    cpdef _rsp(self, HostTxn txn, op, rsp_data, now)
    cpdef memory(self, line)
    cpdef on_d2h_req(self, dev, MsgT msg, now)
    cpdef _arrive(self, HostTxn txn, now)
    @cython.locals(sf=SnoopFilterT)
    cpdef _admit(self, HostTxn txn, now)
    cpdef _needs_entry(self, HostTxn txn)
    @cython.locals(sf=SnoopFilterT, e=SFEntryT)
    cpdef _place(self, HostTxn txn)
    @cython.locals(sf=SnoopFilterT, t=HostTxn)
    cpdef _maybe_evict(self, s, now)
    @cython.locals(txn=HostTxn, moved=bint, blocked=bint, needs=bint)
    cpdef _retry_set(self, s, now)
    @cython.locals(holders=dict, targets=list)
    cpdef _start(self, HostTxn txn, now)
    @cython.locals(w=_SnoopWait, holders=dict)
    cpdef on_d2h_rsp(self, dev, MsgT msg, now)
    @cython.locals(w=_SnoopWait, txn=HostTxn)
    cpdef on_d2h_data(self, dev, MsgT msg, now)
    @cython.locals(txn=HostTxn)
    cpdef _snoop_progress(self, uqid, _SnoopWait w, now)
    @cython.locals(holders=dict)
    cpdef _grant(self, HostTxn txn, now)
    cpdef _pulled(self, HostTxn txn, MsgT msg, now)
    cpdef _host_done(self, HostTxn txn, now)
    @cython.locals(sf=SnoopFilterT)
    cpdef _finish(self, HostTxn txn, now)
