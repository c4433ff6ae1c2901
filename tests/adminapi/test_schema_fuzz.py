"""Schemathesis against the admin API's own OpenAPI schema, in-process
(Django's WSGI handler, real DB, real Redis, a real YAML config file): for
every operation, requests generated from the schema (valid and not) never
get a 5xx, and every answer the schema documents matches it. A few examples
per operation keep the run short; token revocation is left out (it would
revoke the token the run authenticates with)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")

from django.core.wsgi import get_wsgi_application  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance  # noqa: E402

from adminapi.tokens import token_create  # noqa: E402
from router.models import Backend  # noqa: E402
from tests.support.redisns import isolated_prefix  # noqa: E402

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_headers(db, settings, config_file):
    yield from _headers(settings)


def _headers(settings):
    for _ in isolated_prefix(settings, "adminfuzz"):
        Backend.objects.create(name="admin-one", url="http://127.0.0.1:9", models=["m1"])
        _, token = token_create(name="fuzz")
        yield {"Authorization": f"Bearer {token}"}


def _schema():
    """The schema /api/v1/openapi.json serves (the same object renders it),
    its requests sent to Django's WSGI handler in this process."""
    from adminapi.api import api

    loaded = schemathesis.openapi.from_dict(api.get_openapi_schema())
    loaded.app = get_wsgi_application()
    return loaded.exclude(method="DELETE", path="/api/v1/tokens/{token_id}")


schema = _schema()


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_no_5xx_and_answers_match_the_schema(case, admin_headers):
    case.call_and_validate(headers=admin_headers,
                           checks=[not_a_server_error, response_schema_conformance, content_type_conformance])
