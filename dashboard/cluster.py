"""The Cluster page's reading: node.cluster's state shaped for the matrix.

Columns are the processes that route (web processes; the tasks process lists
no backends), rows the backends, unhealthy-somewhere and disagreeing ones
first; the HTML shows at most MAX_ROWS rows (the JSON carries them all,
bounded by the cluster view's caps).
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError

from node import cluster

from .selectors import iso

MAX_ROWS = 200


def this_process() -> str:
    """`<node>/<pid>` of the process rendering the page (the Cluster page's ids)."""
    return f"{settings.ROUTER_NODE_ID}/{os.getpid()}"


def cluster_view() -> dict[str, Any]:
    try:
        state = cluster.cluster_state()
    except RedisError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "this": this_process()}
    me = this_process()
    for p in state["processes"]:
        p["this"] = p["id"] == me
        p["started"] = iso(p["started_at"])
    columns = [p for p in state["processes"] if p["role"] == "web"]
    rows = []
    for b in state["backends"]:
        cells = b["cells"]
        rows.append(
            {
                "name": b["name"],
                "split": b["split"],
                "unhealthy": any(c["verdict"] in cluster.UNHEALTHY for c in cells.values()),
                "cells": [
                    {"process": p["id"], **cells[p["id"]]} if p["id"] in cells else {"process": p["id"]}
                    for p in columns
                ],
            }
        )
    rows.sort(key=lambda r: (not r["split"], not r["unhealthy"], r["name"]))
    return {
        **state,
        "this": me,
        "columns": columns,
        "rows": rows[:MAX_ROWS],
        "rows_hidden": max(len(rows) - MAX_ROWS, 0),
    }
