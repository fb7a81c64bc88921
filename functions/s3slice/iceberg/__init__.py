"""Apache Iceberg tables as a source: the table's metadata, a snapshot's manifests (Avro,
read with fastavro), partition transforms, and the pruning of manifests and data files
against the query's predicate before any data file is opened (:mod:`.plan`); the data
files' rows mapped to the table's schema by field id, with v2 position and equality
deletes applied (:mod:`.datafile`)."""
