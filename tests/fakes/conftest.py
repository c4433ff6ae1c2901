"""Fixtures shared by the fake coordinator's suites (defined with the legacy one)."""

from tests.fakes.test_coordinator import channel, make_coordinator

__all__ = ["channel", "make_coordinator"]
