"""The `cli` provider kind (normalized path): a backend that is a local command.

- `convert`: pure — the field policy, the prompt rendering, the argv, the
  OpenAI answer and chunks built from the command's output;
- `process`: one run of the command (asyncio subprocess, its own process
  group, bounded stderr, the whole-run deadline, the kill);
- `provider`: the `CLI` provider object the registry lists.

docs/providers/cli.md is the operator's view of all three.
"""

from .provider import CLI as CLI
