"""Request ids the router makes for a request that brought none (router/admission.py)."""

from __future__ import annotations

import os
import re

from router.admission import new_request_id


def test_ids_are_32_hex_digits_and_never_repeat_in_a_process():
    ids = [new_request_id() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_draws_its_own_prefix():
    read, write = os.pipe()
    parent = new_request_id()
    pid = os.fork()
    if pid == 0:  # the child: report one id and leave at once
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child[:16] != parent[:16]  # 64 random bits each: equal with odds of 2^-64
