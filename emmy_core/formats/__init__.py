"""The files that travel and the rules for reading and writing any file.

Freezes, tune files, golden records, Kernel Tuner caches, card files and the local card; the strict
reader every input goes through (`inputfile`, `sourcefile`), what a file is (`filekind`), the atomic
writer that replaces only a file of its own kind (`safefile`) and fsspec URL folders (`urlfolder`).
Importing this package imports nothing: each module loads what it needs.
"""
