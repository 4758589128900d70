"""DCOH (device coherency engine) blocks in Amaranth 0.5, each checked against ``models.dcoh``."""
