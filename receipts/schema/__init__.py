"""The schema: tables (its one definition), Alembic migrations made from them, and how to apply them."""
