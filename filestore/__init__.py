"""The Files API (`/v1/files`, OpenAI's wire format): uploads kept per API key.

Not on the chat hot path: config/asgi.py hands `/v1/files*` to
`filestore.door.serve`, which may use the DB (async ORM, threads) and the
storage backend. Metadata is a `StoredFile` row, the bytes live in the
`router_files` Django storage (docs/files.md). Batches (`/v1/batches`,
filestore/batches/) run the requests of such a file in the tasks process.
"""
