"""The tasks process sends itself the first tick when it starts consuming
(appproxy.tasks._tick_at_start): a first boot registers and pulls without
waiting for beat, which starts beside four other processes (issue 13)."""

from __future__ import annotations

import uuid

from .router_support import RouterManager, RouterNode, new_key
from .support import coordinator, eventually


def test_a_worker_without_beat_registers_and_pulls_at_start():
    fc = coordinator(ack_timeout=5.0)
    fc.start()
    authority = f"router-{uuid.uuid4().hex[:8]}"
    node = RouterNode(fc, authority)
    node.tasks.cmd = [a for a in node.tasks.cmd if a not in ("-B",)]  # no beat: only the tick at start
    assert "-B" not in node.tasks.cmd
    manager = RouterManager(fc, authority)
    try:
        plain, digest = new_key()
        manager.put_key("k-first", digest)
        # as RouterNode.start, but the tasks process only once the events
        # process subscribed (after the web process applied the file):
        # registering waits for it, and without beat no later tick tries again
        node.node_id = str(uuid.uuid4())
        node.web.env["APPPROXY_NODE_ID"] = node.node_id
        node.tasks.env = node.events.env = node.web.env
        node.start_web_unready(120.0)
        node.events.start()
        eventually(lambda: "subscribed to the event bus" in node.events.logs(), 60, "events subscribed")
        node.tasks.start()
        # registered, and the first pull applied
        eventually(lambda: node.readyz().status_code == 200, 120, "/readyz 200")
        eventually(lambda: node.models(plain).status_code == 200, 30, "the pulled key serves")
        assert node.status()["appproxy_router"]["node_id"] == node.node_id
    finally:
        node.stop()
        fc.stop()
