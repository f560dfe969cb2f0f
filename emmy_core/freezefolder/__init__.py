"""Operations on the freeze folder: its one naming rule (`freeze_names`), the fold of tune files into
the freeze (`fold`), the nightly refresh (`refresh`) and promotion (`promote`).

Floor 4 of the data system, beside `emmy_core.exchange` (whose import it uses): it moves tune files into
the freeze through the formats (floor 3), the store (floor 2) and file I/O (floor 1).
Importing this package imports nothing: each module loads what it needs.
"""
