from shared.db import run_migrations_env

run_migrations_env()
