#!/usr/bin/env python3
"""Runs a test on its lane's CPUs (nextest's wrapper script, .config/nextest.toml).

The tests that boot Linux (nextest's test group `linux`) get the first CPU
this process may use; everything else (raw-guest, unit and host-only tests)
gets the others. On the nested hosts hvsim is developed on, guest kernel
code is emulated in the vCPU's thread, and two busy lanes left to the
scheduler slow each other far more than their CPU time explains
(docs/testing.md has the figures). On one CPU nothing is pinned.
"""
import os
import sys

command = sys.argv[1:]
if not command:
    sys.exit("usage: ci/lane.py CMD [ARGS...]")
cpus = sorted(os.sched_getaffinity(0))
if len(cpus) > 1:
    linux = os.environ.get("NEXTEST_TEST_GROUP") == "linux"
    os.sched_setaffinity(0, cpus[:1] if linux else cpus[1:])
os.execvp(command[0], command)
