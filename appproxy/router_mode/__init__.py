"""The ROUTER AppProxy worker (section ``appproxy_router``; docs/router-mode.md):
circuits joined with the coordinator's model publications, coordinator keys.
``mode.py`` is how the shared code calls it."""
