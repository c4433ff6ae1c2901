"""A ROUTER pull compares only what can have changed since this process's
last pull (appproxy/router_mode/pulled.py), and the mirror it leaves is the one a
whole comparison leaves.

A seeded random run of coordinator changes (route replaces, new and deleted
deployments, a publication edit now and then), some of them also applied as
the events process applies them, with pulls in between: after every pull the
mirrored circuits are the coordinator's, and the backends are exactly what
planning every mirrored circuit from scratch gives. Real fake coordinator
(HTTP), real DB, Redis.
"""

from __future__ import annotations

import random
import uuid

import pytest
from django.db import connection

from appproxy import reconcile
from appproxy.backends import plan
from appproxy.models import Circuit
from appproxy.router_mode import services as router_services
from appproxy.router_mode.plan import desired
from appproxy.router_mode.pulled import circuit_of

from .router_support import RouterManager, registered_router

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(settings):
    with registered_router(settings, replicas=3, name="delta", ack_timeout=0.05) as s:
        yield s


def pull(s) -> router_services.ApplyResult:
    return router_services.router_pull_and_apply(s.settings, client=s.client, worker_id=s.worker_id, node_id="n1")


def endpoint(m: RouterManager, name: str, *servers) -> str:
    """A deployment on the ROUTER worker with these replicas (committed; a 503
    only says that no ack came: no events process runs here)."""
    endpoint_id, created = m.create(name)
    assert created.status_code in (200, 503), created.text
    m.routes(endpoint_id, *servers)
    return endpoint_id


def coordinator_circuits(s) -> dict[str, object]:
    circuits, failed, errors = s.client.circuits(s.worker_id)
    assert not failed and not errors
    return {str(c.id): c for c in circuits}


def assert_mirror_is_from_scratch(s) -> None:
    want = coordinator_circuits(s)
    rows = {row.circuit_id: row for row in Circuit.objects.all()}
    assert rows.keys() == want.keys()
    assert all(want[cid].same_raw(row.raw) for cid, row in rows.items())
    every = [reconcile.stored_circuit(row) for row in rows.values()]
    scratch = desired(every, router_services.publications(s.authority)).backends
    diff = plan(scratch, reconcile.actual_backends())
    assert not diff, (diff.add, diff.update, diff.remove)


def circuit_rows_read(fn) -> int:
    """How many circuit rows fn's SELECTs on the mirror asked for without a
    WHERE clause (a whole read) — 0 when it only read the ones it named."""
    whole = []

    def record(execute, sql, params, many, context):
        text = sql.lstrip()
        if text.upper().startswith("SELECT") and 'FROM "appproxy_circuit"' in text and "COUNT(" not in text:
            if " WHERE " not in text:
                whole.append(text)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        fn()
    return len(whole)


def test_a_pull_after_one_change_reads_only_that_circuit(setup):
    eps = [endpoint(setup.manager, f"svc-{i}", setup.replicas[i % 3]) for i in range(6)]
    setup.manager.publish("chat", {ep: 1.0 for ep in eps})
    pull(setup)  # the first pull of this process compares everything
    setup.manager.routes(eps[2], *setup.replicas[:2])
    assert circuit_rows_read(lambda: pull(setup)) == 0
    assert_mirror_is_from_scratch(setup)


def test_a_circuit_an_event_changed_is_compared_even_when_its_item_is_as_last_pulled(setup):
    """A late event re-applies an older version of a circuit the coordinator
    has not changed since the last pull: the item's bytes are the ones that
    pull applied, but the mirror's row is not, and the pull puts it back."""
    m = setup.manager
    ep = endpoint(m, "svc", setup.replicas[0])
    m.publish("chat", {ep: 1.0})
    old = coordinator_circuits(setup)
    m.routes(ep, setup.replicas[1])
    pull(setup)
    desire = router_services.router_circuit_desire(setup.authority)
    reconcile.reconcile_apply(list(old.values()), source="route_updated", authority=setup.authority, desire=desire)
    pull(setup)
    assert_mirror_is_from_scratch(setup)


