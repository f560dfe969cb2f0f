"""Operations on the freeze folder: its one naming rule (`freeze_names`), the fold of tune files into
the freeze (`fold`), the nightly refresh (`refresh`) and promotion (`promote`).

Importing this package imports nothing: each module loads what it needs.
"""
