"""Hypothesis settings of the fuzz targets: ``ci`` (the default, a few seconds per target) and ``long``
(a deeper run); DRAFTLAB_FUZZ_PROFILE picks one. Applied per test (``@FUZZ``), never loaded globally,
so other hypothesis tests keep their own settings."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "database": None,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]}
settings.register_profile("draftlab-fuzz-ci", max_examples=150, **_COMMON)
settings.register_profile("draftlab-fuzz-long", max_examples=5000, **_COMMON)
FUZZ = settings.get_profile(f"draftlab-fuzz-{os.environ.get('DRAFTLAB_FUZZ_PROFILE', 'ci')}")
