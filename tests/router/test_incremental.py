"""The snapshot a process keeps current from the change log equals the one
compiled from scratch, after every step of random sequences of mixed changes
made through the real writers (YAML sync, admin, key services, coordinator
keys, ROUTER publications and circuits, discovered models), on a real DB and
real Redis (the reconcile lock). And the AppProxy backends that circuit
events planned for their circuits only are those a plan of the whole mirror
calls for.

The incrementally kept snapshot must also really be incremental: most steps
are applied in place (counted by router.selectors), and what a step did not
touch is shared with the previous snapshot by reference.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from django.db import transaction
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from appproxy.reconcile import apply_locked, reconcile_lock
from appproxy.router_mode import services as router_services
from appproxy.router_mode import status as router_status
from appproxy.router_mode.plan import MirrorSummary
from appproxy.router_mode.wire import Publication as WirePublication
from appproxy.wire import Circuit as WireCircuit
from keys import coordinator, services
from keys.keyring import hash_key
from keys.models import ApiKey
from router import revision, selectors
from router.admin import BackendAdmin
from router.core.snapshot import EMPTY, Snapshot
from router.models import Backend, Source
from router.revision import bump_revision
from router.services import config_sync, discovered_models_apply
from tests.appproxy.test_services import circuit

pytestmark = pytest.mark.django_db

AUTHORITY = "w-incremental"
MODELS = ("m0", "m1", "m2", "m3", "m4")
CONFIG_NAMES = ("c0", "c1", "c2", "c3", "c4", "c5")
ADMIN_NAMES = ("a0", "a1", "a2", "a3")
ENDPOINTS = tuple(str(uuid.UUID(int=i + 1)) for i in range(3))
COORD_IDS = ("k0", "k1", "k2", "k3", "k4")

models = st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True)


def _route(i: int, ratio: float) -> dict:
    return {
        "route_id": str(uuid.UUID(int=1000 + i)),
        "session_id": str(uuid.UUID(int=2000 + i)),
        "kernel_host": "127.0.0.1",
        "kernel_port": 9000 + i,
        "protocol": "http",
        "traffic_ratio": ratio,
    }


def _circuit(e: int, routes: list[tuple[int, float]]) -> WireCircuit:
    """Circuit `e` (fixed ids, so a sequence replays) with these (route, ratio)s."""
    return WireCircuit.model_validate(
        circuit(
            *(_route(10 * e + i, r) for i, r in routes),
            sub=f"s{e}",
            variant="vllm" if e else None,
            id=str(uuid.UUID(int=100 + e)),
            worker=str(uuid.UUID(int=99)),
            endpoint_id=ENDPOINTS[e],
        )
    )


def _yaml(backends: dict[str, tuple[list[str], int, bool]], strategy: str, chain: list[str], router: bool) -> str:
    lines = ["backends:"] if backends else ["backends: []"]
    for name, (names, weight, discover) in backends.items():
        lines.append(
            f"  - {{name: {name}, url: 'http://127.0.0.1:1/{name}', models: {names}, weight: {weight}, "
            f"discover_models: {'true' if discover else 'false'}}}"
        )
    lines += [
        f"selection_strategy: {strategy}",
        "health: {enabled: false}",
        f"fallback: {{fallback_chains: {{m0: {chain}}}}}",
    ]
    if router:
        lines += [
            "appproxy_router:",
            "  enabled: true",
            "  coordinator_url: http://127.0.0.1:1",
            "  api_secret: s3cret",
            "  redis_url: redis://127.0.0.1:6379/0",
            f"  authority: {AUTHORITY}",
            "  hostname: 127.0.0.1",
            "  api_port: 8000",
        ]
    return "\n".join(lines) + "\n"


def same(inc: Snapshot, full: Snapshot) -> None:
    for name in Snapshot.__dataclass_fields__:
        if name in ("created", "keyring"):
            continue
        assert getattr(inc, name) == getattr(full, name), name
    assert dict(inc.keyring.items()) == dict(full.keyring.items())
    assert {r.id: r for r in inc.keyring.values()} == {r.id: r for r in full.keyring.values()}


SEEN = {"keyring": 0}  # steps whose full snapshot had keys the bare one left out


class Changes(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="incremental-"))
        self.path = self.dir / "router.yaml"
        self.snap: Snapshot = EMPTY
        self.prev: Snapshot = EMPTY
        self.bare: Snapshot = EMPTY  # the tasks process's: no requests-only parts
        self.touched: set[str] = set()  # what the last step can have changed

    @initialize()
    def start(self) -> None:
        self.path.write_text(_yaml({"c0": (["m0"], 1, False)}, "weighted_round_robin", [], False))
        config_sync(self.path)
        self.touched = {"*"}

    # -- the writers -------------------------------------------------------------
    @rule(
        backends=st.dictionaries(
            st.sampled_from(CONFIG_NAMES), st.tuples(models, st.integers(1, 3), st.booleans()), max_size=5
        ),
        strategy=st.sampled_from(["weighted_round_robin", "least_latency"]),
        chain=st.lists(st.sampled_from(MODELS[1:]), max_size=2, unique=True),
        router=st.booleans(),
    )
    def yaml_edit(self, backends, strategy, chain, router) -> None:
        self.path.write_text(_yaml(backends, strategy, chain, router))
        config_sync(self.path)
        self.touched = {"*"}

    @rule(name=st.sampled_from(ADMIN_NAMES), names=models, weight=st.integers(1, 9), rename=st.booleans())
    def admin_save(self, name, names, weight, rename) -> None:
        if Backend.objects.filter(name=name).exclude(source=Source.ADMIN).exists():
            return
        row = Backend.objects.filter(name=name).first()
        change = row is not None
        if row is None:
            row = Backend(name=name, url=f"http://127.0.0.1:2/{name}")
        row.models, row.weight = names, weight
        if change and rename:
            free = [n for n in ADMIN_NAMES if not Backend.objects.filter(name=n).exists()]
            if free:
                row.name = free[0]
        BackendAdmin(Backend, None).save_model(None, row, None, change)
        self.touched = {"backends"}

    @rule(name=st.sampled_from(ADMIN_NAMES))
    def admin_delete(self, name) -> None:
        row = Backend.objects.filter(name=name, source=Source.ADMIN).first()
        if row is not None:
            BackendAdmin(Backend, None).delete_model(None, row)
        self.touched = {"backends"}

    @rule(names=st.lists(st.sampled_from(MODELS), max_size=2, unique=True), ips=st.booleans())
    def key_create(self, names, ips) -> None:
        services.key_create(
            name="k",
            allowed_models=names,
            rate_limit=5 if ips else None,
            allowed_client_ips=["10.0.0.0/8"] if ips else [],
        )
        self.touched = {"keyring"}

    @rule(
        op=st.sampled_from(["update", "revoke", "rotate", "delete"]),
        pick=st.integers(0, 50),
        names=st.lists(st.sampled_from(MODELS), max_size=2, unique=True),
    )
    def key_change(self, op, pick, names) -> None:
        keys = list(ApiKey.objects.filter(source="operator").order_by("pk"))
        if not keys:
            return
        key = keys[pick % len(keys)]
        if op == "update":
            services.key_update(key, allowed_models=names, rate_limit=pick or None)
        elif op == "revoke":
            services.key_revoke(key)
        elif op == "rotate" and key.revoked_at is None:
            services.key_rotate(key)
        elif op == "delete":
            services.key_delete(key)
        self.touched = {"keyring"}

    @rule(
        ids=st.lists(st.sampled_from(COORD_IDS), max_size=4, unique=True),
        full=st.booleans(),
        names=st.lists(st.sampled_from(MODELS), max_size=2, unique=True),
    )
    def coordinator_keys(self, ids, full, names) -> None:
        keys = [
            coordinator.CoordinatorKey(key_id=i, key_hash=hash_key(f"tok-{i}"), allowed_models=tuple(names))
            for i in ids
        ]
        with transaction.atomic():
            if coordinator.sync_coordinator_keys(keys, full=full):
                bump_revision("test coordinator keys")
        self.touched = {"keyring"}

    @rule(key_id=st.sampled_from(COORD_IDS))
    def coordinator_key_removed(self, key_id) -> None:
        router_services.remove_key(AUTHORITY, key_id)
        self.touched = {"keyring", "backends"}

    @rule(
        model=st.sampled_from(MODELS),
        aliases=st.lists(st.sampled_from(("x0", "x1", "m4")), max_size=2, unique=True),
        mappings=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.0, 0.5, 1.0])), max_size=2),
    )
    def publish(self, model, aliases, mappings) -> None:
        pub = WirePublication.model_validate(
            {
                "model": model,
                "aliases": aliases,
                "mappings": [{"endpoint_id": ENDPOINTS[e], "ratio": r} for e, r in dict(mappings).items()],
            }
        )
        router_services.apply_publication(AUTHORITY, pub)
        self.touched = {"listed", "backends", "by_model"}

    @rule(model=st.sampled_from(MODELS))
    def unpublish(self, model) -> None:
        router_services.remove_publication(AUTHORITY, model)
        self.touched = {"listed", "backends", "by_model"}

    @rule(
        circuits=st.dictionaries(
            st.integers(0, 2),
            st.lists(
                st.tuples(st.integers(0, 2), st.sampled_from([0.0, 0.5, 1.0])), max_size=3, unique_by=lambda t: t[0]
            ),
            max_size=3,
        ),
        full=st.booleans(),
    )
    def router_circuits(self, circuits, full) -> None:
        with reconcile_lock(AUTHORITY):
            apply_locked(
                [_circuit(e, routes) for e, routes in circuits.items()],
                {},
                source="test",
                authority=AUTHORITY,
                full=full,
                desire=router_services.router_circuit_desire(AUTHORITY),
            )
        self.touched = {"backends", "by_model", "ingress", "worker"}

    @rule(name=st.sampled_from(CONFIG_NAMES), names=st.lists(st.sampled_from((*MODELS, "d0")), max_size=2))
    def discovered(self, name, names) -> None:
        discovered_models_apply({name: names})
        self.touched = {"backends", "by_model"}

    # -- the property ------------------------------------------------------------
    @invariant()
    def incremental_equals_from_scratch(self) -> None:
        self.prev, self.snap = self.snap, selectors.refresh_snapshot(self.snap)
        same(self.snap, selectors.compile_snapshot())
        if self.prev is not EMPTY and "*" not in self.touched:
            # In place: what the step could not touch is the previous object.
            if "keyring" not in self.touched:
                assert self.snap.keyring is self.prev.keyring
            if not self.touched & {"backends", "by_model", "listed"}:
                assert self.snap.backends is self.prev.backends
                assert self.snap.by_model is self.prev.by_model

    @invariant()
    def a_snapshot_without_the_request_parts_follows_the_same_changes(self) -> None:
        self.bare = selectors.refresh_snapshot(self.bare, serving=False)
        full = selectors.compile_snapshot()
        assert not self.bare.keyring
        SEEN["keyring"] += bool(full.keyring)
        for name in Snapshot.__dataclass_fields__:
            if name not in ("created", "keyring"):
                assert getattr(self.bare, name) == getattr(full, name), name

    @invariant()
    def the_mirror_is_what_a_full_reconcile_would_make(self) -> None:
        """Circuit events are planned for their circuits only; the result must
        be the backends a plan of the whole mirror calls for."""
        plan = router_services.current_plan(AUTHORITY)
        wanted = {name: (spec.url, spec.kind, tuple(spec.models), spec.weight) for name, spec in plan.backends.items()}
        have = {
            row.name: (row.url, row.kind, tuple(row.models), row.weight)
            for row in Backend.objects.filter(source=Source.APPPROXY)
        }
        assert have == wanted
        # What /status counts from the stored columns is what the plan says.
        assert router_status.mirror_summary(AUTHORITY) == MirrorSummary(
            plan.pending_circuits, plan.pending_publications, len(plan.drained)
        )

    def teardown(self) -> None:
        self.path.unlink(missing_ok=True)
        self.dir.rmdir()


@pytest.fixture
def isolated(settings):
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    settings.ROUTER_REDIS_PREFIX = prefix
    settings.ROUTER_NOTICE_CHANNEL = prefix + "notice"


def _run(examples: int) -> None:
    Changes.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=100,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    Changes.TestCase().runTest()


def test_incremental_snapshot_equals_a_compile_from_scratch_after_every_change(isolated):
    """10 sequences × 100 steps = 1,000 mixed changes, each checked."""
    before = dict(selectors.REFRESHES)
    _run(10)
    updated = selectors.REFRESHES["updated"] - before["updated"]
    compiled = selectors.REFRESHES["compiled"] - before["compiled"]
    # Only the YAML edits (and each sequence's first snapshot) compile from
    # scratch; everything else is applied in place.
    assert updated > 3 * compiled, (updated, compiled)
    assert SEEN["keyring"] > 100  # the bare snapshot was checked against keys it leaves out


def test_a_topic_changed_whole_is_re_read_and_the_other_parts_kept(isolated, monkeypatch):
    """With every topic of more than one name stored whole (a first pull's
    20,000 backends, at this size): the reader re-reads those topics and
    keeps what the step did not touch (the invariant checks both)."""
    monkeypatch.setattr(revision, "MAX_NAMES", 1)
    before = dict(selectors.REFRESHES)
    _run(10)
    whole = selectors.REFRESHES["whole"] - before["whole"]
    updated = selectors.REFRESHES["updated"] - before["updated"]
    compiled = selectors.REFRESHES["compiled"] - before["compiled"]
    assert whole > 20, (whole, updated, compiled)
    assert updated > 3 * compiled, (updated, compiled)
