"""router.gcwork: the collector is off while any paused() block runs (blocks
may overlap in threads) and back as it was after the last one."""

from __future__ import annotations

import gc
import threading

import pytest

from router import gcwork


@pytest.fixture(autouse=True)
def _restore():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_off_inside_back_on_after_even_when_the_work_raises():
    gc.enable()
    with pytest.raises(RuntimeError), gcwork.paused():
        assert not gc.isenabled()
        raise RuntimeError("the work failed")
    assert gc.isenabled()


def test_overlapping_blocks_in_threads_resume_after_the_last():
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def other():
        with gcwork.paused():
            inside.set()
            release.wait(30)

    thread = threading.Thread(target=other)
    with gcwork.paused():
        thread.start()
        assert inside.wait(30)
    assert not gc.isenabled()  # the other block still runs
    release.set()
    thread.join(30)
    assert gc.isenabled()


def test_a_collector_off_before_stays_off():
    gc.disable()
    with gcwork.paused():
        pass
    assert not gc.isenabled()
