"""Evidence: the hierarchy at each fork, the resolution record, strict evidence, the release gate.

`resolve(fork, key, sources)` settles one fork by the first of its ordered sources that answers
(`sources.Sources`: the freeze's goldens, the local tuning database, the prior, the rule's first
option; `context.open_sources` builds them for a card and setting). `model.ModelResolver` settles
every fork of a lowered model at a size, structural forks first. `resolution` holds the record,
`render` prints it, `gate` runs the release gate over the serving matrix. Nothing heavy is
imported here: the store is read through its light modules, DuckDB only when the local database
is opened.
"""
