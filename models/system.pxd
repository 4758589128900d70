# Static types for the compiled build of models/system.py (``make fast-model``; see models/dcoh.pxd).
cimport cython
# The classes under other names: System builds its links, host and devices from the module's Python
# names Link, Host and Device (which tests swap for subclasses), so those must stay plain globals.
from models.link cimport Link as LinkT, Msg as MsgT, WakeTimes as WakeTimesT
from models.dcoh cimport Device as DeviceT, TxArbiter as TxArbiterT, SFEntry as SFEntryT
from models.checker cimport Checker as CheckerT
from models.host cimport Host as HostT

cdef class System:
    cdef dict __dict__                  # drivers keep their own notes on it (models/explore.py)
    cdef public object cfg
    cdef public bint timed
    cdef public CheckerT checker
    cdef public list links
    cdef public HostT host
    cdef public dict stats
    cdef public list devices
    cdef public object now
    cdef public list _check_units
    cdef public list _coal_units
    cdef public list _step_units

    @cython.locals(link=LinkT, dev=DeviceT, up=list, down=list, touched=set, host=HostT, n=Py_ssize_t,
                   i=Py_ssize_t, msg=MsgT, returns=list, chan=Py_ssize_t, unit=tuple)
    cpdef step_timed(self, now)

    @cython.locals(lines=set, ghost=dict, host=HostT, active=dict, mem=dict, host_dir=dict, units=list,
                   caches=tuple, entries=dict, cache=dict, inclusion_ok=bint, wrote=bint,
                   writers=Py_ssize_t, readers=Py_ssize_t, link=LinkT, held=long, bit=long, c=list, e=SFEntryT)
    cpdef check_step(self)

    @cython.locals(dev=DeviceT, items=list)
    cpdef _oldest_age(self)

cdef class Workload:
    cdef public object cfg
    cdef public object rng
    cdef public object think
    cdef public list layouts
    cdef public list weights
    cdef public list kinds
    cdef public list kind_w
    cdef public list _layout_cum
    cdef public list _kind_cum
    cdef public object value
    cdef public object host_value
    @cython.locals(cum=list, layout=list)
    cpdef next_op(self, k)

@cython.locals(dev=DeviceT, arb=TxArbiterT, nd=list, ops=list, dev_done=list, credits=list, wake=WakeTimesT,
               heap=list,
               soon=bint, msgs=Py_ssize_t, done=Py_ssize_t, ncaches=Py_ssize_t, target=Py_ssize_t, touched=set,
               k=Py_ssize_t, d=Py_ssize_t, ndevs=Py_ssize_t, devs=list)
cpdef drive(System sysm, next_op, pace, stop, on_done=*, progress=*, max_cycles=*)

cpdef _to_host(HostT host, d, MsgT msg, now)
cpdef _to_device(DeviceT dev, MsgT msg, now)

@cython.locals(i=Py_ssize_t, first=object, m=MsgT)
cpdef _first_down(DeviceT dev, list flight, now)

@cython.locals(k=int)
cpdef randbelow(getrandbits, n)
