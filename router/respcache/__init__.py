"""The response cache (issue 37, docs/response-cache.md): answers of repeated
requests served by the router, from a per-process memory LRU and from Redis
shared by every node of the deployment, before any backend is selected.

Invariants:
- Off (the default), a request pays one attribute check
  (`snapshot.response_cache is None`) and this package is never entered.
- A hit still passed admission and the key gate: it needed a valid key and
  counted against its rate limit; it is observed like any answer
  (`cache: hit`), and so counted in its key's usage.
- Only complete 200 answers in OpenAI's wire format are stored; an entry is
  the whole object a non-streaming request gets, and a streaming request
  gets it replayed in its door's format.
- Nothing a client sends grows memory without bound: the memory tier is an
  LRU bounded by bytes, an entry by max_entry_bytes, a stream being
  assembled by the same, and background writes by their count.
- Redis is optional: down or slow, the cache is bypassed and every request
  is still served.

Modules: key (entry names, what is cacheable), memory (the LRU), shared (the
Redis tier, purge), assemble / replay (stream ⇄ whole object), door
(`answer()`, what the front doors call).
"""
