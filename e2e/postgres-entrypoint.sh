#!/bin/sh
# The official image's contract, reduced to what docker-compose.yml uses: POSTGRES_USER,
# POSTGRES_DB and POSTGRES_PASSWORD_FILE initialise an empty $PGDATA once (scram passwords,
# every address allowed to log in with one), then PostgreSQL runs as `postgres` in the foreground.
set -eu
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  cp "$POSTGRES_PASSWORD_FILE" /tmp/pwfile && chown postgres /tmp/pwfile
  runuser -u postgres -- initdb -U "$POSTGRES_USER" --pwfile=/tmp/pwfile \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f /tmp/pwfile
  echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
  runuser -u postgres -- pg_ctl -w -o "-c listen_addresses=''" start >/dev/null
  runuser -u postgres -- createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
  runuser -u postgres -- pg_ctl -w stop >/dev/null
fi
exec runuser -u postgres -- postgres -c listen_addresses='*'
