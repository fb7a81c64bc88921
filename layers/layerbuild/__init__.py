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

The bytecode compiler is the construct library's (``cdk/s3slice_cdk/staging``, standard
library only), which stages the function's code asset with it at synth: ``layers/build.py``
puts ``cdk/`` on ``sys.path`` for it.

One job per module; the modules import each other without cycles, and this file imports
none of them.
"""
