"""Which AppProxy modes this node runs, and what an AppProxy page says while
the mode that fills it is off.

The Circuits, Events and Publications pages show what a Backend.AI AppProxy
coordinator sends; on a plain node they could only ever be empty. So the nav
lists such a page only while a mode that fills it is on (`in_nav`), and the
page still answers at its URL with a notice (`off_notice`) saying what it
shows once that mode is on and how to turn it on: a bookmark or a link never
lands on an empty page, and the nav of a plain node names only what it runs.

The modes are read per request from the applied routing document (parsed
once per document, appproxy.config.load_cached): a mode turned on in the
YAML shows its pages at the next page load, without a restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.apps import apps

LEGACY, ROUTER = "legacy", "router"
ANY = (LEGACY, ROUTER)

LEGACY_HOW = (
    "Legacy worker (one wildcard domain per model): set appproxy.enabled: true with coordinator_url, "
    "api_secret and jwt_secret (as ${ENV_VAR}), authority, hostname and wildcard_domain; see docs/appproxy.md."
)
ROUTER_HOW = (
    "ROUTER worker (one /v1 for the cluster): set appproxy_router.enabled: true with coordinator_url, "
    "api_secret (as ${ENV_VAR}), authority and hostname; see docs/router-mode.md."
)
HOW = {LEGACY: LEGACY_HOW, ROUTER: ROUTER_HOW}

# What each page shows once a mode that fills it is on: its off notice.
ABOUT = {
    "circuits": (
        "Once it is on, this page lists the circuits: the model deployments the Backend.AI AppProxy coordinator "
        "binds to this node, with their subdomain, model, endpoint, access (public or JWT) and routes, the "
        "replicas (host:port and traffic ratio) and the backend each becomes here."
    ),
    "events": (
        "Once it is on, this page lists the coordinator's events as this node receives them (circuits created, "
        "updated or removed; in ROUTER mode publications and keys too): whether each applied, how long applying "
        "took and how long the coordinator waited for the ack."
    ),
    "publications": (
        "Once ROUTER mode is on, this page lists the model names Backend.AI publishes for this node's authority, "
        "the endpoints behind each and the backends this node makes of them (serving, pending or drained), and "
        "the Router worker panel: registration, pulls, heartbeats, node sessions and router events."
    ),
}


@dataclass(frozen=True, slots=True)
class Modes:
    legacy: bool
    router: bool
    broken: bool = False  # a section that does not parse (its page says why)

    def any_of(self, modes: tuple[str, ...]) -> bool:
        return self.broken or any(getattr(self, mode) for mode in modes)


def current() -> Modes | None:
    """The AppProxy modes on in the routing document; None when the appproxy
    app is absent (its pages are not in the nav then either). Imported when
    asked: appproxy is optional for the dashboard."""
    if not apps.is_installed("appproxy"):
        return None
    try:
        from appproxy.legacy.config import load_settings
        from appproxy.router_mode.config import load_router_settings
    except ImportError:
        return None
    on, broken = {}, False
    for mode, load in ((LEGACY, load_settings), (ROUTER, load_router_settings)):
        try:
            settings = load()
        except Exception:  # an unparsable section: reported by the pages that read it
            settings, broken = None, True
        on[mode] = settings is not None and settings.enabled
    return Modes(legacy=on[LEGACY], router=on[ROUTER], broken=broken)


def in_nav(page_modes: tuple[str, ...], modes: Modes | None) -> bool:
    """A page that needs no mode is always listed; one that does, while one
    of its modes is on (or a section does not parse: its page says why)."""
    if not page_modes:
        return True
    return modes is not None and modes.any_of(page_modes)


def off_notice(page: str, page_modes: tuple[str, ...] = ANY) -> dict[str, object] | None:
    """The notice of `page` while none of `page_modes` is on: what the page
    shows once one is, and how to turn each on. None when one is on, a
    section does not parse, or appproxy is absent."""
    modes = current()
    if modes is None or modes.any_of(page_modes):
        return None
    title = "ROUTER mode is off" if page_modes == (ROUTER,) else "AppProxy mode is off"
    return {"title": title, "about": ABOUT[page], "how": [HOW[mode] for mode in page_modes]}
