"""The pipelined DCOH, built up event class by event class (docs/dcoh_pipeline.md)."""
