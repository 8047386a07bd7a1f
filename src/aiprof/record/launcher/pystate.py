"""Read a CPython process's Python stacks from outside it, as py-spy does.

``aiprof record`` samples its job's stacks from its own process: reading the job's
memory (``/proc/<pid>/mem``) takes nothing from the job, not even its GIL, where an
in-process sampler makes the job hand its GIL over at every tick.

Where the interpreter keeps its thread states and frames is not a public interface,
so it is not written here: the job measures it on itself at start
(:func:`calibrate`). It finds each field by the value it must hold (the thread list
head that ``PyInterpreterState_ThreadHead`` returns, ``threading.get_ident()``, the
ids of a code object's name and file...), then walks its own threads' stacks with
those offsets and compares them with ``traceback``'s. Only a layout that passes is
used; otherwise the job samples itself (aiprof.record.job.collectors.python_stacks).

Memory is read with ``pread`` on ``/proc/<pid>/mem``: a read of an address that is
not mapped is an ``OSError``, never a crash, in the reader or in the job. The job is
not paused while it is read, so a stack can change under the walk: every code object
read is checked for its type, and a walk that meets anything else is dropped.
"""

from __future__ import annotations

import os
import struct
import sys
import threading

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

#: Interpreter versions whose layout calibration knows how to find (frames linked by
#: ``previous`` from ``tstate->cframe->current_frame``, code objects with an inline
#: instruction array, compact unicode objects).
SUPPORTED = ((3, 11), (3, 12))

#: Deepest stack walked; a longer chain is taken to be a torn read.
MAX_DEPTH = 2048

_U64 = struct.Struct("<Q")
#: Bytes read at once up to a frame that is not in the block read last: CPython keeps a
#: thread's frames one above the other in its data stack, in chunks of 16 KiB mapped
#: each on its own, so one read holds up to a chunk's frames (a recursion 500 deep: 13
#: reads per sample instead of 510, 0.3 instead of 1.2 ms).
FRAME_BLOCK = 16 << 10
#: Frames of a thread's current stack searched for one of a walk that did not settle
#: (:meth:`StackReader.lasting`).
LASTING_LOOKUP = 16
_PAGE = 4096
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")


class LayoutError(Exception):
    """This interpreter's layout could not be found or did not verify."""


class CodeInfo:
    """What the sampler needs of one code object. A plain class, not a NamedTuple: the
    job imports this module to calibrate, and typing would cost it milliseconds."""

    __slots__ = ("file", "first_line", "linetable", "name", "resumable", "sig")

    def __init__(
        self,
        name: str,
        file: str,
        first_line: int,
        linetable: bytes,
        resumable: bool = False,
        sig: tuple[int, ...] = (),
    ) -> None:
        self.name = name
        """Qualified name."""
        self.file = file
        self.first_line = first_line
        self.linetable = linetable
        self.resumable = resumable
        """A generator's or coroutine's body: never the first frame of a thread."""
        self.sig = sig
        """The code object's name, file and line table pointers and first line: a code
        object freed and another allocated at its address differ here."""


#: co_flags of the code of generators, coroutines and async generators.
CO_RESUMABLE = 0x20 | 0x80 | 0x200


