# Static types for the compiled build of models/link.py (``make fast-model``; see models/compiled.py).
# A channel is a Channel member (an IntEnum) wherever it is stored; the methods below only index and
# shift with it, so they take it as a C integer.  No instance ``__dict__`` (see models/dcoh.pxd): a
# testbench instruments a link with a subclass (tb/system_tb.py).
cimport cython

cdef class Msg:
    cdef readonly object chan
    cdef readonly object op
    cdef readonly object uid
    cdef readonly object line
    cdef readonly object rsp_data
    cdef readonly object data
    cdef readonly object bogus
    cpdef tuple fields(self)

cdef class WakeTimes:
    cdef public list heap
    cdef public set pending
    cpdef push(self, t)
    cpdef pop(self)

cdef class Link:
    cdef public object latency
    cdef public object initial
    cdef public bint timed
    cdef public dict flight
    cdef public list credits
    cdef public list returns
    cdef public list in_flight
    cdef public list returning
    cdef public list waiting
    cdef public WakeTimes wake
    cdef public object next_due
    cdef public long changed
    @cython.locals(c=Py_ssize_t, credits=list)
    cpdef send(self, Msg msg, now, extra=*)
    @cython.locals(c=Py_ssize_t)
    cpdef _launch(self, list entry, now)
    cpdef _credit_back(self, Py_ssize_t chan, now)
    cpdef consumed(self, chan, now)
    @cython.locals(moved=long, c=Py_ssize_t, a=Py_ssize_t, f=Py_ssize_t, r=Py_ssize_t, initial=Py_ssize_t,
                   credits=list, in_flight=list, returning=list)
    cpdef check_changed(self)
