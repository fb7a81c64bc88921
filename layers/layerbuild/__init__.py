"""Build the s3slice Lambda dependency layer without Docker, trim it, strip it, measure it.

Run it as ``python layers/build.py`` (see ``cli``). Steps: ``pip install --no-deps
--target <out>/python`` of the manylinux wheels pinned in ``layers/requirements.txt`` for
the target architecture, CPython version and the Lambda runtime's glibc (``target``,
``install``); check that the pins are the whole closure (``pins``); remove what the
service never loads, and the ``DT_NEEDED`` entries naming removed libraries (``trim``);
run ``strip --strip-unneeded`` over every ELF file (``strip``); compile every module with
a CPython of the target's version and remove the sources (``bytecode``); check that every
file the service needs is there, nothing trimmed is, every shared library a kept ELF file
needs is in the layer or in the runtime's base system, and every symbol it needs is
defined in its lookup scope (``check``, ``elf``); measure the unzipped size (``report``) and write
``<out>/layer-size.json`` (``pipeline``, ``output``).

``code_asset`` stages the function's code asset with the same bytecode compiler (for the
CDK app at synth, and for the benchmark), sources kept.

One job per module; the modules import each other without cycles, and this file imports
none of them.
"""
