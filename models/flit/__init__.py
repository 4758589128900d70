"""The golden model of the CXL 2.0 68B-flit link layer, one direction of a CXL.cache link: the reference
for the Amaranth RTL (hdl/link/).

The flit format itself -- sizes, header, slot formats, control flits, credit encodings, CRC polynomial,
the rules a flit can break -- is defined in the :mod:`cxl` package (cxl/flit.py, cxl/control.py,
cxl/credits.py, cxl/crc.py); this package implements the link layer on it, one role per module:

* :mod:`models.flit.crc` -- the CRC (serial and table forms) and the flit's framing;
* :mod:`models.flit.messages` -- :class:`FlitMsg` and its JSON form;
* :mod:`models.flit.packer` -- :class:`Packer` (per-channel FIFOs in, flits out; the packing policy);
* :mod:`models.flit.unpacker` -- :class:`Unpacker` (checks every rule, decodes flits back);
* :mod:`models.flit.vectors` -- seeded random mixes, ``make vectors`` and a random legal packer;
* :mod:`models.flit.efficiency` -- payload efficiency beside the analytic optimum;
* :mod:`models.flit.json_form` -- flits as JSON: the flit decoder for people;
* :mod:`models.flit.cli` -- ``python -m models.flit``: ``decode`` / ``encode``, ``--vectors``, ``--efficiency``.

For convenience the package namespace also holds the :mod:`cxl` flit definitions it uses (so that
``from models.flit import Packer, SLOT_FORMATS`` works); they are the same objects.

Decisions where the facts are unconfirmed ([U]/[S]) are listed in docs/link_layer.md.  Not here (the
RTL's hdl/link/port.py): the retry buffer and replay, the ack timer, sequence counters, credit pools.
"""

from cxl.control import *            # noqa: F401,F403 -- the definitions, re-exported (see above)
from cxl.credits import *            # noqa: F401,F403
from cxl.crc import CRC_POLY         # noqa: F401
from cxl.flit import *               # noqa: F401,F403
from cxl.messages import CODECS, LINE_BYTES, Channel   # noqa: F401

from .cli import main
from .crc import crc16, crc16_serial, deframe, frame, seal
from .efficiency import MIXED, WORKLOADS, efficiency, fewest_flits, optimum, workload_streams
from .messages import FlitMsg, make_msg, msg_from_json, msg_to_json, stream_payload
from .packer import Packer, pack
from .unpacker import RxFlit, Unpacked, Unpacker, unpack
from .vectors import RandomPolicy, random_mix, random_msg, write_vectors

__all__ = ["crc16", "crc16_serial", "seal", "frame", "deframe", "FlitMsg", "make_msg", "stream_payload", "msg_to_json",
           "msg_from_json", "Packer", "pack", "RxFlit", "Unpacked", "Unpacker", "unpack", "random_msg",
           "random_mix", "write_vectors", "RandomPolicy", "WORKLOADS", "MIXED", "workload_streams", "efficiency",
           "fewest_flits", "optimum", "main"]
