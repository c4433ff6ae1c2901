"""Confined circuits in the routing snapshot (issue 34, defect 6): pure, then
through the real writers and snapshot refresh on a real DB.

A circuit that is private or has an IP list is reachable through its own
Host only: a request with no scope never selects its replicas, and a name
only confined circuits serve is hidden (unknown, unlisted) — computed once
per snapshot, kept current by the in-place refresh when a circuit changes
its rules without any backend changing.
"""

from __future__ import annotations

import uuid

import pytest

from appproxy.backends import circuit_scope
from appproxy.legacy.ingress import Ingress
from appproxy.legacy.plan import confinement, desired_backends
from appproxy.legacy.services import reconcile_apply
from appproxy.wire import Circuit as WireCircuit
from router import selectors
from router.core.backend import BackendSpec
from router.core.secret import Secret
from router.core.snapshot import Snapshot, group_by_model, hidden_names
from router.services import config_sync

from .test_services import AUTHORITY, SECTION, circuit, route

MODELS = {"ep-secret": "secret", "ep-open": "open", "ep-shared-pub": "shared", "ep-shared-priv": "shared"}


def _wire(endpoint: str, *, public: bool, ips: str | None = None, sub: str | None = "s", app_mode="inference"):
    raw = circuit(route(port=9000), sub=sub, open_to_public=public, allowed_client_ips=ips, app_mode=app_mode)
    raw["endpoint_id"] = str(uuid.uuid5(uuid.NAMESPACE_OID, endpoint))
    return WireCircuit.model_validate(raw)


def _models(*circuits: WireCircuit) -> dict[str, str]:
    by_endpoint = {str(uuid.uuid5(uuid.NAMESPACE_OID, e)): m for e, m in MODELS.items()}
    return {c.model_key: by_endpoint[c.model_key] for c in circuits}


def test_confinement_takes_private_and_ip_listed_inference_circuits():
    """Private or IP-listed → confined (with or without a subdomain); public
    without a list, a list of nothing parseable, and non-inference circuits
    are not; a circuit whose model is not known yet confines its scope only."""
    private = _wire("ep-secret", public=False)
    listed = _wire("ep-shared-priv", public=True, ips="10.0.0.0/8")
    hostless = _wire("ep-secret", public=False, sub=None)
    public = _wire("ep-open", public=True)
    junk_list = _wire("ep-open", public=True, ips="not-an-ip, ")
    interactive = _wire("ep-open", public=False, app_mode="interactive")
    unknown = _wire("ep-unknown", public=False)
    circuits = [private, listed, hostless, public, junk_list, interactive, unknown]
    scopes, names = confinement(circuits, _models(private, listed, hostless, public, junk_list, interactive))
    assert scopes == {circuit_scope(str(c.id)) for c in (private, listed, hostless, unknown)}
    assert names == {"secret", "shared"}


def _snapshot(circuits: list[WireCircuit], extra: tuple[BackendSpec, ...] = ()) -> Snapshot:
    models = _models(*circuits)
    backends = {**desired_backends(circuits, models), **{s.name: s for s in extra}}
    scopes, names = confinement(circuits, models)
    ingress = Ingress(".models.test", frozenset(), {}, Secret("j" * 40), confined=scopes, confined_models=names)
    by_model = group_by_model(backends)
    return Snapshot(0, backends, by_model, ingress=ingress, hidden=hidden_names(by_model, ingress))


def test_a_name_only_confined_circuits_serve_is_hidden_and_their_replicas_never_open():
    """`secret` (one private circuit) is hidden; `shared` (a private and a
    public circuit) stays known with the public circuit's replica only;
    `open` and an operator backend are untouched."""
    secret = _wire("ep-secret", public=False)
    open_ = _wire("ep-open", public=True)
    pub, priv = _wire("ep-shared-pub", public=True), _wire("ep-shared-priv", public=False)
    yaml = BackendSpec(name="yaml-secret", url="http://127.0.0.1:1", models=("yaml-only",), source="config")
    snap = _snapshot([secret, open_, pub, priv], (yaml,))
    assert snap.hidden == {"secret"}
    assert not snap.known("secret") and snap.known("shared") and snap.known("open") and snap.known("yaml-only")
    assert snap.model_names() == ["open", "shared", "yaml-only"]
    assert snap.open_group("secret") == ()
    assert [s.name for s in snap.open_group("shared")] == [
        n for n in snap.backends if n.startswith(circuit_scope(str(pub.id)))
    ]
    assert snap.open_group("open") == snap.by_model["open"]
    assert snap.by_model["secret"]  # its own Host (scoped) still finds it


