"""Resident-memory growth of one call, measured in a fresh child process (the bounded-memory tests).

``growth(setup, call, *argv)`` runs ``setup`` (imports and a warm-up of the same code path, so that
first-call allocations are not counted), then ``call`` while a thread samples the resident set every
5 ms; it returns the peak minus the resident set just before the call, in bytes.  ``sys.argv[1:]``
of the child are ``argv``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_WATCH = """
import resource, sys, threading, time
_page = resource.getpagesize()

def _resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _page

def _growth_during(fn):
    base, peak, done = _resident(), [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], _resident())
            time.sleep(0.005)

    t = threading.Thread(target=watch)
    t.start()
    try:
        fn()
    finally:
        peak[0] = max(peak[0], _resident())
        done.set()
        t.join()
    return peak[0] - base
"""


def growth(setup: str, call: str, *argv, timeout: float = 300) -> int:
    """Peak resident growth (bytes) of ``call`` (an expression) after ``setup`` (statements)."""
    code = _WATCH + textwrap.dedent(setup) + f"\nprint('GROWTH', _growth_during(lambda: {call}))\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code, *map(str, argv)], env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return int(out.stdout.split("GROWTH")[-1].split()[0])
