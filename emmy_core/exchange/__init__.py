"""Floor 4 of the data system: moving data between files and the store.

The import of any source into a store (`importer`: freezes, tune files, golden records, Kernel Tuner
caches, exports, other databases), the export of a store as a dataset folder and its checks (`export`,
`export_content`, `check_export`) and the recorders that write a tune's measurements into the database
and its tune file (`recorders`). It builds on the formats (floor 3), the store (floor 2) and file I/O
(floor 1), and nothing below imports it; the freeze folder's operations (`emmy_core.freezefolder`) share
this floor. Importing this package imports nothing: each module loads what it needs.
"""