def test_a_circuit_an_event_added_is_removed_when_the_coordinator_no_longer_lists_it(setup):
    m = setup.manager
    keep = endpoint(m, "keep", setup.replicas[0])
    m.publish("chat", {keep: 1.0})
    pull(setup)
    brief = endpoint(m, "brief", setup.replicas[1])
    desire = router_services.router_circuit_desire(setup.authority)
    now = coordinator_circuits(setup)
    added = [c for c in now.values() if str(c.endpoint_id) == brief]
    reconcile.reconcile_apply(added, source="created", authority=setup.authority, desire=desire)
    assert m.delete(brief).status_code in (200, 503)  # and its removed event is lost
    pull(setup)
    assert_mirror_is_from_scratch(setup)


def test_a_random_run_of_changes_events_and_pulls_matches_a_from_scratch_mirror(setup):
    rng = random.Random(1053)
    m = setup.manager
    eps = [endpoint(m, f"svc-{i}", setup.replicas[i % 3]) for i in range(8)]
    m.publish("chat", {ep: 1.0 for ep in eps[:5]})
    m.publish("other", {ep: 0.5 for ep in eps[3:]})
    pull(setup)
    assert_mirror_is_from_scratch(setup)
    desire = router_services.router_circuit_desire(setup.authority)
    history = [coordinator_circuits(setup)]  # what the coordinator held, step by step
    for step in range(60):
        op = rng.choice(["routes", "routes", "routes", "create", "delete", "publish"])
        if op == "routes" and eps:
            ep = rng.choice(eps)
            m.routes(ep, *rng.sample(setup.replicas, rng.randint(1, 2)))
        elif op == "create":
            eps.append(endpoint(m, f"new-{step}", rng.choice(setup.replicas)))
        elif op == "delete" and len(eps) > 2:
            ep = eps.pop(rng.randrange(len(eps)))
            assert m.delete(ep).status_code in (200, 503)  # committed; 503 only says no ack came
        elif op == "publish" and eps:
            m.publish("chat", {ep: rng.choice([0.5, 1.0, 2.0]) for ep in rng.sample(eps, min(3, len(eps)))})
        history.append(coordinator_circuits(setup))
        if rng.random() < 0.5:
            # As the events process applies a route_updated / created event: a
            # circuit as the coordinator holds it now, or (a late event) as it
            # held it some steps ago, upserted on its own.
            then = history[-1] if rng.random() < 0.6 else rng.choice(history)
            some = rng.sample(sorted(then), min(2, len(then)))
            reconcile.reconcile_apply(
                [then[cid] for cid in some], source="route_updated", authority=setup.authority, desire=desire
            )
        if rng.random() < 0.6:
            pull(setup)
            assert_mirror_is_from_scratch(setup)
    pull(setup)
    assert_mirror_is_from_scratch(setup)


def test_circuit_of_reads_mirrored_backend_names_only():
    cid = str(uuid.uuid4())
    assert circuit_of(f"appproxy-{cid}-r{uuid.uuid4()}") == cid
    assert circuit_of(f"appproxy-{cid.upper()}-r1") == cid
    assert circuit_of("appproxy-short-r1") is None
    assert circuit_of(f"vllm-{cid}-r1") is None


def publication_reads(fn) -> tuple[object, int]:
    result, reads = publication_sql(fn)
    return result, len(reads)


