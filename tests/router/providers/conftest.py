"""Fixtures the provider tests share."""

from __future__ import annotations

import pytest

from tests.router.providers.raw_backend import RawBackend


@pytest.fixture
def raw():
    """raw(answer) -> a started RawBackend; all stopped after the test."""
    started: list[RawBackend] = []

    def make(answer) -> RawBackend:
        backend = RawBackend(answer).start()
        started.append(backend)
        return backend

    yield make
    for backend in started:
        backend.stop()
