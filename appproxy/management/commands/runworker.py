"""``manage.py runworker appproxy [other channels …]``: the events process.

Overrides Channels' ``runworker`` (the appproxy app is listed before
``channels`` in INSTALLED_APPS so this command wins). The channel name
``appproxy`` runs the AppProxy Pub/Sub subscriber in the worker's own event
loop; any other name is an ordinary Channels channel, served as usual.
SIGTERM/SIGINT stop the subscriber cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from channels.management.commands.runworker import Command as ChannelsRunworker
from channels.worker import Worker

from appproxy.subscriber import Subscriber

log = logging.getLogger(__name__)

APPPROXY_CHANNEL = "appproxy"


class AppProxyWorker(Worker):
    """A Channels worker that also runs the AppProxy subscriber."""

    async def handle(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        tasks: list[asyncio.Future] = []
        if APPPROXY_CHANNEL in self.channels:
            tasks.append(asyncio.ensure_future(Subscriber(stop=stop).run()))
        listeners = [asyncio.ensure_future(self.listener(c)) for c in self.channels if c != APPPROXY_CHANNEL]
        tasks += listeners
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        for task in listeners:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        stopper.cancel()
        for result in results:
            if isinstance(result, Exception):
                log.error("runworker: a listener failed: %r", result)


class Command(ChannelsRunworker):
    help = "Run Channels workers; the channel 'appproxy' runs the AppProxy event subscriber."
    worker_class = AppProxyWorker
