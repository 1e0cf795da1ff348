"""The code generator: spec/ (YAML, checked against spec/schema/) -> generated/.

Entry points: ``python -m codegen generate`` (``make generate``) and
``python -m codegen check`` (``make check-generated``). Codegen never writes
outside ``generated/`` (or the temporary folder ``check`` compares against).
"""
