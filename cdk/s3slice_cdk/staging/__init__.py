"""The function's code asset, staged with bytecode for the runtime's Python.

Standard library only (no ``aws_cdk``): the construct library stages the asset at synth
with it (``s3slice_cdk.code_asset``), and the repository's layer build compiles the layer
with the same compiler (``layers/layerbuild`` imports :mod:`.bytecode`), so the function's
code and its layer are compiled by one interpreter, one ``compileall`` call.

- :mod:`.bytecode`: finding a CPython of the runtime's version, compiling a tree into
  unchecked-hash bytecode, checking what was compiled.
- :mod:`.code_asset`: the staged copy of the function's code, by content.
"""
