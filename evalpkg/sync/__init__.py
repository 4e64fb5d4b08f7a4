"""The de-identifying sync: prod -> (postgres_fdw + dbt) -> eval DB -> Great Expectations."""
