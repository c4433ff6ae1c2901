"""`/api/v1/tokens`: the admin tokens, listed (masked) and revoked.

Tokens are issued only by `manage.py createadmintoken` (a shell on a node),
so a leaked token cannot mint another one.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from . import audit, tokens
from .auth import actor_of
from .errors import NotFound
from .models import AdminToken
from .paging import PageQuery, page

router = Router(tags=["admin tokens"])


class TokenOut(Schema):
    id: int
    name: str
    hint: str = Field(description="adm-…abcd")
    read_only: bool
    created_at: datetime
    last_used_at: datetime | None = Field(description="to the minute")
    revoked_at: datetime | None


class TokenPage(Schema):
    data: list[TokenOut]
    total: int
    limit: int
    offset: int


class TokenFilter(PageQuery):
    include_revoked: bool = False


def _out(t: AdminToken) -> TokenOut:
    return TokenOut(id=t.pk, name=t.name, hint=t.hint, read_only=t.read_only, created_at=t.created_at,
                    last_used_at=t.last_used_at, revoked_at=t.revoked_at)


@router.get("", response=TokenPage, summary="List admin tokens (masked)")
def list_tokens(request: HttpRequest, filters: Query[TokenFilter]) -> dict:
    rows, facts = page(tokens.token_list(include_revoked=filters.include_revoked).order_by("name", "pk"), filters)
    return {"data": [_out(t) for t in rows], **facts}


@router.delete("/{int:token_id}", response={204: None}, summary="Revoke an admin token")
def revoke_token(request: HttpRequest, token_id: int) -> tuple[int, None]:
    token = AdminToken.objects.filter(pk=token_id).first()
    if token is None:
        raise NotFound(f"No admin token with id {token_id}.", param="token_id")
    with transaction.atomic():
        if tokens.token_revoke(token):
            audit.record(actor_of(request).name, "token.revoke", f"token:{token.pk}", detail={"hint": token.hint})
    return 204, None
