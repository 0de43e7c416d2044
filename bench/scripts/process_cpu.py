#!/usr/bin/env python3
"""The machine's busy share and the CPU of each process (all PostgreSQL processes summed as
`postgres`) over one window, from /proc/stat and /proc/PID/stat. Run it repeatedly while a
benchmark child runs to see who spends the CPU in each segment (BENCHMARKS.md, "What bounds
the PostgreSQL flows and refreshes"):

    for i in $(seq 1 14); do python3 bench/scripts/process_cpu.py 0.6; done
"""
import os
import sys
import time


def processes():
    ticks = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            stat = open(f'/proc/{pid}/stat').read()
        except OSError:
            continue
        comm = stat[stat.index('(') + 1:stat.rindex(')')]
        fields = stat[stat.rindex(')') + 2:].split()
        # utime and stime: fields 14 and 15 of the file, 11 and 12 after the command.
        ticks[pid] = (comm, int(fields[11]) + int(fields[12]))
    return ticks


def machine():
    v = list(map(int, open('/proc/stat').readline().split()[1:]))
    busy = v[0] + v[1] + v[2] + v[5] + v[6]
    return busy, busy + v[3] + v[4] + v[7]


def main():
    window = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    before, m0 = processes(), machine()
    time.sleep(window)
    after, m1 = processes(), machine()
    total = max(1, m1[1] - m0[1])
    by_name = {}
    for pid, (comm, t) in after.items():
        name = 'postgres' if comm.startswith('postgres') else comm
        by_name[name] = by_name.get(name, 0) + t - before.get(pid, (comm, 0))[1]
    line = [f'machine busy {100 * (m1[0] - m0[0]) / total:.0f}%']
    for name, t in sorted(by_name.items(), key=lambda x: -x[1])[:4]:
        line.append(f'{name} {100 * t / total:.0f}%')
    print(' | '.join(line))


if __name__ == '__main__':
    main()
