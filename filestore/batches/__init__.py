"""Batches (`/v1/batches`, OpenAI's wire format): a file of requests, run offline.

The web process only creates, lists and cancels them (door.py); the tasks
process runs them (run.py) on a routing runtime of its own (loop.py),
through the same door as `/v1` requests (router.frontends.openai): the same
key gate, selection, retries, fallbacks and per-key usage. docs/files.md
states the semantics: states, concurrency, resumption.
"""
