"""The events process reads the ROUTER publications ahead of the next event
(router_services.warm_publications, when idle): the event then plans with
them without reading them, and a publication changed meanwhile is read
again, only it."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from appproxy.models import Publication
from appproxy.router_mode import services as router_services
from appproxy.router_mode.wire import Publication as WirePublication
from router.revision import bump_revision, current_revision

pytestmark = pytest.mark.django_db

AUTHORITY = "router-warm"


def _publish(model: str, endpoint: str) -> None:
    router_services.apply_publication(
        AUTHORITY,
        WirePublication.model_validate({"model": model, "mappings": [{"endpoint_id": endpoint, "ratio": 1.0}]}),
    )


def _publication_reads(queries) -> int:
    table = Publication._meta.db_table
    return sum(table in q["sql"] and q["sql"].lstrip().upper().startswith("SELECT") for q in queries)


def test_an_event_after_the_read_ahead_reads_no_publication(monkeypatch):
    monkeypatch.setattr(router_services, "_publications", {})
    for i in range(30):
        _publish(f"m{i}", f"00000000-0000-0000-0000-{i:012d}")
    router_services.warm_publications(AUTHORITY)
    with transaction.atomic(), CaptureQueriesContext(connection) as seen:
        read = router_services._current(AUTHORITY)  # as an event's plan calls it
    assert _publication_reads(seen.captured_queries) == 0
    assert len(read.by_model) == 30

    _publish("m0", "00000000-0000-0000-0000-000000000999")  # changed after the read ahead
    with transaction.atomic():
        bump_revision("unrelated")
    router_services.warm_publications(AUTHORITY)
    assert router_services._publications[AUTHORITY].revision == current_revision()
    with transaction.atomic(), CaptureQueriesContext(connection) as seen:
        read = router_services._current(AUTHORITY)
    assert _publication_reads(seen.captured_queries) == 0
    assert [m.endpoint_id for m in read.by_model["m0"].mappings] == ["00000000-0000-0000-0000-000000000999"]


def test_without_the_read_ahead_the_event_reads_them_all(monkeypatch):
    monkeypatch.setattr(router_services, "_publications", {})
    for i in range(3):
        _publish(f"m{i}", f"00000000-0000-0000-0000-{i:012d}")
    monkeypatch.setattr(router_services, "_publications", {})  # a process just started
    with transaction.atomic(), CaptureQueriesContext(connection) as seen:
        router_services._current(AUTHORITY)
    assert _publication_reads(seen.captured_queries) == 1
