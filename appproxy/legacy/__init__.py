"""The legacy wildcard AppProxy worker (section ``appproxy``): one Host per
circuit under a wildcard domain, models found by discovery. ``mode.py`` is
how the shared code calls it."""
