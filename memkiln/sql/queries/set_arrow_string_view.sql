-- Results of this connection go out as Arrow string views (Polars' own layout, taken without a
-- copy) rather than Arrow strings. Used on the in-memory connection ingest parses JSON with.
set produce_arrow_string_view = true
