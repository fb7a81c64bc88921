"""ELF files: a small reader for their headers, dynamic section and dynamic symbols; the
removal of ``DT_NEEDED`` entries; and the check that every shared library and every
symbol a file in the layer needs is in the layer or in the runtime."""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Callable, Collection
from pathlib import Path

from .errors import BuildError
from .files import iter_files
from .target import Target

_ELF_MACHINES: dict[int, str] = {183: "aarch64", 62: "x86_64"}

#: Shared libraries the Lambda runtime's base system provides (the manylinux policy's
#: list, less the graphical ones). Anything else an ELF file in the layer needs must be
#: in the layer itself.
SYSTEM_LIBS: frozenset[str] = frozenset({
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
    "libgcc_s.so.1", "libstdc++.so.6", "libutil.so.1", "libresolv.so.2", "libnsl.so.1",
    "libcrypt.so.1", "ld-linux-aarch64.so.1", "ld-linux-x86-64.so.2",
})
#: Undefined symbols the interpreter itself defines (the C API), not a library.
PYTHON_API_PREFIXES = ("Py", "_Py")

_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_SONAME = 0, 1, 5, 10, 14
_DT_RPATH, _DT_RUNPATH = 15, 29
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
_SHT_GNU_VERNEED, _SHT_GNU_VERSYM = 0x6FFFFFFE, 0x6FFFFFFF
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10


@dataclasses.dataclass(frozen=True)
class ElfInfo:
    """What matters about an ELF file here: its machine and dynamic linking."""

    machine: str
    soname: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    has_symtab: bool
    has_debug_info: bool


@dataclasses.dataclass(frozen=True)
class DynamicSymbols:
    """A file's dynamic symbol table, as the loader uses it."""

    #: Defined here and visible to others (global, weak or unique binding).
    exported: frozenset[str]
    #: Needed from another object, not weak, and without a symbol version: the loader
    #: takes them from whichever object of the lookup scope defines them.
    undefined: frozenset[str]
    #: The files the versioned undefined symbols must come from (``.gnu.version_r``).
    version_files: frozenset[str]


@dataclasses.dataclass(frozen=True)
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


@dataclasses.dataclass(frozen=True)
class _Parsed:
    e_machine: int
    dynamic_offset: int | None  #: where PT_DYNAMIC is in the file
    dynamic: tuple[tuple[int, int], ...]  #: its (tag, value) entries before DT_NULL
    strings: bytes  #: the dynamic string table
    sections: tuple[_Section, ...]

    def string(self, at: int) -> str:
        return _cstr(self.strings, at)

    def values(self, tag: int) -> list[int]:
        return [v for t, v in self.dynamic if t == tag]


