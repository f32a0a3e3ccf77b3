#!/bin/sh
# The sandbox's stand-in for the official postgres image's docker-entrypoint.sh
# (docker-library/postgres), run by `postgres:<tag>` pods with the PostgreSQL installed on the
# machine. Same contract, fewer features:
#   - `docker-entrypoint.sh postgres [options]` (the image's default): on an empty PGDATA, initdb
#     as POSTGRES_USER with POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust)
#     and POSTGRES_INITDB_ARGS, allow `host all all all <method>`, start a temporary server on the
#     Unix socket only, create POSTGRES_DB, run /docker-entrypoint-initdb.d/*.sh and *.sql, stop
#     it; then exec postgres in the foreground, so it gets the container's stop signal itself.
#   - first argument an option (`-c ...`): as if `postgres` came first.
#   - anything else (`sh -c ...`, `pg_basebackup ...`): exec it unchanged.
# What differs, and why: the pod never runs as root (the sandbox starts it as its runAsUser), so
# there is no gosu/chown step; and every pod shares the machine's network, so postgres listens on
# the pod's own address ($SANDBOX_POD_IP, which `localhost` also names in the pod's /etc/hosts)
# rather than on every address, where all pods' port 5432 would collide.
set -eu

if [ "${1#-}" != "$1" ]; then
	set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
	exec "$@"
fi

: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
export PGDATA POSTGRES_USER POSTGRES_DB

mkdir -p "$PGDATA"
chmod 00700 "$PGDATA" 2>/dev/null || :

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != trust ]; then
		cat >&2 <<-'EOM'
			Error: Database is uninitialized and superuser password is not specified.
			       You must specify POSTGRES_PASSWORD to a non-empty value for the
			       superuser. For example, "-e POSTGRES_PASSWORD=password" on "docker run".

			       You may also use "POSTGRES_HOST_AUTH_METHOD=trust" to allow all
			       connections without a password. This is *not* recommended.

			       See PostgreSQL documentation about "trust":
			       https://www.postgresql.org/docs/current/auth-trust.html
		EOM
		exit 1
	fi
	pwfile="$(mktemp)"
	printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
	# POSTGRES_INITDB_ARGS is split into words, as the official script does.
	# shellcheck disable=SC2086
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" ${POSTGRES_INITDB_ARGS:-}
	rm -f "$pwfile"

	method="${POSTGRES_HOST_AUTH_METHOD:-}"
	if [ -z "$method" ]; then
		method="$(postgres -C password_encryption -D "$PGDATA")"
	fi
	printf '\nhost all all all %s\n' "$method" >>"$PGDATA/pg_hba.conf"

	# The temporary server listens on the Unix socket only, so no probe sees it as ready.
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p ${PGPORT:-5432}" -w start
	psql_run() {
		psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc "$@"
	}
	if [ "$POSTGRES_DB" != postgres ]; then
		psql_run --dbname postgres --set db="$POSTGRES_DB" <<-'SQL'
			CREATE DATABASE :"db" ;
		SQL
	fi
	echo
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh)
			if [ -x "$f" ]; then
				echo "$0: running $f"
				"$f"
			else
				echo "$0: sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql)
			echo "$0: running $f"
			psql_run --dbname "$POSTGRES_DB" -f "$f"
			;;
		*/\*) ;;
		*) echo "$0: ignoring $f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo
	echo 'PostgreSQL init process complete; ready for start up.'
	echo
else
	echo
	echo 'PostgreSQL Database directory appears to contain a database; Skipping initialization'
	echo
fi

# The last -c wins: whatever the arguments say, listen on this pod's address only.
exec "$@" -c "listen_addresses=${SANDBOX_POD_IP:-127.0.0.1}"
