"""Floor 3 of the data system: the files that travel, each turning a file into store rows and back.

Card files (`cardfile`: the shared document of freezes and tune files), tune files (`tunefile`), golden
records (`golden`), Kernel Tuner caches (`kerneltuner`), the freeze (`freeze`: a store's goldens and rows
as canonical per-card files) and the local card (`localcard`). Each reads through the strict reader and
writes through the atomic writer of `emmy_core.fileio` (floor 1), and builds or reads the rows of
`emmy_core.store` (floor 2); none imports the moves above it (`emmy_core.exchange`, floor 4).
Importing this package imports nothing: each module loads what it needs.
"""
