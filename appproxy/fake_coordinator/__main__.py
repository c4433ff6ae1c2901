"""Run the fake coordinator: ``python -m appproxy.fake_coordinator --help``."""

from .cli import main

main()
