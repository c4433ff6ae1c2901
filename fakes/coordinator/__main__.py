"""Run the fake coordinator: ``python -m fakes.coordinator --help``."""

from .cli import main

main()
