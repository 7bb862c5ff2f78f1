#!/usr/bin/env python3
"""Writes the binary seeds of the `virtio` and `hypercall` fuzz targets.

Their inputs are bytes that the targets decode into a driver's operations
(vmm/src/devices/virtio/hostile.rs, `Op::arbitrary`) or a guest's port
accesses (fuzz/src/hypercall.rs, `accesses`); this script spells out, in
those encodings, what a well-behaved driver or guest does, so the fuzzer
starts from real traffic. Tests check that each seed still does what it
says (`the_well_behaved_seed_does_every_devices_work`,
`the_session_seed_speaks_the_protocol`): run this again if an encoding
changes.

    python3 fuzz/seeds.py
"""

import os
import random
import struct

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(bytes(data))


def virtio():
    # Each operation starts with its kind, a byte taken modulo 45 (the
    # weights of `Op::arbitrary`); each field in a range is one byte taken
    # modulo the range's size, big-endian bytes for wider ranges.
    SETUP, BLK_REQUEST, NET_TX, NET_RX, RNG_REQUEST, TICK = 0, 25, 31, 35, 39, 44
    KINDS = [0, 1, 4, 8, 2, 11]  # the block request types `BlkRequest` chooses from

    def tick(ns):
        return bytes([TICK]) + ns.to_bytes(3, "big")

    b = bytearray([128])  # the round trip half way
    for dev in range(7):
        b += bytes([SETUP, dev])
    for node in range(2):
        for slot in range(4):
            b += bytes([NET_RX, node, slot])
    for disk in range(4):  # two node disks, two image disks
        for slot, (kind, sectors) in enumerate([(1, 1), (0, 1), (4, 0), (8, 0), (0, 3)]):
            b += bytes([BLK_REQUEST, disk, slot, KINDS.index(kind), 3 * slot + disk, sectors])
    b += bytes([NET_TX, 0, 0, 0, 100, 0])  # node 0 to node 1, 100 bytes
    b += bytes([NET_TX, 1, 1, 0, 60, 1])  # node 1, broadcast
    b += bytes([RNG_REQUEST, 0, 0x01, 0x00])  # 256 bytes of entropy
    for _ in range(12):  # through the plan's partition and crashes
        b += tick(900_000)
    for disk in range(2):
        b += bytes([BLK_REQUEST, disk, 0, 0, 5, 2])
    b += tick(100_000)
    write("virtio", "well-behaved", b)
    r = random.Random(17)
    for n in [512, 2048]:
        write("virtio", f"random-{n}", (r.randrange(256) for _ in range(n)))


def hypercall():
    # Port offsets in the block (hvsim_abi::hc) and the commands.
    CMD, DATA, CLOCK_LO, CLOCK_HI, ALARM_LO, ALARM_HI, POKE = 0, 4, 8, 12, 16, 20, 24
    EXIT, SEND, RANDOM, RESET, IRQ_FLAG, EVENT, READY, INBOX, CAPS, COVERAGE, VCLOCK = (
        1, 2, 3, 5, 7, 8, 9, 10, 11, 12, 13)

    def out(port, data):
        assert len(data) <= 8
        return bytes([port, 0x80 | len(data)]) + data

    def inp(port, n):
        return bytes([port, n])

    def cmd(op, arg=0):
        return out(CMD, struct.pack("<I", (op << 24) | arg))

    b = bytearray([128, 3])  # the round trip half way; seed 3
    b += cmd(CAPS, 3) + cmd(READY)
    b += cmd(INBOX, 16) + inp(CMD, 4) + inp(DATA, 8) + inp(DATA, 8)
    b += cmd(INBOX, 16) + inp(DATA, 8) + inp(DATA, 6)
    msg = b'{"antithesis_setup":{}}'
    for i in range(0, len(msg), 8):
        b += out(DATA, msg[i:i + 8])
    b += cmd(SEND)
    b += cmd(RANDOM, 8) + inp(DATA, 8)
    b += cmd(EVENT) + inp(DATA, 4)
    b += inp(CLOCK_LO, 4) + inp(CLOCK_HI, 4)
    b += out(ALARM_LO, struct.pack("<I", 5_000_000)) + out(ALARM_HI, struct.pack("<I", 0))
    b += inp(ALARM_LO, 4) + inp(ALARM_HI, 4)
    b += bytes([0xff]) + struct.pack("<H", 6000)  # 6 ms pass: the alarm goes off
    b += out(POKE, b"\0\0\0\0")
    b += cmd(IRQ_FLAG, 0x100) + cmd(COVERAGE, 0x200) + cmd(VCLOCK, 0x300)
    b += cmd(RESET) + cmd(EXIT)
    write("hypercall", "a-guest-session", b)
    r = random.Random(29)
    write("hypercall", "random-512", (r.randrange(256) for _ in range(512)))


if __name__ == "__main__":
    virtio()
    hypercall()
