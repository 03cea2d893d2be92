"""The open palace: the process-wide handle on store and model (runtime, handle, embedding), the write-ahead
journal and the applier that carries its entries out and replays them at start-up (journal, applier), store
points and deferred dense vectors (points), the duplicate rule that store and check_duplicate share
(duplicates), id allocation (ids), the write lock (locks), the holder's lock, socket and framing that every
process sharing an embedded palace uses (holder), background writer threads (background) and the
Prometheus metrics (metrics). Imports the schema, the models, the store adapters and the exception tree;
nothing that governs, writes or reads memories.
"""
