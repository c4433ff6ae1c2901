"""Host ingress (LEG-5/6/7): pure, no DB, no network."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import jwt
import pytest

from appproxy.legacy.ingress import Ingress, normalize_host
from appproxy.legacy.plan import ingress_table
from appproxy.wire import Circuit
from router.core.errors import ClientIpNotAllowed, EndpointNotFound, InvalidToken, NoBackendAvailable
from router.core.secret import Secret

SECRET = "jwt-secret-" + "k" * 40
PUBLIC, PRIVATE, LOCKED, EMPTY, UNKNOWN = (str(uuid.uuid4()) for _ in range(5))
EP = {cid: str(uuid.uuid4()) for cid in (PUBLIC, PRIVATE, LOCKED, EMPTY, UNKNOWN)}


def _circuit(cid: str, sub: str, *, public: bool, ips: str | None = None, routes: int = 1) -> Circuit:
    return Circuit.model_validate(
        {
            "id": cid,
            "subdomain": sub,
            "open_to_public": public,
            "allowed_client_ips": ips,
            "endpoint_id": EP[cid],
            "route_info": [
                {"session_id": str(uuid.uuid4()), "kernel_host": "10.0.0.1", "kernel_port": 9000 + i}
                for i in range(routes)
            ],
        }
    )


@pytest.fixture
def ingress() -> Ingress:
    circuits = [
        _circuit(PUBLIC, "pub", public=True),
        _circuit(PRIVATE, "Priv", public=False),
        _circuit(LOCKED, "locked", public=True, ips="10.1.0.0/16, ::1"),
        _circuit(EMPTY, "empty", public=False, routes=0),
        _circuit(UNKNOWN, "nomodel", public=True),
    ]
    models = {EP[PUBLIC]: "llama", EP[PRIVATE]: "qwen", EP[LOCKED]: "llama", EP[EMPTY]: "gone"}
    return Ingress(
        domain=".models.test",
        aggregate_hosts=frozenset({"models.test", "llm.test"}),
        table=ingress_table(circuits, models),
        jwt_secret=Secret(SECRET),
    )


def env(host: str, *, token: str | None = None, ip: str = "127.0.0.1"):
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    return SimpleNamespace(host=host, headers=headers, client_ip=ip)


def token(cid: str, *, key: str = SECRET, alg: str = "HS256", exp: float | None = None) -> str:
    return jwt.encode({"id": cid, "exp": int(exp or time.time() + 600)}, key, algorithm=alg)


@pytest.mark.parametrize(
    ("raw", "host"),
    [("A.Models.Test:8443", "a.models.test"), ("a.models.test.", "a.models.test"), ("[::1]:80", "[::1]"),
     ("127.0.0.1:8000", "127.0.0.1"), ("", "")],
)  # fmt: skip
def test_normalize_host(raw, host):
    assert normalize_host(raw) == host


def test_public_circuit_pins_its_model(ingress):
    assert ingress.resolve(env("pub.models.test:8000")) == "llama"
    assert ingress.resolve(env("PUB.MODELS.TEST")) == "llama"


@pytest.mark.parametrize("host", ["models.test", "llm.test", "LLM.test:443", "127.0.0.1:8000", "other.example", ""])
def test_apex_aggregation_and_foreign_hosts_are_plain_routing(ingress, host):
    assert ingress.resolve(env(host)) is None


def test_unknown_subdomain_is_404(ingress):
    with pytest.raises(EndpointNotFound) as err:
        ingress.resolve(env("nope.models.test"))
    assert err.value.status == 404 and err.value.code == "endpoint_not_found"
    with pytest.raises(EndpointNotFound):
        ingress.resolve(env("a.pub.models.test"))  # only one label is a subdomain


def test_private_circuit_jwt_matrix(ingress):
    """Valid passes; expired, wrong secret, wrong id, alg none, HS512 and a
    missing header are 401."""
    assert ingress.resolve(env("priv.models.test", token=token(PRIVATE))) == "qwen"
    bad = {
        "missing": None,
        "expired": token(PRIVATE, exp=time.time() - 5),
        "wrong secret": token(PRIVATE, key="x" * 48),
        "wrong id": token(PUBLIC),
        "alg none": jwt.encode({"id": PRIVATE, "exp": int(time.time() + 60)}, None, algorithm="none"),
        "HS512": token(PRIVATE, alg="HS512", key=SECRET + "-long-enough-for-hs512-" + "z" * 20),
        "HS512 same key": token(PRIVATE, alg="HS512"),
    }
    for label, value in bad.items():
        with pytest.raises(InvalidToken):
            ingress.resolve(env("priv.models.test", token=value))
        assert label


def test_ip_allowlist_before_anything_else(ingress):
    assert ingress.resolve(env("locked.models.test", ip="10.1.2.3")) == "llama"
    assert ingress.resolve(env("locked.models.test", ip="::1")) == "llama"
    for ip in ("10.2.0.1", "not-an-ip", "unknown"):
        with pytest.raises(ClientIpNotAllowed) as err:
            ingress.resolve(env("locked.models.test", ip=ip))
        assert err.value.status == 403
    assert ingress.resolve(env("locked.models.test", ip="")) == "llama"  # the node's Unix socket: no IP rules


def test_empty_circuit_pins_its_model_after_auth(ingress):
    """No routes: the model is still pinned (fallback chain), but only once the
    token passed."""
    with pytest.raises(InvalidToken):
        ingress.resolve(env("empty.models.test"))
    assert ingress.resolve(env("empty.models.test", token=token(EMPTY))) == "gone"


def test_unknown_model_is_503_not_a_body_model(ingress):
    with pytest.raises(NoBackendAvailable):
        ingress.resolve(env("nomodel.models.test"))


def test_repr_has_no_secret(ingress):
    assert SECRET not in repr(ingress)
