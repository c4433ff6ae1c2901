"""`/` sends a browser to the dashboard and tells any other client where to go."""

from __future__ import annotations

import httpx
import pytest

from tests.support.routerproc import RouterProc

CONFIG = """
backends:
  - name: b1
    url: http://127.0.0.1:9
    models: [m]
"""
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


@pytest.fixture(scope="module")
def router():
    proc = RouterProc(CONFIG).start()
    yield proc
    proc.stop()


def test_a_browser_at_the_root_is_redirected_to_the_dashboard(router):
    r = httpx.get(router.url + "/", headers={"accept": BROWSER_ACCEPT})
    assert r.status_code == 302
    assert r.headers["location"] == "/dashboard/"
    assert "accept" in r.headers["vary"].lower()
    # …where a visitor who is not signed in is sent to the login.
    followed = httpx.get(router.url + "/", headers={"accept": BROWSER_ACCEPT}, follow_redirects=True)
    assert followed.status_code == 200 and "/admin/login/" in str(followed.url)


@pytest.mark.parametrize("accept", [None, "*/*", "application/json", "text/html;q=0"],
                         ids=["no-accept", "any", "json", "html-refused"])
def test_an_api_client_at_the_root_gets_a_404_naming_the_api_base_and_the_dashboard(router, accept):
    """Not a 200: a load balancer left at its default check path must not
    count the node healthy (/readyz is the probe)."""
    with httpx.Client() as client:
        if accept is None:
            del client.headers["accept"]  # httpx's default is */*
        else:
            client.headers["accept"] = accept
        r = client.get(router.url + "/")
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert error["code"] == "not_found" and error["type"] == "invalid_request_error"
    for where in ("/v1", "/dashboard/", "/readyz", "docs/"):
        assert where in error["message"]


def test_other_methods_at_the_root_get_the_same_404(router):
    r = httpx.post(router.url + "/", json={}, headers={"accept": BROWSER_ACCEPT})
    assert r.status_code == 404 and "/v1" in r.json()["error"]["message"]
