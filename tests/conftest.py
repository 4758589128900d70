"""Hypothesis profiles: "ci" is derandomized (the same examples every run) so CI is reproducible;
"dev" explores new examples each run.  HYPOTHESIS_PROFILE picks one (the Makefile sets ci)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=200, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=300, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
