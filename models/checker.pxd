# Static types for the compiled build of models/checker.py (``make fast-model``; see models/dcoh.pxd).
cdef class Checker:
    cdef public object initial
    cdef public dict ghost
    cdef public dict writer
    cdef public set touched
    cdef public object reads
    cdef public object writes
    cpdef value(self, line)
    cpdef writer_of(self, line)
    cpdef write(self, line, value, who, tuple args=*)
    cpdef read(self, line, value, who, tuple args=*)
    cpdef read_at_serialization(self, line, value, who, tuple args=*)
