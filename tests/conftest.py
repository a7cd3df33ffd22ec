"""Shared test configuration: the Hypothesis profile (see ``tests/profiles.py``)."""

from __future__ import annotations

from hypothesis import settings

from tests.profiles import PROFILE

settings.load_profile(PROFILE)
