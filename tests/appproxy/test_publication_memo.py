"""A stored publication is validated once per content: the read of the
transaction that wrote it (a first pull's plan reads all 2,000 it wrote)
takes back what the write stored, and any other content is validated."""

from __future__ import annotations

import pytest
from django.db import transaction

from appproxy.models import Publication
from appproxy.router_mode import services as router_services
from appproxy.router_mode.wire import Publication as WirePublication

pytestmark = pytest.mark.django_db

AUTHORITY = "router-memo"
EP = "00000000-0000-0000-0000-00000000000a"


def _pub(model: str, **extra) -> WirePublication:
    return WirePublication.model_validate({"model": model, "mappings": [{"endpoint_id": EP, "ratio": 2}], **extra})


def _fresh(model: str) -> WirePublication:
    row = Publication.objects.get(authority=AUTHORITY, model=model)
    return WirePublication.model_validate(
        {"model": row.model, "aliases": row.aliases, "mappings": row.mappings, "control_mode": row.control_mode}
    )


@pytest.fixture(autouse=True)
def _empty_memo(monkeypatch):
    monkeypatch.setattr(router_services, "_validated", {})


def test_what_a_write_stored_reads_back_as_the_publication_written():
    pubs = [_pub("m1"), _pub("m2", aliases=["a", "a", "b"], control_mode="auto"), _pub("m3", mappings=[])]
    with transaction.atomic():
        for pub in pubs:
            router_services._write_publication(AUTHORITY, pub)
        read = router_services._read_publications(AUTHORITY)
    for pub in pubs:
        assert read[pub.model] is pub
        assert read[pub.model] == _fresh(pub.model)  # the memo never answers what validation would not


def test_a_row_changed_elsewhere_is_validated_again():
    pub = _pub("m1")
    router_services._write_publication(AUTHORITY, pub)
    other = "00000000-0000-0000-0000-00000000000b"
    Publication.objects.filter(model="m1").update(mappings=[{"endpoint_id": other.upper(), "ratio": 3}])
    read = router_services._read_publications(AUTHORITY)["m1"]
    assert read is not pub
    assert [(m.endpoint_id, m.ratio) for m in read.mappings] == [(other, 3.0)]
    assert read == _fresh("m1")


def test_the_stored_key_order_does_not_matter():
    """PostgreSQL's jsonb gives a mapping's keys back in its own order."""
    pub = _pub("m1")
    router_services._write_publication(AUTHORITY, pub)
    Publication.objects.filter(model="m1").update(mappings=[{"ratio": 2.0, "endpoint_id": EP}])
    assert router_services._read_publications(AUTHORITY)["m1"] is pub


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(router_services, "_VALIDATED_KEPT", 5)
    for i in range(12):
        router_services._write_publication(AUTHORITY, _pub(f"m{i}"))
        assert len(router_services._validated) <= 5
    read = router_services._read_publications(AUTHORITY)
    assert all(read[f"m{i}"] == _fresh(f"m{i}") for i in range(12))
