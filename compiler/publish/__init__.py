"""Publishing MVs by key to a serving store (PostgreSQL), for applications that need
millisecond answers to ad-hoc filters and sorts (seed 000's application; issue 33).

- ``spec``: ``config(publish={to, table, indexes, chunk_rows})`` of an mv;
- ``stores``: the stores a target declares in ``project.yml``, their secret dsn rendered at connect time;
- ``schema``: the published table's columns (Spark types mapped to PostgreSQL's), key and indexes;
- ``decisions``: what a publish does (nothing, the changed keys of some batches, or in full), pure;
- ``postgres``: the store's transactions (rows and its offsets row together, fenced by the lease token);
- ``publisher``: one publish after an MV's batch, reading the rows with Spark.
"""
