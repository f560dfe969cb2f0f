"""Floor 1 of the data system: safe file I/O, with no knowledge of the store or of any format.

The strict reader every input goes through (`inputfile`: regular files only, the size capped;
`sourcefile`: bounded decompression, strict JSON, errors naming file, record and field), what a file on
disk is and whether a writer may replace it (`filekind`), the atomic writer that replaces only a file of
its own kind (`safefile`), fsspec URL folders (`urlfolder`), files naming the process that holds them
(`pidfile`), and the errors of all of them (`errors`: `FileError`, the root of every refusal of the data
system; the store's errors are file errors too). Every floor above (the store, the formats, the moves
between them) builds on this one, so nothing here imports them. Importing this package imports nothing.
"""
