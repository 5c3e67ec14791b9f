#!/usr/bin/env python3
"""Writes the seed corpora test/fuzz/corpus/TARGET/ (committed; rerun after changing a layout).

Each seed is one input in the layout its target's header comment describes: valid values from
rules §0-§5 and the sample site, Slurm sacct AllocTRES strings, and edge cases.
"""
import hashlib
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    directory = os.path.join(ROOT, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


TRES_TEXT = {
    "sacct_alloctres": "billing=4,cpu=4,gres/gpu=1,mem=16G,node=1",
    "spec_unsorted": "cpu=4,mem=16G,gres/gpu=1,node=1,billing=4",
    "bundle_cedar": "cpu=1,mem=4G",
    "bundle_niagara": "cpu=1,mem=4800M",
    "bundle_p100": "gres/gpu=1,cpu=6,mem=32000M",
    "bundle_power4": "cpu=32,mem=64G",
    "sacct_typed_gres": "billing=48,cpu=48,energy=123456,gres/gpu:a100=4,mem=187.50G,node=1",
    "families": "bb/cray=1T,fs/disk=100G,ic/ofed=1,license/matlab@flex=2,pages=10,vmem=8G",
    "units": "mem=1P,vmem=1.5T,fs/lustre=512K,bb/x=3M",
    "fraction": "cpu=0.25,mem=0.5K",
    "largest": "mem=9007199254740992,cpu=9007199254740992",
    "too_large": "cpu=9007199254740993",
    "too_large_unit": "mem=9007199254740992K",
    "zero": "cpu=0,mem=0G",
    "blank": "  ",
    "spaces": " cpu=1 ",
    "nan": "cpu=NaN",
    "inf": "mem=-Infinity",
    "negative": "cpu=-1",
    "exponent": "cpu=1e3",
    "duplicate": "cpu=1,cpu=2",
    "duplicate_zero": "cpu=0,cpu=2",
    "empty_key": "=1",
    "empty_value": "cpu=",
    "empty_component": "cpu=1,,mem=2",
    "trailing_comma": "cpu=1,",
    "unknown_unit": "mem=1Q",
    "unit_on_count": "cpu=1.5G",
    "bad_gres": "gres/gpu:=1",
    "unknown_key": "gpu=1",
    "long_key": "license/" + "x" * 120 + "=1",
    "too_long_key": "license/" + "x" * 130 + "=1",
    "many": ",".join(f"license/l{i}={i + 1}" for i in range(64)),
    "too_many": ",".join(f"license/l{i}={i + 1}" for i in range(65)),
    "two_dots": "cpu=1.2.3",
    "dot_only": "cpu=.",
    "long_digits": "cpu=" + "1" * 40,
    # found by fuzzing: a tiny memory value printed as "mem=0P"
    "regression_tiny_mem": "mem=0." + "0" * 315 + "1",
    "tiny_cpu": "cpu=0." + "0" * 320 + "5",
}


def pack_tres(components):
    """Packed layout: uint16 count, then uint8 key length, key, native double."""
    out = struct.pack("=H", len(components))
    for key, value in sorted(components):
        out += struct.pack("=B", len(key)) + key.encode() + struct.pack("=d", value)
    return out


def binary_records(components):
    out = b""
    for key, value in components:
        out += struct.pack("=B", len(key)) + key.encode() + struct.pack("=d", value)
    return out


def date(year, month, day, kind=1):
    return struct.pack("=BhBB", kind, year, month, day)


def main():
    for name, text in TRES_TEXT.items():
        write("tres_parse_fuzz", name, text)

    packed = {
        "job": [("billing", 4.0), ("cpu", 4.0), ("gres/gpu", 1.0), ("mem", 16384.0), ("node", 1.0)],
        "bundle": [("cpu", 1.0), ("mem", 4096.0)],
        "node24": [("cpu", 24.0), ("node", 1.0)],
        "fractions": [("cpu", 0.1), ("mem", 0.5 / 1024)],
        "largest": [("mem", 2.0 ** 53)],
    }
    for name, components in packed.items():
        write("tres_binary_fuzz", name, binary_records(components))
    write("tres_binary_fuzz", "bad_values",
          binary_records([("cpu", float("nan")), ("mem", -1.0), ("node", float("inf"))]))
    write("tres_binary_fuzz", "bad_keys", binary_records([("gpu", 1.0), ("", 2.0), ("cpu", 1.0), ("cpu", 2.0)]))
    # found by fuzzing: subnormal memory values printed as "0P"
    write("tres_binary_fuzz", "regression_subnormal_mem",
          binary_records([("cpu", 0.1), ("mem", 5e-324), ("vmem", 1e-310), ("fs/x", 2.0 ** -1000)]))

    pairs = [("job", "bundle"), ("job", "node24"), ("fractions", "largest"), ("bundle", "bundle")]
    for a, b in pairs:
        pa, pb = pack_tres(packed[a]), pack_tres(packed[b])
        write("tres_view_fuzz", f"{a}_{b}", struct.pack("=dH", 2.5, len(pa)) + pa + pb)
    empty = pack_tres([])
    write("tres_view_fuzz", "empty", struct.pack("=dH", 0.0, len(empty)) + empty + empty)
    corrupt = struct.pack("=H", 3) + struct.pack("=B", 200) + b"k" * 20
    write("tres_view_fuzz", "corrupt", struct.pack("=dH", 1.0, len(corrupt)) + corrupt + pack_tres(packed["job"]))
    # found by fuzzing: a 200-byte key overflowed Component::key in add/scale
    long_key = struct.pack("=HB", 1, 200) + b"x" * 200 + struct.pack("=d", 1.0)
    write("tres_view_fuzz", "regression_long_key", struct.pack("=dH", 2.0, len(long_key)) + long_key + long_key)

    for name, text in {
        "data_node": "cpu=12|cpu=1|cpu=16|1|0.08333333333333333",
        "xc30_exclusive": "cpu=1,node=1|cpu=1|cpu=24|1|0.08333333333333333",
        "smp_exclusive": "cpu=8|cpu=1|cpu=32|1|0.125",
        "cc_cores": "cpu=2,mem=5G|cpu=1,mem=4G||1|1",
        "cc_gpus": "cpu=6,gres/gpu=2,mem=32G|gres/gpu=1,cpu=6,mem=32G||1|1",
        "cc_memory": "cpu=6,gres/gpu=1,mem=48G|gres/gpu=1,cpu=6,mem=32G||2.5|1",
        "empty_bundle": "cpu=1|||1|1",
        "bad_hours": "cpu=1|cpu=1||nan|-1",
        "regression_huge": "cpu=9007199254740992|cpu=0.5|cpu=0.5|1e300|1e300",
        "regression_tiny_bundle": "cpu=9007199254740992|cpu=0." + "0" * 300 + "1|cpu=0." + "0" * 300 + "1|1|1",
    }.items():
        write("charge_fuzz", name, text)

    for word in ["half_month", "day", "deposit", "charge", "transfer", "refund", "Day", "half_month ", "",
                 "x" * 100]:
        write("keywords_fuzz", hashlib.sha1(word.encode()).hexdigest()[:12], word)

    for name, (conv, dates, amount, consumption, sums) in {
        "genci_year": (0, [(2012, 1, 1), (2012, 12, 31), (2012, 3, 15)], 100000.0, 20000.0, [1.0, 2.0]),
        "genci_retraction": (0, [(2012, 3, 15), (2012, 12, 31), (2012, 6, 1)], -100000.0, 0.0, [1e16, 1.0, -1e16]),
        "november": (0, [(2012, 11, 15), (2012, 12, 31), (2012, 12, 1)], 50000.0, 0.0, []),
        "day_convention": (1, [(2000, 2, 29), (2000, 3, 1), (2000, 2, 29)], 1.0, 0.0, []),
        "edges": (1, [(1400, 1, 1), (9999, 12, 31), (9999, 12, 31)], 1e300, 1e300, [1e308, 1e308]),
    }.items():
        data = struct.pack("=B", conv) + b"".join(date(*d) for d in dates)
        data += struct.pack("=dd", amount, consumption) + b"".join(struct.pack("=d", x) for x in sums)
        write("theoretical_fuzz", name, data)
    write("theoretical_fuzz", "special", struct.pack("=B", 0) + date(0, 0, 0, 0) + date(0, 0, 0, 8) + date(2012, 2, 30))

    # window_quota::State: rows, at, at_set, first_month, last_month, A[3], C[3], total A, total C
    def wq_state(rows, at, first, last, a, c, ta, tc):
        return struct.pack("=qiiii3d3ddd", rows, at, 1 if rows else 0, first, last, *a, *c, ta, tc)

    empty_wq = b"\0" * 88
    m = 2012 * 12 + 2  # March 2012
    s1 = wq_state(3, m, m - 2, m, [1000, 1000, 0], [200, 1500, 0], 3000, 1700)
    s2 = wq_state(2, m, m + 1, m + 3, [0, 0, 1000], [0, 0, 0], 2000, 0)
    rows = b"".join(struct.pack("=bdd", off, a, c) for off, a, c in
                    [(-2, 1000, 0), (-1, 1000, 1200), (0, 1000, 500), (1, 1000, 0), (7, 1000, 9000)])
    write("window_quota_state_fuzz", "rwth", s1 + s2 + struct.pack("=i", m) + rows)
    write("window_quota_state_fuzz", "empty", empty_wq + s1 + struct.pack("=i", m))
    # found by fuzzing: merged row counts overflowed
    big = wq_state(2 ** 62, m, m, m, [0, 0, 0], [0, 0, 0], 0, 0)
    write("window_quota_state_fuzz", "regression_rows", big + big + struct.pack("=i", m))
    write("window_quota_state_fuzz", "bad_rows",
          empty_wq + empty_wq + struct.pack("=i", m) + struct.pack("=bdd", 0, -1, float("nan")))

    # bank::State: rows, at_quarter, at_set, then deposits, charges, transfers, refunds in
    # micro-units; rows of [kind][entry month - at][micro-units]
    def bank_state(rows, quarter, sums):
        return struct.pack("=qii4q", rows, quarter, 1 if rows else 0, *sums)

    q = 2013 * 4 + 1
    b1 = bank_state(4, q, [10000 * 10 ** 6, 2500 * 10 ** 6, -500 * 10 ** 6, 100 * 10 ** 6])
    b2 = bank_state(1, q, [0, 300 * 10 ** 6, 0, 0])
    brows = b"".join(struct.pack("=Bbq", k, off, x) for k, off, x in
                     [(0, 0, 10000 * 10 ** 6), (1, 1, 2500500000), (2, -1, -500 * 10 ** 6), (3, 2, 100 * 10 ** 6),
                      (1, 3, 99 * 10 ** 6), (1, 0, 1)])
    write("bank_state_fuzz", "hlrn", b1 + b2 + struct.pack("=i", (2013 * 12 + 3)) + brows)
    write("bank_state_fuzz", "empty", b"\0" * 96 + struct.pack("=i", 0))
    # found by fuzzing (float states, kept in the new layout): merged row counts overflowed;
    # huge amounts overflowed; quarter_of_month overflowed near INT_MIN
    bbig = bank_state(2 ** 62, q, [1, 0, 0, 0])
    write("bank_state_fuzz", "regression_rows", bbig + bbig + struct.pack("=i", 0))
    huge = b"".join(struct.pack("=Bbq", k, 0, x) for k, x in
                    [(0, 2 ** 62), (0, 2 ** 62), (3, 2 ** 63 - 1), (1, -2 ** 63), (0, 2 ** 62)])
    write("bank_state_fuzz", "regression_huge", b"\0" * 96 + struct.pack("=i", 2013 * 12) + huge)
    # found by fuzzing: finish refused a balance that fits when a partial sum did not
    bpartial = bank_state(3, q, [2 ** 63 - 1, 1, 1, 0])
    write("bank_state_fuzz", "regression_partial_sum", bpartial + bank_state(0, 0, [0, 0, 0, 0]) + struct.pack("=i", 0))
    write("bank_state_fuzz", "regression_int_min",
          b"\0" * 96 + struct.pack("=i", -2 ** 31) + struct.pack("=Bbq", 0, 1, 1))

    # theoretical::State: sum, compensation, at (days from 2000-01-01), 1 + convention; rows
    # of [at - row's at][convention][summand]
    t_at = 8766  # 2024-01-01
    t1 = struct.pack("=ddii", 100.0, 0.0, t_at, 1)
    t2 = struct.pack("=ddii", 50.0, 0.0, t_at, 1)
    trows = b"".join(struct.pack("=bBd", d, c, x) for d, c, x in [(0, 0, 10.0), (0, 0, 2.5), (1, 0, 1.0), (0, 1, 1.0)])
    write("theoretical_state_fuzz", "two_states", t1 + t2 + struct.pack("=i", t_at) + trows)
    write("theoretical_state_fuzz", "empty", b"\0" * 52)

    usecs_day = 86400 * 10 ** 6
    at = 1_700_000_000 * 10 ** 6
    h1 = struct.pack("=qqqqdd", 2, 2, at, 14 * usecs_day, 150.0, 0.0)
    h2 = struct.pack("=qqqqdd", 1, 0, at, 14 * usecs_day, 0.0, 0.0)
    hrows = b"".join(struct.pack("=qd", age, x) for age, x in
                     [(0, 100.0), (14 * usecs_day, 100.0), (-1, 5.0), (2 ** 62, 1.0)])
    write("fairshare_state_fuzz", "half_life",
          b"\0" + h1 + h2 + struct.pack("=qq", at, 14 * usecs_day) + hrows + struct.pack("=dd", 0.5, 0.25))
    # found by fuzzing: merged row counts overflowed; a negative usage passed validate
    hbig = struct.pack("=qqqqdd", 2 ** 62, 2 ** 62, at, usecs_day, 1.0, 0.0)
    hneg = struct.pack("=qqqqdd", 1, 1, at, usecs_day, 8.39911597930119e-309, -3.189956675896514e-248)
    write("fairshare_state_fuzz", "regression_rows", b"\0" + hbig + hbig + struct.pack("=qq", at, usecs_day))
    write("fairshare_state_fuzz", "regression_negative", b"\0" + hneg + h1 + struct.pack("=qq", at, usecs_day))
    i1 = struct.pack("=qqqqdiidd", 3, 2, at, 7 * usecs_day, 0.5, 4, 0, 175.0, 0.0)
    irows = b"".join(struct.pack("=qd", age, x) for age, x in
                     [(0, 100.0), (7 * usecs_day, 100.0), (28 * usecs_day, 1.0), (-5, 1.0)])
    write("fairshare_state_fuzz", "interval",
          b"\1" + i1 + b"\0" * 64 + struct.pack("=qqdi", at, 7 * usecs_day, 0.5, 4) + irows
          + struct.pack("=dd", 1.0, 0.0))

    # mail_fuzz: an options byte (column, 64: a display name), then a name or a body
    write("mail_fuzz", "short_body", b"\x09" + "Grüße,\n.a dot first\n".encode())
    write("mail_fuzz", "hostile_body", b"\x09" + ("x" * 1200 + "\n.\ntrailing  \nlone\rCR\nCRLF\r\nFrom here\n= =?x?=").encode())
    write("mail_fuzz", "utf8_name", b"\x44" + ("Zoë Łukasiewicz-Ünal \U0001D11E " * 4).encode())
    write("mail_fuzz", "invalid_utf8", b"\x09" + b"\xc3\x28 \xf0\x9d\x84 \xed\xa0\x80 \xff\n")


if __name__ == "__main__":
    main()
