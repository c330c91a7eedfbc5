"""Settings for every test directory: Hypothesis runs without per-example deadlines, since this machine is
shared and an example's time says nothing about what the property checks (pytest-timeout bounds each test)."""

from hypothesis import settings

settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")
