"""CORS for browser clients of `/v1`: what a preflight and an answer carry.

The policy is compiled once per snapshot (`CorsPolicy.build`, None when
`cors.allow_origins` is empty: CORS off), with every header value it can
precompute; per request it only looks the Origin up in a set.

Rules (the Fetch standard's CORS protocol):
- An origin matches exactly (scheme://host[:port], lower case), or any
  origin when `*` is listed.
- `Access-Control-Allow-Origin: *` only without credentials. With
  credentials (or an exact list) the request's Origin is echoed, and every
  answer says `Vary: Origin`, so a shared cache never hands one origin's
  answer to another.
- A wildcard in the allowed headers echoes what the preflight asks for
  (`*` would not cover `Authorization`, and with credentials is no wildcard
  at all); methods are always listed.
- A preflight whose origin, method or headers are not allowed is refused
  (`refusal` says why); an answer to a disallowed origin gets no CORS
  header, so the browser withholds it from the page.

Pure: bytes in, header tuples out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Header = tuple[bytes, bytes]

VARY = (b"vary", b"Origin")


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    origins: frozenset[bytes]  # exact origins, lower case
    any_origin: bool
    credentials: bool
    methods: frozenset[bytes]
    headers: frozenset[bytes]  # lower case; empty with any_header
    any_header: bool
    preflight: tuple[Header, ...]  # the fixed part of an allowed preflight's answer
    answer: tuple[Header, ...]  # the fixed part of an allowed origin's answer
    vary: bool  # the answer depends on the Origin (not a plain `*`)

    @classmethod
    def build(
        cls,
        *,
        allow_origins: Iterable[str],
        allow_methods: Iterable[str],
        allow_headers: Iterable[str],
        expose_headers: Iterable[str],
        max_age: int,
        allow_credentials: bool,
    ) -> CorsPolicy | None:
        origins = [o.strip().lower() for o in allow_origins if o.strip()]
        if not origins:
            return None
        any_origin = "*" in origins
        headers = [h.strip().lower() for h in allow_headers if h.strip()]
        any_header = "*" in headers
        methods = sorted({m.strip().upper() for m in allow_methods if m.strip()})
        credentials = [(b"access-control-allow-credentials", b"true")] if allow_credentials else []
        preflight = [(b"access-control-allow-methods", ", ".join(methods).encode())]
        if headers and not any_header:
            preflight.append((b"access-control-allow-headers", ", ".join(headers).encode()))
        preflight += [(b"access-control-max-age", str(max_age).encode()), *credentials]
        exposed = ", ".join(h.strip() for h in expose_headers if h.strip())
        answer = [*credentials, *([(b"access-control-expose-headers", exposed.encode())] if exposed else [])]
        return cls(
            origins=frozenset(o.encode() for o in origins if o != "*"),
            any_origin=any_origin,
            credentials=allow_credentials,
            methods=frozenset(m.encode() for m in methods),
            headers=frozenset() if any_header else frozenset(h.encode() for h in headers),
            any_header=any_header,
            preflight=tuple(preflight),
            answer=tuple(answer),
            vary=allow_credentials or not any_origin,
        )

    def allow_origin(self, origin: bytes | None) -> bytes | None:
        """The Access-Control-Allow-Origin value for `origin` (None: not allowed)."""
        if origin is None:
            return None
        if self.any_origin:
            return origin if self.credentials else b"*"
        return origin if origin.lower() in self.origins else None

    def on_answer(self, origin: bytes | None) -> tuple[Header, ...]:
        """The headers an answer to a request from `origin` gets."""
        allowed = self.allow_origin(origin)
        if allowed is None:
            return (VARY,) if self.vary else ()
        head = ((b"access-control-allow-origin", allowed), *self.answer)
        return (*head, VARY) if self.vary else head

    def refusal(self, origin: bytes, method: bytes, headers: bytes | None) -> str | None:
        """Why a preflight is refused (None: allowed)."""
        if self.allow_origin(origin) is None:
            return f"The origin {origin.decode('latin1')!r} is not allowed (cors.allow_origins)."
        if method not in self.methods:
            return f"The method {method.decode('latin1')!r} is not allowed (cors.allow_methods)."
        if headers and not self.any_header:
            for name in headers.split(b","):
                name = name.strip().lower()
                if name and name not in self.headers:
                    return f"The header {name.decode('latin1')!r} is not allowed (cors.allow_headers)."
        return None

    def on_preflight(self, origin: bytes, headers: bytes | None) -> tuple[Header, ...]:
        """The headers of an allowed preflight's answer."""
        out = [(b"access-control-allow-origin", self.allow_origin(origin) or b""), *self.preflight]
        if self.any_header and headers:
            out.append((b"access-control-allow-headers", headers))
        if self.vary:
            out.append(VARY)
        return tuple(out)
