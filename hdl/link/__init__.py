"""CXL.cache 68B-flit link-layer blocks in Amaranth 0.5, each checked against ``models.flit`` and built from the definitions in ``cxl``."""
