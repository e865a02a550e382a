"""Importers for the public benchmark layouts: find problems on disk, turn each into a definition.

Parsing here only reads files and walks Python syntax trees; nothing found on disk is executed
in this process (references run in the sandboxed child, apps/operators/sandbox.py).
"""
