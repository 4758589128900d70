cdef class Link:
    cdef dict __dict__
    cdef public object latency
    cdef public object initial
    cdef public bint timed
    cdef public dict flight
    cdef public list credits
    cdef public object returns
    cdef public list in_flight
    cdef public list returning
    cdef public list waiting
    cdef public object wake
    cdef public object next_due
    cdef public object changed
    cpdef send(self, msg, now, extra=*)
    cpdef _launch(self, list entry, now)
    cpdef _credit_back(self, chan, now)
    cpdef consumed(self, chan, now)
