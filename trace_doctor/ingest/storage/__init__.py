"""Where tables live once parsed: the content-keyed table cache and the tables kept on disk as Parquet."""
