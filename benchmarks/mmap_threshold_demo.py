"""glibc's dynamic mmap threshold, shown: why a process's allocation history changes where tensors come from.

glibc serves a ``malloc`` of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at start) with its own ``mmap``, and
gives it back with ``munmap`` on ``free``. Unless the threshold was set explicitly (``mallopt`` or
``GLIBC_TUNABLES``), freeing an mmapped chunk raises the threshold to that chunk's size, up to
``DEFAULT_MMAP_THRESHOLD_MAX`` (32 MiB on 64-bit): later allocations up to that size come from the heap, with no
page faults (mallopt(3), "M_MMAP_THRESHOLD": "the lower limit for this parameter is 0; the upper limit is
DEFAULT_MMAP_THRESHOLD_MAX ... dynamic adjustment of the mmap threshold" and "Note: Nowadays, glibc uses a dynamic
mmap threshold by default"). So a process that once freed a large block serves the same sizes differently from a
fresh one. ``mallinfo2().hblks`` counts the chunks served by mmap, which shows where each allocation went.

Run: ``python benchmarks/mmap_threshold_demo.py`` (and with ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864``
to see the pinned threshold: everything from the heap, whatever came before).
"""

from __future__ import annotations

import ctypes

MiB = 1 << 20


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def main() -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def where(label: str, size: int) -> None:
        before = libc.mallinfo2().hblks
        ptr = libc.malloc(size)
        mapped = libc.mallinfo2().hblks > before
        libc.free(ptr)
        print(f"{label:<48} -> {'mmap' if mapped else 'heap'}")

    where("4 MiB in a fresh process", 4 * MiB)
    where("4 MiB again (after freeing an mmapped 4 MiB)", 4 * MiB)
    where("8 MiB (above the raised threshold)", 8 * MiB)
    where("6 MiB (after freeing an mmapped 8 MiB)", 6 * MiB)
    libc.free(libc.malloc(40 * MiB))
    where("33 MiB after freeing 40 MiB (cap: 32 MiB)", 33 * MiB)


if __name__ == "__main__":
    main()
