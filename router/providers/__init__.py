"""Upstream providers: one per backend kind family."""

from .base import provider_for

__all__ = ["provider_for"]
