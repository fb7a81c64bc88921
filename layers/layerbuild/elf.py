"""ELF files: a small reader for their headers and dynamic section, and the check that
every shared library a file in the layer needs is in the layer or in the runtime."""

from __future__ import annotations

import dataclasses
import struct
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


@dataclasses.dataclass(frozen=True)
class ElfInfo:
    """What matters about an ELF file here: its machine and dynamic linking."""

    machine: str
    soname: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    has_symtab: bool
    has_debug_info: bool


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def read_elf(path: Path) -> ElfInfo:
    """Parse the headers, dynamic section and section names of a 64-bit little-endian ELF.

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
        dynamic: tuple[int, int] | None = None
        ph = read_at(e_phoff, phentsize * phnum)
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", ph, i * phentsize)
            if p_type == 1:  # PT_LOAD
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == 2:  # PT_DYNAMIC
                dynamic = (p_offset, p_filesz)

        def file_offset(vaddr: int) -> int:
            for start, offset, size in loads:
                if start <= vaddr < start + size:
                    return vaddr - start + offset
            raise BuildError(f"{path}: address {vaddr:#x} is in no loaded segment")

        needed_at: list[int] = []
        runpath_at: list[int] = []
        soname_at: int | None = None
        strtab = strsz = 0
        if dynamic is not None:
            raw = read_at(*dynamic)
            for i in range(0, len(raw) - 15, 16):
                tag, value = struct.unpack_from("<qQ", raw, i)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:  # DT_NEEDED
                    needed_at.append(value)
                elif tag == 5:  # DT_STRTAB
                    strtab = value
                elif tag == 10:  # DT_STRSZ
                    strsz = value
                elif tag == 14:  # DT_SONAME
                    soname_at = value
                elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
                    runpath_at.append(value)
        strings = read_at(file_offset(strtab), strsz) if strsz else b""

        def string(at: int) -> str:
            return strings[at:strings.index(b"\0", at)].decode()

        section_names: list[str] = []
        section_types: list[int] = []
        if e_shoff and shnum:
            sh = read_at(e_shoff, shentsize * shnum)
            headers = [struct.unpack_from("<IIQQQQ", sh, i * shentsize) for i in range(shnum)]
            _, _, _, _, names_off, names_size = headers[shstrndx]
            names = read_at(names_off, names_size)
            for sh_name, sh_type, *_ in headers:
                section_names.append(names[sh_name:names.index(b"\0", sh_name)].decode())
                section_types.append(sh_type)

    return ElfInfo(
        machine=_ELF_MACHINES.get(e_machine, f"e_machine={e_machine}"),
        soname=string(soname_at) if soname_at is not None else None,
        needed=tuple(string(a) for a in needed_at),
        runpath=tuple(p for a in runpath_at for p in string(a).split(":") if p),
        has_symtab=2 in section_types,  # SHT_SYMTAB
        has_debug_info=any(n.startswith((".debug", ".zdebug")) for n in section_names),
    )


def elf_files(site: Path) -> list[Path]:
    return [p for p in iter_files(site) if is_elf(p)]


def check_elf_closure(site: Path, target: Target) -> list[str]:
    """Problems with the ELF files in ``site``: wrong machine, or a needed library that is
    neither in the layer (where its RUNPATH points) nor in the runtime's base system."""
    problems: list[str] = []
    for path in elf_files(site):
        rel = path.relative_to(site).as_posix()
        info = read_elf(path)
        if info.machine != target.machine:
            problems.append(f"{rel}: built for {info.machine}, not {target.machine}")
        dirs = [path.parent]
        for entry in info.runpath:
            expanded = entry.replace("$ORIGIN", str(path.parent)).replace(
                "${ORIGIN}", str(path.parent))
            dirs.append(Path(expanded))
        for lib in info.needed:
            if lib in SYSTEM_LIBS:
                continue
            if not any((d / lib).is_file() for d in dirs):
                problems.append(f"{rel}: needs {lib}, which is not in the layer")
    return problems
