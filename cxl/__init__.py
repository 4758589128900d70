"""The definitions of CXL.cache (CXL 2.0, 68B flit), in one place, read by the golden model
(``models``), the RTL (``hdl``, at elaboration) and the cocotb VIP (``tb``).  This package imports
neither ``hdl`` nor ``models``.

* :mod:`cxl.messages` -- the six channels, every message layout (field, width, position) and opcode
  encoding, and a codec between the layouts and plain integers.
* :mod:`cxl.coherence` -- device line states and their access permissions, the snoop-response table,
  the request start states, the host-response table, the host's actions per request, and the D2H
  responses the specification allows to each snoop.
* :mod:`cxl.device` -- what the golden device and the RTL DCOH share on their CPU side: the access kinds
  and the D2H request priority classes (design choices of this project, not of the specification).
* :mod:`cxl.flit` -- the 68B flit: sizes, the protocol-flit header, the H/G slot formats, the per-flit
  message maxima, and the rules a flit can break with their specification sections.
* :mod:`cxl.packing` -- the packers' slot policy by counts (which format goes in each slot of a
  protocol flit), one definition for the golden packer and the RTL's plan table (a design choice of
  this project within the specification's packing rules).
* :mod:`cxl.control` -- control flits (LLCRD, RETRY.*, INIT.Param): codes and payload fields.
* :mod:`cxl.credits` -- credit-return field encodings.
* :mod:`cxl.crc` -- the flit CRC's polynomial and its per-bit XOR masks.

docs/conformance.md maps every rule to its specification section and to the tests that check it.
"""