class MemReader:
    """Reads another (or this) process's memory by address."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)

    def read(self, addr: int, size: int) -> bytes | None:
        """``size`` bytes at ``addr``, or None where they cannot be read (unmapped,
        the process gone)."""
        if addr <= 0:
            return None
        try:
            data = os.pread(self._fd, size, addr)
        except (OSError, OverflowError):
            return None
        return data if len(data) == size else None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _u64(b: bytes, off: int) -> int:
    return int(_U64.unpack_from(b, off)[0])


# -- reading -------------------------------------------------------------------------


class StackReader:
    """The stacks of every thread of one process, given its layout (see calibrate)."""

    def __init__(self, mem: MemReader, layout: dict[str, int]) -> None:
        self.mem = mem
        self.lay = layout
        L = layout
        self._ts_size = max(L["ts_next"], L["ts_ident"], L["ts_native"], L["ts_cframe"]) + 8
        self._fr_size = max(L["fr_code"], L["fr_previous"], L["fr_instr"]) + 8
        self._co_size = (
            max(L["co_filename"], L["co_qualname"], L["co_linetable"], L["co_firstlineno"], L["co_flags"]) + 8
        )
        self._codes: dict[int, CodeInfo] = {}
        self.reused = 0
        """How many remembered code addresses were found holding another code object
        (a module's code is freed once it ran, and its memory reused): callers that
        keep anything keyed by code address drop it when this changes."""

    def threads(self) -> list[tuple[int, int, int, int]]:
        """(ident, native id, address of the current frame, address of the thread
        state) of each thread with a Python frame, newest thread first."""
        L, mem = self.lay, self.mem
        head = mem.read(L["interp"] + L["interp_head"], 8)
        if head is None:
            return []
        ts = _u64(head, 0)
        out: list[tuple[int, int, int, int]] = []
        seen: set[int] = set()
        while ts and ts not in seen and len(seen) < 4096:
            seen.add(ts)
            b = mem.read(ts, self._ts_size)
            if b is None:
                break
            frame = self._current_frame(b)
            if frame:
                out.append((_u64(b, L["ts_ident"]), _u64(b, L["ts_native"]), frame, ts))
            ts = _u64(b, L["ts_next"])
        return out

    def current_frame(self, tstate: int) -> int:
        """The current frame of the thread state at ``tstate`` now (0 if none)."""
        b = self.mem.read(tstate, self._ts_size)
        return self._current_frame(b) if b is not None else 0

    def _current_frame(self, tstate: bytes) -> int:
        L = self.lay
        ptr = _u64(tstate, L["ts_cframe"])
        if L["cf_current"] < 0:
            return ptr
        b = self.mem.read(ptr, L["cf_current"] + 8)
        return _u64(b, L["cf_current"]) if b is not None else 0

    def walk(self, frame: int, addrs: list[int] | None = None) -> list[int] | None:
        """``[code, instruction index, code, index, ...]`` from the leaf frame to the
        root, or None if the stack changed under the walk (a frame that is no longer
        one, or a chain that ends in a generator: it was read while it yielded).
        ``addrs``, when given, gets each frame's address, leaf first.

        The frames are read a block at a time (:meth:`_block`), and each distinct code
        object is checked once per walk (one read of it, against what is remembered of
        it), not once per frame: a recursion 500 deep is a few block reads and one code
        read, not 1,000 reads. Within one walk that is kept
        (:meth:`settled_walk`: its leaf still runs) the frames below the leaf did not
        change, and they hold their code objects alive, so a code checked at one frame
        is the same object at every other frame of the walk."""
        L = self.lay
        size, off_code, off_prev, off_instr = self._fr_size, L["fr_code"], L["fr_previous"], L["fr_instr"]
        adaptive = L["co_code"]
        codes = self._codes
        unpack = _U64.unpack_from
        checked: set[int] = set()
        out: list[int] = []
        push = out.append
        depth = 0
        code = 0
        b, lo, hi = b"", 0, 0
        """The block read last: the bytes from address ``lo`` to ``hi``."""
        while frame:
            if not (lo <= frame and frame + size <= hi):
                got = self._block(frame, size)
                if got is None:
                    return None
                b, lo = got
                hi = lo + len(b)
            at = frame - lo
            code = unpack(b, at + off_code)[0]
            if code not in checked:
                info = codes.get(code)
                if info is None or not self._same(code, info):
                    info = self.code(code)
                if info is None:
                    return None
                checked.add(code)
            push(code)
            push((unpack(b, at + off_instr)[0] - code - adaptive) >> 1)  # -1 before the first
            if addrs is not None:
                addrs.append(frame)
            frame = unpack(b, at + off_prev)[0]
            depth += 1
            if depth > MAX_DEPTH:
                return None
        root = codes.get(code) if code else None
        if root is not None and root.resumable:
            return None
        return out

    def _block(self, frame: int, size: int) -> tuple[bytes, int] | None:
        """(bytes, their address) holding the ``size`` bytes of the frame at ``frame``
        and what lies below it (older frames), from as far down as can be read within
        :data:`FRAME_BLOCK`, a page at a time (below a data stack chunk is often an
        unmapped page: such a read fails at once), else the frame alone."""
        end = frame + size
        page = frame & -_PAGE
        below = [page - k * _PAGE for k in range(FRAME_BLOCK // _PAGE - 1, 0, -1) if page > k * _PAGE]
        for start in (*below, page, frame):
            b = self.mem.read(start, end - start)
            if b is not None:
                return b, start
        return None

    def settled_walk(
        self, frame: int, tstate: int, addrs: list[int] | None = None, unsettled: list[list[int]] | None = None
    ) -> list[int] | None:
        """:meth:`walk`, kept only if, once it is done, the thread still runs the same
        leaf frame (same address, same code) and the frames walked are still there
        (:meth:`unchanged`). The frames below a leaf cannot change while it runs; when
        it returned meanwhile, a frame read late may belong to a later call (``leaf``
        seen under ``spin``, which took ``middle``'s place), and the leaf found running
        may be a new call of it. ``addrs`` gets the frames' addresses, and
        ``unsettled`` a walk read whole that did not settle (both for :meth:`lasting`)."""
        if addrs is None:
            addrs = []
        walk = self.walk(frame, addrs)
        if walk is None:
            return None
        if self.current_frame(tstate) == frame and self.unchanged(walk, addrs):
            return walk
        if unsettled is not None:
            unsettled.append(walk)
        return None

    def unchanged(self, walk: list[int], addrs: list[int], start: int = 0) -> bool:
        """Whether the frames a walk read at ``addrs[start:]`` still hold, read again
        now, the code objects it read there, each linked to the next as it was.

        A frame's memory outlives its call: the bytes of a frame that returned stay in
        the data stack until another call takes their place. So a walk read while its
        leaf had returned (and the caller's place was taken by another call) reads a
        chain that never ran (``leaf`` under ``spin``, which called no ``leaf``), and a
        new call of the same leaf at the same address can make the check of the leaf
        pass. Read after that check, the frames must still be the ones walked: a
        chain that never ran would have to run the same calls over again in between."""
        L = self.lay
        size, off_code, off_prev = self._fr_size, L["fr_code"], L["fr_previous"]
        unpack = _U64.unpack_from
        b, lo, hi = b"", 0, 0
        last = len(addrs) - 1
        for i in range(start, last + 1):
            frame = addrs[i]
            if not (lo <= frame and frame + size <= hi):
                got = self._block(frame, size)
                if got is None:
                    return False
                b, lo = got
                hi = lo + len(b)
            at = frame - lo
            if unpack(b, at + off_code)[0] != walk[2 * i]:
                return False
            if unpack(b, at + off_prev)[0] != (addrs[i + 1] if i < last else 0):
                return False
        return True

    def file_of(self, code: int) -> str | None:
        """The file of a code object a walk has just checked (no read), else None."""
        info = self._codes.get(code)
        return info.file if info is not None else None

    def lasting(self, walk: list[int], addrs: list[int], tstate: int) -> int:
        """The index (leaf = 0) of the innermost frame of a walk that did not settle
        (:meth:`walk` of the frames at ``addrs``) that the thread still runs now, at
        the same address, code and instruction; -1 when none is found within
        :data:`LASTING_LOOKUP` frames of the thread's current one.

        Such a frame ran all through the walk, so its callers did too: the walk from it
        to the root is what the thread was doing, only the frames inside it (a tight
        loop's calls, a generator that yields each item) changed while they were read.
        A frame at a walked address that moved on (another instruction, another code)
        is passed: its callers are checked in turn."""
        at = {a: i for i, a in enumerate(addrs)}
        L = self.lay
        off_code, off_prev, off_instr, adaptive = L["fr_code"], L["fr_previous"], L["fr_instr"], L["co_code"]
        frame = self.current_frame(tstate)
        for _ in range(LASTING_LOOKUP):
            if not frame:
                return -1
            b = self.mem.read(frame, self._fr_size)
            if b is None:
                return -1
            i = at.get(frame)
            if i is not None:
                code = _u64(b, off_code)
                if (
                    code == walk[2 * i]
                    and (_u64(b, off_instr) - code - adaptive) >> 1 == walk[2 * i + 1]
                    and self.unchanged(walk, addrs, i)
                ):
                    return i
            frame = _u64(b, off_prev)
        return -1

    def code(self, addr: int) -> CodeInfo | None:
        """The code object at ``addr`` (remembered while it stays the same one), or
        None if it is not one."""
        known = self._codes.get(addr)
        if known is not None and self._same(addr, known):
            return known
        info = self._read_code(addr)
        if info is None:
            self._codes.pop(addr, None)
        else:
            if known is not None and known.sig != info.sig:
                self.reused += 1
            self._codes[addr] = info
        return info

    def _same(self, addr: int, info: CodeInfo) -> bool:
        """Whether the code object at ``addr`` is still the one ``info`` was read from."""
        b = self.mem.read(addr, self._co_size)
        return b is not None and _u64(b, 8) == self.lay["code_type"] and self._sig(b) == info.sig

    def _sig(self, b: bytes) -> tuple[int, ...]:
        L = self.lay
        return (
            _u64(b, L["co_qualname"]),
            _u64(b, L["co_filename"]),
            _u64(b, L["co_linetable"]),
            int(_I32.unpack_from(b, L["co_firstlineno"])[0]),
        )

    def _read_code(self, addr: int) -> CodeInfo | None:
        L = self.lay
        b = self.mem.read(addr, self._co_size)
        if b is None or _u64(b, 8) != L["code_type"]:
            return None
        name = self.string(_u64(b, L["co_qualname"]))
        file = self.string(_u64(b, L["co_filename"]))
        table = self.bytes_at(_u64(b, L["co_linetable"]))
        if name is None or file is None or table is None:
            return None
        first = int(_I32.unpack_from(b, L["co_firstlineno"])[0])
        flags = int(_I32.unpack_from(b, L["co_flags"])[0])
        return CodeInfo(name, file, first, table, bool(flags & CO_RESUMABLE), self._sig(b))

    def string(self, addr: int) -> str | None:
        """A str object's text (compact unicode, as every str in code objects is)."""
        L = self.lay
        head = self.mem.read(addr, L["str_state"] + 4)
        if head is None:
            return None
        n = _u64(head, 16)
        state = int(_U32.unpack_from(head, L["str_state"])[0])
        kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        if not compact or kind not in (1, 2, 4) or n > 1 << 20:
            return None
        data = self.mem.read(addr + (L["str_ascii"] if ascii_ else L["str_compact"]), n * kind)
        if data is None:
            return None
        codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
        return data.decode(codec, "replace")

    def bytes_at(self, addr: int) -> bytes | None:
        """A bytes object's content."""
        head = self.mem.read(addr, 24)
        if head is None:
            return None
        n = _u64(head, 16)
        if n > 1 << 24:
            return None
        return self.mem.read(addr + self.lay["bytes_data"], n) if n else b""


def line_of(info: CodeInfo, index: int) -> int:
    """The line of instruction ``index`` (code units; -1: not started) of a code
    object, from its location table (the format of CPython 3.11 and 3.12,
    Objects/locations.md); 0 where the instruction has no line."""
    if index < 0:
        return info.first_line
    table = info.linetable
    line = info.first_line
    pos = 0
    addr = 0
    n = len(table)
    while pos < n:
        first = table[pos]
        code = (first >> 3) & 15
        end = addr + (first & 7) + 1
        pos += 1
        if code == 15:
            delta, has_line = 0, False
        elif code in (13, 14):
            uval, pos = _varint(table, pos)
            delta, has_line = (-(uval >> 1) if uval & 1 else uval >> 1), True
        elif code >= 10:
            delta, has_line = code - 10, True
        else:
            delta, has_line = 0, True
        line += delta
        if addr <= index < end:
            return line if has_line else 0
        addr = end
        while pos < n and not table[pos] & 0x80:
            pos += 1
    return 0


def _varint(b: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(b):
        # The table ends inside an entry: read from outside while the code object was
        # being freed or replaced (this IndexError once stopped the sampler).
        return 0, pos
    byte = b[pos]
    pos += 1
    val = byte & 63
    shift = 6
    while byte & 64 and pos < len(b):
        byte = b[pos]
        pos += 1
        val |= (byte & 63) << shift
        shift += 6
    return val, pos


# -- calibration (runs in the job) ------------------------------------------------------


def calibrate() -> dict[str, int]:
    """This interpreter's layout, measured on itself and verified; LayoutError if it
    cannot be. Costs a few milliseconds and one short-lived thread."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in SUPPORTED:
        versions = " or ".join(f"{major}.{minor}" for major, minor in SUPPORTED)
        raise LayoutError(f"stacks read from outside need CPython {versions}")
    try:
        import ctypes
    except ImportError as e:
        raise LayoutError(f"ctypes is not importable: {e}") from None
    mem = MemReader(os.getpid())
    ready, release = threading.Event(), threading.Event()
    other: dict[str, Any] = {}

    def park() -> None:
        other["ident"] = threading.get_ident()
        other["native"] = threading.get_native_id()
        other["tstate"] = ctypes.pythonapi.PyThreadState_Get()
        ready.set()
        release.wait(5)

    api = ctypes.pythonapi
    for fn in ("PyInterpreterState_Get", "PyThreadState_Get", "PyInterpreterState_ThreadHead", "PyThreadState_Next"):
        getattr(api, fn).restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
    api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
    t = threading.Thread(target=park, name="aiprof-calibrate", daemon=True)
    t.start()
    try:
        if not ready.wait(5):
            raise LayoutError("the calibration thread did not start")
        return _Probe(mem, api, other, t).outer()
    finally:
        release.set()
        t.join(5)
        mem.close()


class _Probe:
    """Calibration: ``outer`` calls ``inner``, which measures; both frames are then
    suspended at known instructions (their ``f_lasti``)."""

    def __init__(self, mem: MemReader, api: Any, other: dict[str, Any], thread: threading.Thread) -> None:
        self.mem, self.api, self.other, self.thread = mem, api, other, thread

    def outer(self) -> dict[str, int]:
        return self.inner(sys._getframe())

    def inner(self, outer_frame: Any) -> dict[str, int]:
        me = sys._getframe()
        lay = self._measure(me, outer_frame)
        self._verify(lay)
        return lay

    def _read(self, addr: int, size: int) -> bytes:
        b = self.mem.read(addr, size)
        if b is None:
            raise LayoutError(f"cannot read {size} bytes at {addr:#x}")
        return b

    def _find(self, block: bytes, value: int, start: int = 0) -> int:
        for off in range(start, len(block) - 7, 8):
            if _u64(block, off) == value:
                return off
        raise LayoutError(f"value {value:#x} not found")

    def _iframe(self, frame_obj: Any) -> tuple[int, int]:
        """(address of the interpreter frame of ``frame_obj``, offset of its code)."""
        fo = self._read(id(frame_obj), 64)
        code_id = id(frame_obj.f_code)
        for off in range(16, 64, 8):
            ptr = _u64(fo, off)
            block = self.mem.read(ptr, 128) if ptr > 4096 and ptr % 8 == 0 else None
            if block is None:
                continue
            try:
                self._find(block, id(frame_obj))  # the interpreter frame's frame_obj
                return ptr, self._find(block, code_id)
            except LayoutError:
                continue
        raise LayoutError("interpreter frame not found")

    def _measure(self, me: Any, outer_frame: Any) -> dict[str, int]:
        api, other = self.api, self.other
        lay: dict[str, int] = {}
        interp = api.PyInterpreterState_Get()
        head = api.PyInterpreterState_ThreadHead(interp)
        mine = api.PyThreadState_Get()
        theirs = other["tstate"]
        lay["interp"] = interp
        lay["interp_head"] = self._find(self._read(interp, 1024), head)
        nxt = api.PyThreadState_Next(head)
        if not nxt:
            raise LayoutError("only one thread state")
        lay["ts_next"] = self._find(self._read(head, 128), nxt)
        ts_mine, ts_theirs = self._read(mine, 1024), self._read(theirs, 1024)
        for key, a, b in (
            ("ts_ident", threading.get_ident(), other["ident"]),
            ("ts_native", threading.get_native_id(), other["native"]),
        ):
            lay[key] = next((o for o in range(0, 1024, 8) if _u64(ts_mine, o) == a and _u64(ts_theirs, o) == b), -1)
            if lay[key] < 0:
                raise LayoutError(f"{key} not found")
        # Frames: this one (running) and the outer one (suspended at its call).
        here, fr_code = self._iframe(me)
        there, fr_code2 = self._iframe(outer_frame)
        if fr_code != fr_code2:
            raise LayoutError("frames disagree on the code offset")
        lay["fr_code"] = fr_code
        lay["fr_previous"] = self._find(self._read(here, 128), there)
        # The thread state's way to its current frame (this one, during the reads):
        # through a pointer to a struct holding it (3.11, 3.12), or directly.
        lay["ts_cframe"], lay["cf_current"] = self._current_path(ts_mine, here, lay["fr_previous"])
        # The instruction pointer: the slot where (pointer - code - f_lasti) is the
        # same constant for two suspended frames (the inline instruction array).
        caller = outer_frame.f_back
        if caller is None:
            raise LayoutError("calibration needs a caller frame")
        up, _ = self._iframe(caller)
        blk_a, blk_b = self._read(there, 128), self._read(up, 128)
        code_a, code_b = id(outer_frame.f_code), id(caller.f_code)
        for off in range(0, 128 - 7, 8):
            da = _u64(blk_a, off) - code_a - outer_frame.f_lasti
            db = _u64(blk_b, off) - code_b - caller.f_lasti
            if da == db and 0 < da < 1024:
                lay["fr_instr"], lay["co_code"] = off, da
                break
        else:
            raise LayoutError("instruction pointer not found")
        self._measure_code(lay, me.f_code, outer_frame.f_code)
        self._measure_objects(lay)
        return lay

    def _current_path(self, tstate: bytes, frame: int, previous: int) -> tuple[int, int]:
        """Offsets from the thread state to its current frame: that frame is the one
        doing the read, a few calls below ``frame``, so a candidate is accepted when
        its ``previous`` links reach ``frame``."""

        def leads_to_frame(ptr: int) -> bool:
            for _ in range(8):
                if ptr == frame:
                    return True
                b = self.mem.read(ptr, previous + 8) if ptr > 4096 and ptr % 8 == 0 else None
                if b is None:
                    return False
                ptr = _u64(b, previous)
            return False

        for off in range(0, len(tstate) - 7, 8):
            ptr = _u64(tstate, off)
            if ptr <= 4096 or ptr % 8:
                continue
            if leads_to_frame(ptr):
                return off, -1
            block = self.mem.read(ptr, 32)
            if block is not None:
                for k in range(0, 32, 8):
                    if leads_to_frame(_u64(block, k)):
                        return off, k
        raise LayoutError("current frame not found from the thread state")

    def _measure_code(self, lay: dict[str, int], a: Any, b: Any) -> None:
        lay["code_type"] = id(type(a))
        blk_a, blk_b = self._read(id(a), 256), self._read(id(b), 256)
        gen = _resumable.__code__
        blk_g = self._read(id(gen), 256)
        for off in range(16, 256 - 3, 4):
            if (
                _I32.unpack_from(blk_a, off)[0] == a.co_flags
                and _I32.unpack_from(blk_g, off)[0] == gen.co_flags
                and a.co_flags != gen.co_flags
            ):
                lay["co_flags"] = off
                break
        else:
            raise LayoutError("co_flags not found")
        for key, attr in (
            ("co_filename", "co_filename"),
            ("co_qualname", "co_qualname"),
            ("co_linetable", "co_linetable"),
        ):
            off = self._find(blk_a, id(getattr(a, attr)), 16)
            if _u64(blk_b, off) != id(getattr(b, attr)):
                raise LayoutError(f"{key} not found")
            lay[key] = off
        for off in range(16, 256 - 3, 4):
            if (
                _I32.unpack_from(blk_a, off)[0] == a.co_firstlineno
                and _I32.unpack_from(blk_b, off)[0] == b.co_firstlineno
            ):
                lay["co_firstlineno"] = off
                break
        else:
            raise LayoutError("co_firstlineno not found")

    def _measure_objects(self, lay: dict[str, int]) -> None:
        samples = ["aiprof_calibration", "caf\u00e9 cr\u00e8me", "\u0394\u03b9\u03b1", "\U0001f600 smile"]
        lay["str_state"] = 32
        lay["str_ascii"] = sys.getsizeof("") - 1
        lay["str_compact"] = sys.getsizeof("\u00e9") - 2
        lay["bytes_data"] = sys.getsizeof(b"") - 1
        reader = StackReader(self.mem, {**lay, "ts_cframe": 0, "cf_current": -1, "co_flags": 0})
        for s in samples:
            if reader.string(id(s)) != s:
                raise LayoutError("str layout not recognised")
        blob = b"aiprof\x00\xffcalibration"
        if reader.bytes_at(id(blob)) != blob:
            raise LayoutError("bytes layout not recognised")

    def _verify(self, lay: dict[str, int]) -> None:
        """Walk the parked thread's stack with ``lay`` and compare it with its frames'."""
        reader = StackReader(self.mem, lay)
        ident = self.other["ident"]
        frame = sys._current_frames().get(ident)
        found = {t[0]: t for t in reader.threads()}
        if ident not in found or threading.get_ident() not in found or frame is None:
            raise LayoutError("thread list does not match")
        if found[ident][1] != self.other["native"] or reader.current_frame(found[ident][3]) != found[ident][2]:
            raise LayoutError("native thread id does not match")
        walk = reader.walk(found[ident][2])
        if walk is None:
            raise LayoutError("stack walk failed")
        got = []
        for i in range(0, len(walk), 2):
            info = reader.code(walk[i])
            assert info is not None
            got.append((info.file, line_of(info, walk[i + 1]), info.name))
        want = []
        while frame is not None:
            code = frame.f_code
            want.append((code.co_filename, frame.f_lineno or 0, getattr(code, "co_qualname", code.co_name)))
            frame = frame.f_back
        if got != want:
            raise LayoutError(f"stack read from memory differs from the frames': {got[:2]} vs {want[:2]}")


def _resumable() -> Any:
    """A generator function: calibration reads its code's flags."""
    yield None
