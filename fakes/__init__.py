"""Fake servers for tests, demos and the benchmark; no product code.

- `openai_backend`, `ollama_backend`: fake LLM backends speaking the real wire
  formats, on loopback (`python -m fakes.openai_backend --help`);
- `server`: what both share (`ServerThread`, `Behavior`, `Recorded`, the CLI);
- `demo.yaml`: the bundled demo config; `manage.py runnode` starts the demo
  backends it points at as subprocesses (`python -m fakes.<backend>`);
- `coordinator`: a fake Backend.AI AppProxy coordinator
  (`python -m fakes.coordinator --help`).

Dependencies point one way: fakes may import product wire definitions (the
coordinator uses `appproxy.envelope`), but no product package (router, keys,
appproxy, dashboard, config) imports `fakes`; tests/fakes/test_boundary.py
checks it.
"""
