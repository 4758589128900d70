"""Python golden model of CXL.cache coherence."""
