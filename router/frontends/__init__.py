"""Client-facing API surfaces other than OpenAI's, translated onto the /v1 pipeline.

`anthropic*.py` are pure conversions (no Django, no I/O); `messages.py` is the
thin async view that runs them around `proxy.handle`.
"""