def test_confines_names_its_circuits_replicas_only():
    """A replica of a confined circuit, whatever its route key; not another
    circuit's, not a prefix look-alike, not an operator backend."""
    cid = str(uuid.uuid4())
    ingress = Ingress(".m.test", frozenset(), {}, Secret("j" * 40), confined=frozenset({circuit_scope(cid)}))
    assert ingress.confines(f"appproxy-{cid}-r{uuid.uuid4()}")
    assert ingress.confines(f"appproxy-{cid}-r0")
    assert not ingress.confines(f"appproxy-{uuid.uuid4()}-r{uuid.uuid4()}")
    assert not ingress.confines(f"appproxy-{cid}x-r1")
    assert not ingress.confines(f"{cid}-r1") and not ingress.confines("yaml-backend")
    odd = "odd-rid-r"  # a circuit id that itself holds "-r"
    ingress = Ingress(".m.test", frozenset(), {}, Secret("j" * 40), confined=frozenset({circuit_scope(odd)}))
    assert ingress.confines(f"appproxy-{odd}-r-r7")
    assert not Ingress(".m.test", frozenset(), {}, Secret("j" * 40)).confines(f"appproxy-{cid}-r1")


# -- the real writers, the real refresh ------------------------------------------

YAML = """
backends:
  - {name: yaml-shared, url: 'http://127.0.0.1:1/y', models: [shared]}
health: {enabled: false}
appproxy:
""" + "".join(f"  {k}: {v!r}\n" for k, v in {**SECTION, "enabled": True}.items())


@pytest.mark.django_db(transaction=True)
def test_refresh_follows_a_circuit_changing_its_rules_without_a_backend_change(openai_backends, tmp_path, settings):
    """A circuit going private (no backend changes: only its rules) is hidden
    by the in-place refresh, which equals a compile from scratch; going public
    again shows it; the candidates of an unscoped request follow."""
    from router.runtime import Runtime

    settings.ROUTER_REDIS_PREFIX = prefix = f"t{uuid.uuid4().hex[:10]}:"
    settings.ROUTER_NOTICE_CHANNEL = prefix + "notice"
    (replica,) = openai_backends("only", models=("only-model",))
    path = tmp_path / "router.yaml"
    path.write_text(YAML)
    config_sync(path)
    raw = circuit(route(replica))
    reconcile_apply([WireCircuit.model_validate(raw)], authority=AUTHORITY, discovery_timeout=1, source="test")
    snap = selectors.compile_snapshot()
    assert snap.known("only-model") and snap.hidden == frozenset()
    rt = Runtime()  # this test's own, not the process's
    rt.install(snap, ready=False)
    assert [c.spec.name for c in rt.candidates(snap, "only-model")] == [n for n in snap.backends if raw["id"] in n]

    for public, hidden in ((False, {"only-model"}), (True, set())):
        before = dict(selectors.REFRESHES)
        changed = {**raw, "open_to_public": public, "updated_at": f"2026-08-11T0{int(public)}:00:00Z"}
        reconcile_apply([WireCircuit.model_validate(changed)], authority=AUTHORITY, discovery_timeout=1, source="t")
        prev, snap = snap, selectors.refresh_snapshot(snap)
        assert selectors.REFRESHES["updated"] == before["updated"] + 1  # in place, not compiled
        assert snap.backends is prev.backends  # no backend changed
        assert snap.hidden == hidden and snap.known("only-model") is public
        assert snap.hidden == selectors.compile_snapshot().hidden
        assert snap.model_names() == sorted({"shared", "only-model"} - hidden)
        rt.install(snap, ready=False)
        assert bool(rt.candidates(snap, "only-model")) is public
        scoped = rt.candidates(snap, "only-model", circuit_scope(raw["id"]))
        assert [c.spec.name for c in scoped] == [n for n in snap.backends if raw["id"] in n]