def _cstr(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode()


def _parse(path: Path) -> _Parsed:
    """Headers, dynamic section and section table of a 64-bit little-endian ELF file.

    A few dozen lines instead of ``readelf``, so that checks behave the same for every
    architecture on every build machine.
    """
    with path.open("rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise BuildError(f"{path}: not a 64-bit little-endian ELF file")
        (e_machine,) = struct.unpack_from("<H", head, 18)
        e_phoff, e_shoff = struct.unpack_from("<QQ", head, 32)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", head, 54)

        def read_at(offset: int, size: int) -> bytes:
            f.seek(offset)
            data = f.read(size)
            if len(data) != size:
                raise BuildError(f"{path}: truncated ELF file")
            return data

        loads: list[tuple[int, int, int]] = []
        dynamic_at: tuple[int, int] | None = None
        ph = read_at(e_phoff, phentsize * phnum)
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", ph, i * phentsize)
            if p_type == 1:  # PT_LOAD
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == 2:  # PT_DYNAMIC
                dynamic_at = (p_offset, p_filesz)

        def file_offset(vaddr: int) -> int:
            for start, offset, size in loads:
                if start <= vaddr < start + size:
                    return vaddr - start + offset
            raise BuildError(f"{path}: address {vaddr:#x} is in no loaded segment")

        dynamic: list[tuple[int, int]] = []
        if dynamic_at is not None:
            raw = read_at(*dynamic_at)
            for tag, value in struct.iter_unpack("<qQ", raw[:len(raw) // 16 * 16]):
                if tag == _DT_NULL:
                    break
                dynamic.append((tag, value))
        tags = dict(dynamic)
        strings = (read_at(file_offset(tags[_DT_STRTAB]), tags[_DT_STRSZ])
                   if tags.get(_DT_STRSZ) else b"")

        sections: list[_Section] = []
        if e_shoff and shnum:
            sh = read_at(e_shoff, shentsize * shnum)
            headers = [struct.unpack_from("<IIQQQQIIQQ", sh, i * shentsize) for i in range(shnum)]
            names = read_at(headers[shstrndx][4], headers[shstrndx][5])
            sections = [_Section(_cstr(names, h[0]), h[1], h[4], h[5], h[6], h[7], h[9])
                        for h in headers]
    return _Parsed(e_machine, None if dynamic_at is None else dynamic_at[0], tuple(dynamic),
                   strings, tuple(sections))


def read_elf(path: Path) -> ElfInfo:
    """The machine, dynamic linking and symbol/debug sections of an ELF file."""
    elf = _parse(path)
    sonames = elf.values(_DT_SONAME)
    return ElfInfo(
        machine=_ELF_MACHINES.get(elf.e_machine, f"e_machine={elf.e_machine}"),
        soname=elf.string(sonames[0]) if sonames else None,
        needed=tuple(elf.string(a) for a in elf.values(_DT_NEEDED)),
        runpath=tuple(p for t in (_DT_RPATH, _DT_RUNPATH) for a in elf.values(t)
                      for p in elf.string(a).split(":") if p),
        has_symtab=any(s.type == _SHT_SYMTAB for s in elf.sections),
        has_debug_info=any(s.name.startswith((".debug", ".zdebug")) for s in elf.sections),
    )


def dynamic_symbols(path: Path) -> DynamicSymbols:
    """The symbols ``path`` exports and needs (``.dynsym``, ``.gnu.version``,
    ``.gnu.version_r``)."""
    elf = _parse(path)
    by_type = {s.type: s for s in elf.sections}
    dynsym = by_type.get(_SHT_DYNSYM)
    if dynsym is None:
        return DynamicSymbols(frozenset(), frozenset(), frozenset())
    with path.open("rb") as f:
        def read(section: _Section) -> bytes:
            f.seek(section.offset)
            return f.read(section.size)

        names = read(elf.sections[dynsym.link])
        table = read(dynsym)
        versym = by_type.get(_SHT_GNU_VERSYM)
        versions = (struct.unpack(f"<{versym.size // 2}H", read(versym))
                    if versym is not None else ())
        verneed = by_type.get(_SHT_GNU_VERNEED)
        files: set[str] = set()
        if verneed is not None:
            need, need_names = read(verneed), read(elf.sections[verneed.link])
            at = 0
            for _ in range(verneed.info):  # Elf64_Verneed entries
                _, _, vn_file, _, vn_next = struct.unpack_from("<HHIII", need, at)
                files.add(_cstr(need_names, vn_file))
                if not vn_next:
                    break
                at += vn_next
    exported: set[str] = set()
    undefined: set[str] = set()
    for i, (st_name, st_info, _, st_shndx, _, _) in enumerate(
            struct.iter_unpack("<IBBHQQ", table[:len(table) // 24 * 24])):
        bind = st_info >> 4
        if i == 0 or bind not in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE):
            continue
        name = _cstr(names, st_name)
        if st_shndx != 0:
            exported.add(name)
        elif bind != _STB_WEAK and (i >= len(versions) or versions[i] & 0x7FFF <= 1):
            undefined.add(name)
    return DynamicSymbols(frozenset(exported), frozenset(undefined), frozenset(files))


def drop_needed(path: Path, names: Collection[str]) -> tuple[str, ...]:
    """Remove the ``DT_NEEDED`` entries naming ``names`` from ``path``'s dynamic section,
    in place, as ``patchelf --remove-needed`` does: the other entries move up and
    ``DT_NULL`` entries fill the end. Returns the names removed."""
    elf = _parse(path)
    if elf.dynamic_offset is None:
        return ()
    kept = [(t, v) for t, v in elf.dynamic if t != _DT_NEEDED or elf.string(v) not in names]
    dropped = tuple(elf.string(v) for t, v in elf.dynamic
                    if t == _DT_NEEDED and elf.string(v) in names)
    if dropped:
        data = b"".join(struct.pack("<qQ", t, v) for t, v in kept)
        data += bytes(16 * (len(elf.dynamic) - len(kept)))
        with path.open("r+b") as f:
            f.seek(elf.dynamic_offset)
            f.write(data)
    return dropped


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def elf_files(site: Path) -> list[Path]:
    return [p for p in iter_files(site) if is_elf(p)]


def search_dirs(path: Path, info: ElfInfo) -> list[Path]:
    """Where the loader looks for ``path``'s libraries in the layer: beside it (for the
    layer's own libraries, which all sit beside or at the RUNPATH of what needs them),
    then its RUNPATH."""
    origin = str(path.parent)
    return [path.parent, *(Path(entry.replace("$ORIGIN", origin).replace("${ORIGIN}", origin))
                           for entry in info.runpath)]


def _in_layer(path: Path, info: ElfInfo, lib: str) -> Path | None:
    found = next((d / lib for d in search_dirs(path, info) if (d / lib).is_file()), None)
    return None if found is None else Path(os.path.normpath(found))


def _scope(path: Path, info_of: Callable[[Path], ElfInfo]) -> list[Path]:
    """The layer's libraries in ``path``'s lookup scope: its ``DT_NEEDED`` closure."""
    seen: list[Path] = []
    todo = [path]
    while todo:
        current = todo.pop()
        info = info_of(current)
        for lib in info.needed:
            found = _in_layer(current, info, lib)
            if found is not None and found not in seen:
                seen.append(found)
                todo.append(found)
    return seen


def check_elf_closure(site: Path, target: Target) -> list[str]:
    """Problems with the ELF files in ``site``: wrong machine; a needed library neither in
    the layer (where its RUNPATH points) nor in the runtime's base system; a symbol version
    required from a library that is not needed; an undefined symbol that no library in the
    file's lookup scope in the layer defines (other than Python's C API)."""
    problems: list[str] = []
    files = elf_files(site)
    infos: dict[Path, ElfInfo] = {}
    symbols: dict[Path, DynamicSymbols] = {}

    def info_of(p: Path) -> ElfInfo:
        if p not in infos:
            infos[p] = read_elf(p)
        return infos[p]

    def syms(p: Path) -> DynamicSymbols:
        if p not in symbols:
            symbols[p] = dynamic_symbols(p)
        return symbols[p]

    for path in files:
        rel = path.relative_to(site).as_posix()
        info = info_of(path)
        if info.machine != target.machine:
            problems.append(f"{rel}: built for {info.machine}, not {target.machine}")
        problems.extend(f"{rel}: needs {lib}, which is not in the layer" for lib in info.needed
                        if lib not in SYSTEM_LIBS and _in_layer(path, info, lib) is None)
        own = syms(path)
        problems.extend(f"{rel}: requires symbol versions of {lib}, which it does not need"
                        for lib in sorted(own.version_files - set(info.needed)))
        defined: set[str] = set()
        for lib in _scope(path, info_of):
            defined |= syms(lib).exported
        missing = sorted(s for s in own.undefined - defined
                         if not s.startswith(PYTHON_API_PREFIXES))
        if missing:
            problems.append(f"{rel}: {len(missing)} undefined symbol(s) no library of the "
                            f"layer it loads defines: {', '.join(missing[:5])}")
    return problems