def publication_sql(fn) -> tuple[object, list[str]]:
    reads = []

    def record(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("SELECT") and 'FROM "appproxy_publication"' in sql:
            reads.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        result = fn()
    return result, reads


def test_publications_are_read_again_only_after_one_changed(setup):
    from appproxy.router_mode.wire import Publication as WirePublication

    m = setup.manager
    ep = endpoint(m, "svc", setup.replicas[0])
    m.publish("chat", {ep: 1.0})
    pull(setup)
    names = lambda pubs: sorted(p.model for p in pubs)  # noqa: E731
    first, _ = publication_reads(lambda: router_services.publications(setup.authority))
    again, reads = publication_reads(lambda: router_services.publications(setup.authority))
    assert names(first) == names(again) == ["chat"] and reads == 0
    m.routes(ep, setup.replicas[1])  # a circuit change is no publication change
    pull(setup)
    _, reads = publication_reads(lambda: router_services.publications(setup.authority))
    assert reads == 0
    m.publish("chat2", {ep: 0.5})  # the next pull's router-config brings it
    pull(setup)
    assert names(router_services.publications(setup.authority)) == ["chat", "chat2"]
    router_services.apply_publication(  # as a model_updated event applies it
        setup.authority, WirePublication.model_validate({"model": "chat3", "aliases": [], "mappings": []})
    )
    # Only the row the change log names is read again, not all of them.
    pubs, reads = publication_reads(lambda: router_services.publications(setup.authority))
    assert names(pubs) == ["chat", "chat2", "chat3"] and reads == 1
    _, sql = publication_sql(lambda: router_services.publications(setup.authority))
    assert sql == []
    router_services.apply_publication(
        setup.authority, WirePublication.model_validate({"model": "chat4", "aliases": [], "mappings": []})
    )
    _, sql = publication_sql(lambda: router_services.publications(setup.authority))
    assert len(sql) == 1 and " IN (" in sql[0]
    router_services.remove_publication(setup.authority, "chat4")
    router_services.remove_publication(setup.authority, "chat")
    assert names(router_services.publications(setup.authority)) == ["chat2", "chat3"]
    assert_mirror_is_from_scratch_of_publications(setup)


def assert_mirror_is_from_scratch_of_publications(s) -> None:
    """The backends as planned from the publications read straight from the DB."""
    rows = list(Circuit.objects.all())
    every = [reconcile.stored_circuit(row) for row in rows]
    scratch = desired(every, router_services._read_publications(s.authority).values()).backends
    assert not plan(scratch, reconcile.actual_backends())


# -- the whole comparison without the reconcile lock ----------------------------


def restart(s) -> None:
    """What a restart of the tasks process forgets: its memos of the last pull."""
    memo = (s.authority, "n1")
    for store in (router_services._applied, router_services._planned_all, router_services._pulled):
        store.pop(memo, None)


def whole_reads_under_the_lock(s, fn) -> tuple[int, int]:
    """(whole reads of the mirror's circuits while the reconcile lock was held,
    whole reads without it) during fn."""
    held, free = [], []
    lock = reconcile.reconcile_lock(s.authority)

    def record(execute, sql, params, many, context):
        text = sql.lstrip()
        if text.upper().startswith("SELECT") and 'FROM "appproxy_circuit"' in text and "COUNT(" not in text:
            if " WHERE " not in text:
                (held if lock.locked() else free).append(text)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        fn()
    return len(held), len(free)


def test_the_first_pull_after_a_restart_compares_the_whole_mirror_outside_the_lock(setup):
    eps = [endpoint(setup.manager, f"svc-{i}", setup.replicas[i % 3]) for i in range(6)]
    setup.manager.publish("chat", {ep: 1.0 for ep in eps})
    pull(setup)
    restart(setup)
    setup.manager.routes(eps[4], *setup.replicas[:2])
    held, free = whole_reads_under_the_lock(setup, lambda: pull(setup))
    assert (held, free) == (0, 1)
    assert_mirror_is_from_scratch(setup)


def test_the_outside_comparison_heals_backends_changed_behind_the_change_log(setup):
    """Drift the change log never saw (a row edited in the DB by hand): the
    next whole comparison, now without the lock, still puts it right — a
    missing backend back, a stray one of a mirrored circuit and one of no
    circuit away."""
    from router.models import Backend

    eps = [endpoint(setup.manager, f"svc-{i}", setup.replicas[i % 3]) for i in range(3)]
    setup.manager.publish("chat", {ep: 1.0 for ep in eps})
    pull(setup)
    ours = sorted(Backend.objects.filter(name__startswith="appproxy-").values_list("name", flat=True))
    victim = ours[0]
    stray_cid = circuit_of(ours[1])
    with connection.cursor() as cursor:  # behind the services' backs: no change log entry
        cursor.execute("DELETE FROM router_backend WHERE name = %s", [victim])
    template = Backend.objects.get(name=ours[1])
    for name in (f"appproxy-{stray_cid}-r{uuid.uuid4()}", f"appproxy-{uuid.uuid4()}-r{uuid.uuid4()}"):
        Backend.objects.bulk_create(
            [Backend(name=name, source=template.source, url=template.url, kind=template.kind, models=["chat"])]
        )
    restart(setup)
    result = pull(setup)
    assert result.changed
    assert_mirror_is_from_scratch(setup)
    assert Backend.objects.filter(name=victim).exists()


class LateEvent:
    """A CoordinatorClient whose next circuits fetch is followed, before the
    pull goes on, by `then()` (an event the events process applies while the
    pull holds an answer it fetched before it)."""

    def __init__(self, client, then) -> None:
        self.client, self.then = client, then

    def __getattr__(self, name):
        return getattr(self.client, name)

    def circuit_body(self, worker_id):
        body = self.client.circuit_body(worker_id)
        then, self.then = self.then, None
        if then is not None:
            then()
        return body


@pytest.mark.parametrize("after_restart,republish", [(False, False), (True, False), (False, True)])
def test_an_event_applied_after_the_fetch_is_not_reverted_by_the_older_answer(setup, after_restart, republish):
    """`republish`: the same pull brings a publication change, so it compares
    the whole mirror (and fetches the circuits again, under the lock)."""
    m = setup.manager
    eps = [endpoint(m, f"svc-{i}", setup.replicas[0]) for i in range(3)]
    m.publish("chat", {ep: 1.0 for ep in eps})
    pull(setup)
    if after_restart:
        restart(setup)
    if republish:
        m.publish("chat", {ep: 2.0 for ep in eps})
    m.routes(eps[0], setup.replicas[1])  # what the pull will fetch
    desire = router_services.router_circuit_desire(setup.authority)

    def event() -> None:  # the coordinator moves on, and its event is applied at once
        m.routes(eps[0], setup.replicas[2])
        newest = [c for c in coordinator_circuits(setup).values() if str(c.endpoint_id) == eps[0]]
        reconcile.reconcile_apply(newest, source="route_updated", authority=setup.authority, desire=desire)

    late = LateEvent(setup.client, event)
    router_services.router_pull_and_apply(setup.settings, client=late, worker_id=setup.worker_id, node_id="n1")
    assert_mirror_is_from_scratch(setup)  # the event's state: the coordinator's now
    pull(setup)  # and the next pull compares that circuit again
    assert_mirror_is_from_scratch(setup)


def test_a_circuit_a_late_event_added_after_the_fetch_goes_when_the_next_answer_lacks_it(setup):
    """A stale `created` event, applied between the fetch and the lock, of a
    deployment the coordinator has deleted since: the pull leaves it (it
    cannot tell the event from a newer state), the next one removes it."""
    m = setup.manager
    keep = endpoint(m, "keep", setup.replicas[0])
    m.publish("chat", {keep: 1.0})
    pull(setup)
    brief = endpoint(m, "brief", setup.replicas[1])
    added = [c for c in coordinator_circuits(setup).values() if str(c.endpoint_id) == brief]
    assert m.delete(brief).status_code in (200, 503)
    desire = router_services.router_circuit_desire(setup.authority)

    def stale_created() -> None:
        reconcile.reconcile_apply(added, source="created", authority=setup.authority, desire=desire)

    late = LateEvent(setup.client, stale_created)
    router_services.router_pull_and_apply(setup.settings, client=late, worker_id=setup.worker_id, node_id="n1")
    assert Circuit.objects.filter(circuit_id=str(added[0].id)).exists()  # left as the event left it
    pull(setup)
    assert_mirror_is_from_scratch(setup)


def test_a_random_run_with_restarts_and_late_events_matches_a_from_scratch_mirror(setup):
    rng = random.Random(9)
    m = setup.manager
    eps = [endpoint(m, f"svc-{i}", setup.replicas[i % 3]) for i in range(6)]
    m.publish("chat", {ep: 1.0 for ep in eps})
    pull(setup)
    desire = router_services.router_circuit_desire(setup.authority)
    for _ in range(30):
        ep = rng.choice(eps)
        m.routes(ep, *rng.sample(setup.replicas, rng.randint(1, 2)))
        if rng.random() < 0.3:
            restart(setup)
        then = None
        if rng.random() < 0.5:
            target = rng.choice(eps)

            def then(target=target) -> None:
                m.routes(target, *rng.sample(setup.replicas, rng.randint(1, 2)))
                now = [c for c in coordinator_circuits(setup).values() if str(c.endpoint_id) == target]
                reconcile.reconcile_apply(now, source="route_updated", authority=setup.authority, desire=desire)

        client = LateEvent(setup.client, then) if then is not None else setup.client
        router_services.router_pull_and_apply(setup.settings, client=client, worker_id=setup.worker_id, node_id="n1")
        assert_mirror_is_from_scratch(setup)
