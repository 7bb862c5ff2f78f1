#!/usr/bin/env python3
"""Runs a test on a CPU of its own: nextest's wrapper script (.config/nextest.toml).

Each of nextest's test threads (its slots, `NEXTEST_TEST_GLOBAL_SLOT`) is a
lane pinned to one CPU this process may use. On the nested hosts hvsim is
developed on, guest kernel code is emulated in the vCPU's thread, and two
guests left to the scheduler slow each other far more than their CPU time
explains; pinned to CPUs of their own, two Linux guests run each about as
fast as alone (docs/testing.md has the figures). Without a slot (outside
nextest) or with one CPU, nothing is pinned.
"""
import os
import sys

command = sys.argv[1:]
if not command:
    sys.exit("usage: ci/lane.py CMD [ARGS...]")
cpus = sorted(os.sched_getaffinity(0))
slot = os.environ.get("NEXTEST_TEST_GLOBAL_SLOT", "")
if len(cpus) > 1 and slot.isdigit():
    os.sched_setaffinity(0, {cpus[int(slot) % len(cpus)]})
os.execvp(command[0], command)
