"""Byte-addressed memory with per-byte initialised bits, and the address map of the machine.

State spaces and their addresses:
  global  each buffer argument is a `Region` at GLOBAL_BASE + i * GLOBAL_STRIDE (4 GiB apart,
          so an overrun never lands in a neighbour). Global addresses are also generic addresses
          (cvta.to.global / cvta.global are the identity).
  shared  one `Region` per block; shared-space addresses start at 0 (static variables first, in
          declaration order with their alignment, then the `extern .shared` array(s), all at the
          same address, sized by dynamic_shared_bytes). Generic window: SHARED_WINDOW + addr.
  local   one `Region` per thread (the `__local_depot` and other .local variables laid out from
          0). Generic window: LOCAL_WINDOW + addr.
  param   the kernel parameters, laid out in .param order with natural alignment (ld.param only).
Any access outside a region, or not aligned to its size, raises OutOfBounds naming the space,
the address and the instruction line. A load (a whole vector for ld.v2/.v4) of which no byte has
ever been written gives poison (`written` is False; the machine's undefined values), an atomic on
such bytes raises UninitializedRead (`load`); never-written bytes inside a partly written access
read as 0 (nvcc copies structs with vector loads that include padding nobody wrote).
"""
from __future__ import annotations

from gpu_layers.errors import OutOfBounds, UninitializedRead

GLOBAL_BASE = 0x0000_0010_0000_0000
GLOBAL_STRIDE = 0x1_0000_0000
SHARED_WINDOW = 0x0000_7000_0000_0000
LOCAL_WINDOW = 0x0000_7100_0000_0000
WINDOW_SIZE = 0x1_0000_0000

M64 = (1 << 64) - 1
_ONES = {n: b"\x01" * n for n in (1, 2, 4, 8, 16)}


class Region:
    """A contiguous byte range with initialised bits."""

    __slots__ = ("name", "base", "data", "init", "size", "full")

    def __init__(self, name: str, base: int, size: int, data: bytes | None = None):
        self.name = name
        self.base = base
        self.size = size
        if data is None:
            self.data = bytearray(size)
            self.init = bytearray(size)              # 0: never written
            self.full = False
        else:
            self.data = bytearray(data)
            self.init = bytearray(b"\x01" * size)
            self.full = True                         # every byte initialised (stays so)

    def check(self, addr: int, n: int, what: str) -> int:
        off = addr - self.base
        if off < 0 or off + n > self.size:
            raise OutOfBounds(f"{n}-byte {what} at address {addr:#x} is outside {self.name} "
                              f"[{self.base:#x}, {self.base + self.size:#x})")
        if addr % n:
            raise OutOfBounds(f"misaligned {n}-byte {what} at address {addr:#x} in {self.name}")
        return off

    def load(self, addr: int, n: int, check_init: bool = True) -> int:
        """n bytes at addr, little-endian. Raises UninitializedRead when none of them was ever
        written; never-written bytes of a partly written access read as 0 (struct padding)."""
        off = addr - self.base
        if off < 0 or off + n > self.size or addr % n:
            self.check(addr, n, "load")
        if check_init and not self.full:
            self.check_init(addr, n)
        return int.from_bytes(self.data[off:off + n], "little")

    def written(self, addr: int, n: int) -> bool:
        """Whether any of the n bytes at addr was ever written (else a load gives poison)."""
        off = addr - self.base
        return self.full or 1 in self.init[off:off + n]

    def check_init(self, addr: int, n: int):
        if not self.written(addr, n):
            raise UninitializedRead(f"{n}-byte load from {self.name} at address {addr:#x} reads "
                                    f"bytes nothing has written")

    def store(self, addr: int, n: int, value: int):
        off = addr - self.base
        if off < 0 or off + n > self.size or addr % n:
            self.check(addr, n, "store")
        self.data[off:off + n] = value.to_bytes(n, "little")
        self.init[off:off + n] = _ONES[n]


class GlobalMemory:
    """All global buffers of one launch."""

    def __init__(self):
        self.regions: list[Region] = []

    def add(self, name: str, data: bytes, offset: int = 0) -> int:
        """Buffer number len(regions) at GLOBAL_BASE + k * GLOBAL_STRIDE + offset (a machine that
        packs the buffers into one small memory places them with offsets: gpu_layers.machine.memory_map)."""
        base = GLOBAL_BASE + len(self.regions) * GLOBAL_STRIDE + offset
        self.regions.append(Region(f"global buffer '{name}'", base, len(data), data))
        return base

    def region(self, addr: int) -> Region:
        i = (addr - GLOBAL_BASE) >> 32
        if addr < GLOBAL_BASE or i >= len(self.regions):
            raise OutOfBounds(f"global address {addr:#x} is not inside any buffer")
        return self.regions[i]
