"""Overlapping sweeps from several request threads leave torch's thread count as it was."""

from __future__ import annotations

import threading
import time

import torch

from attncore.sweeps import entropy_vs_length


def small_sweep(progress=None) -> None:
    entropy_vs_length([256, 1 << 15], d=16, queries=16, seed=1, device="cpu", workers=2, progress=progress)


def test_overlapping_sweeps_restore_the_thread_count() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        errors: list[BaseException] = []
        started: list[threading.Thread] = []

        def run(progress=None) -> None:
            try:
                small_sweep(progress)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        def first_progress(frac: float, msg: str) -> bool:
            # while this sweep's workers run (single-threaded), more sweeps start in other threads
            if not started:
                for _ in range(3):
                    t = threading.Thread(target=run)
                    t.start()
                    started.append(t)
                time.sleep(0.3)  # let them reach the sweep entry while this one holds the threads
            return True

        a = threading.Thread(target=run, args=(first_progress,))
        a.start()
        a.join()
        for t in started:
            t.join()
        assert not errors, errors
        assert len(started) == 3
        assert torch.get_num_threads() == 2
        seen: list[int] = []
        probe = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        probe.start()
        probe.join()
        assert seen == [2]
    finally:
        torch.set_num_threads(before)


def test_single_threaded_users_overlapping_in_any_order_restore_the_count() -> None:
    from attncore.threads import single_threaded

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a, b = single_threaded(), single_threaded()
        assert a.__enter__() == 2
        assert torch.get_num_threads() == 1
        assert b.__enter__() == 2  # the second user sees the process's count, not the first one's 1
        a.__exit__(None, None, None)  # the first leaves while the second still runs
        assert torch.get_num_threads() == 1
        b.__exit__(None, None, None)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
