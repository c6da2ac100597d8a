# SPDX-License-Identifier: Apache-2.0
"""benchrows: the JSON lines the GPU-machine scripts' benchmarks print
(gpu_attention.sh, gpu_multi.sh, gpu_quant_bench.sh), read back for their
tables. The scripts run their heredocs with scripts/lib on PYTHONPATH
(step.sh's bench_table)."""
import json
import sys


def read(paths):
    """Every JSON object of the files, in order; a line that is not JSON,
    and a file that cannot be opened, are passed over."""
    rows = []
    for path in paths:
        try:
            f = open(path)
        except OSError:
            continue
        with f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def load(paths):
    """read's rows, and the same grouped: by[name][impl] = row, and the
    names in the order they first appear."""
    rows = read(paths)
    by, order = {}, []
    for r in rows:
        if r["name"] not in by:
            order.append(r["name"])
        by.setdefault(r["name"], {})[r["impl"]] = r
    return rows, by, order


def read_args():
    """read of the files named on the command line."""
    return read(sys.argv[1:])


def load_args():
    """load of the files named on the command line."""
    return load(sys.argv[1:])


def us(r):
    """A row's GPU time per call ("gpu_us") as "%.1f", or "-" when there is
    no row or no time."""
    return "%.1f" % r["gpu_us"] if r and r.get("gpu_us", 0) > 0 else "-"
