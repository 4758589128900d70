"""Amaranth 0.5 RTL: DCOH and 68B-flit CXL.cache link layer."""
