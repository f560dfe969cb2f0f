"""The peak memory of a child Python process, read so that its parent's peak does not count.

`getrusage(RUSAGE_SELF).ru_maxrss` in a child started by `subprocess` carries the parent's peak across
`exec` on Linux: a pytest worker that once held 2 GiB makes every child it starts report at least that.
`VmHWM` belongs to the child's own address space, which `exec` replaces, so it starts from nothing.
"""

# Python source that prints the running process's own peak resident memory, in KiB, as its last line.
PRINT_PEAK_KIB = (
    "print(next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:')))\n"
)
