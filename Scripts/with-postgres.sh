#!/usr/bin/env bash
# Runs a command with a private PostgreSQL cluster, then stops and removes the cluster.
#
#   Scripts/with-postgres.sh COMMAND [ARG...]
#
# Installs PostgreSQL from Debian's packages if it is missing, makes a cluster in a new
# temporary directory (initdb), starts it (pg_ctl) listening on 127.0.0.1 only, on a free
# port, with no unix socket, as an unprivileged user (when run as root: `nobody`, which
# owns the directory), makes a database and a password-protected role, and runs COMMAND
# with ASSETCAT_TEST_POSTGRESQL_URL=postgresql://USER:PASSWORD@127.0.0.1:PORT/DB in its
# environment. The server also takes TLS, with a certificate for 127.0.0.1 signed by a
# certificate authority made for the run (ASSETCAT_TEST_POSTGRESQL_CA names its file). The
# cluster runs without fsync (a throwaway); ASSETCAT_POSTGRESQL_DURABLE=1 keeps PostgreSQL's
# durable defaults (fsync, synchronous_commit, full_page_writes), for benchmarks. Whatever
# COMMAND does (fails, is interrupted), the server is stopped and the directory removed on the
# way out; the script exits with COMMAND's status. A cluster a killed run left behind (SIGKILL
# cannot be trapped) is removed by the next run.
set -euo pipefail

if [ $# -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# The newest server installed; else installed from Debian's packages.
find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
bin=$(find_bin)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "installing: postgresql" >&2
    export DEBIAN_FRONTEND=noninteractive
    # One apt at a time: `make test` may be installing the browser test's packages in the
    # background (Scripts/install-browser.sh takes the same lock).
    $sudo flock /tmp/assetcat-apt.lock apt-get update -qq
    # Debian's postgresql-common would start a cluster of its own: it is stopped below.
    $sudo flock /tmp/assetcat-apt.lock apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    bin=$(find_bin)
    # Only the binaries are wanted: a system cluster the package started is not ours.
    if command -v pg_ctlcluster >/dev/null && [ -n "$(pg_lsclusters -h 2>/dev/null)" ]; then
        pg_lsclusters -h | while read -r version name _; do
            $sudo pg_ctlcluster "$version" "$name" stop 2>/dev/null || true
        done
    fi
fi

# pgbouncer, in front of the server for the tests of a catalog behind a pooler.
if ! command -v pgbouncer >/dev/null; then
    echo "installing: pgbouncer" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo flock /tmp/assetcat-apt.lock apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null || {
        $sudo flock /tmp/assetcat-apt.lock apt-get update -qq
        $sudo flock /tmp/assetcat-apt.lock apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null
    }
    # Only the binary is wanted: a system pgbouncer the package started is not ours.
    if command -v systemctl >/dev/null; then $sudo systemctl stop pgbouncer 2>/dev/null || true; fi
fi

# Who runs the server: postgres refuses root.
if [ "$(id -u)" -eq 0 ]; then
    runas=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
    owner=nobody:nogroup
else
    runas=()
    owner=""
fi

# Stops the pgbouncers of the run whose directory is $1 (SIGTERM: at once), and waits up to
# 5 s for them to be gone.
stop_bouncers() {
    local pids=() pid
    for pidfile in "$1"/pgbouncer/*.pid; do
        [ -f "$pidfile" ] && pids+=("$(cat "$pidfile")")
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && break; pid=""; done
        [ -z "$pid" ] && return 0
        sleep 0.1
    done
}

# A cluster left by a run that was killed (SIGKILL skips the trap below): its script is gone,
# so its server is stopped and its directory removed. A run still alive is left alone.
for stale in "${TMPDIR:-/tmp}"/assetcat-postgres.*; do
    owner_pid=$(cat "$stale/script.pid" 2>/dev/null) || continue
    if [ -n "$owner_pid" ] && ! kill -0 "$owner_pid" 2>/dev/null; then
        echo "removing a PostgreSQL cluster left by a killed run: $stale" >&2
        # At most 5 s: an orphaned server, once stopped, may stay a zombie its reaper never waits for.
        "${runas[@]}" "$bin/pg_ctl" -D "$stale/data" -m immediate -w -t 5 stop >/dev/null 2>&1 || true
        stop_bouncers "$stale"
        rm -rf "$stale"
    fi
done

root=$(mktemp -d "${TMPDIR:-/tmp}/assetcat-postgres.XXXXXX")
echo $$ >"$root/script.pid"
data="$root/data"
started=0
cleanup() {
    status=$?
    stop_bouncers "$root"
    if [ "$started" -eq 1 ]; then
        "${runas[@]}" "$bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$root"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

user=assetcat
database=assetcat_test
password=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$password" >"$root/password"
chmod 700 "$root"
# TLS: a certificate authority of the run's own signs the server's certificate (its key is
# not kept), so that the tests can check the server as verify-full does.
mkdir "$root/tls"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=assetcat test CA" -keyout "$root/tls/ca.key" \
    -out "$root/tls/ca.crt" 2>/dev/null
openssl req "${ec[@]}" -subj "/CN=127.0.0.1" -keyout "$root/tls/server.key" -out "$root/tls/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$root/tls/san"
openssl x509 -req -in "$root/tls/server.csr" -CA "$root/tls/ca.crt" -CAkey "$root/tls/ca.key" -set_serial 1 \
    -days 2 -extfile "$root/tls/san" -out "$root/tls/server.crt" 2>/dev/null
rm -f "$root/tls/ca.key" "$root/tls/server.csr" "$root/tls/san"
chmod 600 "$root/tls/server.key"
[ -z "$owner" ] || chown -R "$owner" "$root"

"${runas[@]}" "$bin/initdb" -D "$data" -U "$user" --pwfile="$root/password" --auth=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 --no-sync >"$root/initdb.log" 2>&1 || {
    cat "$root/initdb.log" >&2
    exit 1
}
rm -f "$root/password"

durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
if [ "${ASSETCAT_POSTGRESQL_DURABLE:-}" = 1 ]; then
    durability="-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
fi
# A free port: asked of the kernel, then tried; another process may take it in between.
for attempt in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # Tests need no durability across a power loss of this throwaway cluster: fsync off, unless
    # ASSETCAT_POSTGRESQL_DURABLE=1 (benchmarks that compare with SQLite's synchronous=FULL).
    if "${runas[@]}" "$bin/pg_ctl" -D "$data" -l "$root/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories='' $durability \
            -c max_connections=200 -c ssl=on \
            -c ssl_cert_file=$root/tls/server.crt -c ssl_key_file=$root/tls/server.key" \
        start >/dev/null 2>&1; then
        started=1
        break
    fi
    "${runas[@]}" "$bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
done
if [ "$started" -ne 1 ]; then
    echo "could not start PostgreSQL; its log:" >&2
    cat "$root/server.log" >&2 || true
    exit 1
fi

PGPASSWORD=$password "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$user" "$database"
export ASSETCAT_TEST_POSTGRESQL_URL="postgresql://$user:$password@127.0.0.1:$port/$database"
export ASSETCAT_TEST_POSTGRESQL_CA="$root/tls/ca.crt"
echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (data in $root)" >&2

# Two pgbouncers in front of it, one a pool mode: session (a catalog works behind it) and
# transaction (a catalog refuses it). Each on a free port, the role's password in its auth
# file, taking TLS with the server's certificate and speaking TLS to the server; named in ASSETCAT_TEST_PGBOUNCER_SESSION_URL and
# ASSETCAT_TEST_PGBOUNCER_TRANSACTION_URL.
mkdir "$root/pgbouncer"
printf '"%s" "%s"\n' "$user" "$password" >"$root/pgbouncer/users.txt"
for mode in session transaction; do
    for attempt in 1 2 3 4 5; do
        bouncer_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        cat >"$root/pgbouncer/$mode.ini" <<EOF
[databases]
$database = host=127.0.0.1 port=$port dbname=$database
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = plain
auth_file = $root/pgbouncer/users.txt
pool_mode = $mode
max_client_conn = 1000
default_pool_size = 150
logfile = $root/pgbouncer/$mode.log
pidfile = $root/pgbouncer/$mode.pid
client_tls_sslmode = allow
client_tls_cert_file = $root/tls/server.crt
client_tls_key_file = $root/tls/server.key
server_tls_sslmode = require
EOF
        [ -z "$owner" ] || chown -R "$owner" "$root/pgbouncer"
        if "${runas[@]}" pgbouncer -d -q "$root/pgbouncer/$mode.ini" 2>>"$root/pgbouncer/start.log"; then break; fi
        bouncer_port=""
    done
    if [ -z "$bouncer_port" ]; then
        echo "could not start pgbouncer ($mode); its log:" >&2
        cat "$root/pgbouncer/start.log" "$root/pgbouncer/$mode.log" >&2 || true
        exit 1
    fi
    url="postgresql://$user:$password@127.0.0.1:$bouncer_port/$database"
    if [ "$mode" = session ]; then
        export ASSETCAT_TEST_PGBOUNCER_SESSION_URL="$url"
    else
        export ASSETCAT_TEST_PGBOUNCER_TRANSACTION_URL="$url"
    fi
done
echo "pgbouncer $(pgbouncer --version | awk 'NR == 1 {print $2}') in front of it (session and transaction modes)" >&2

# Not exec: the trap must run after the command. In the background, so that a signal to
# this script is handled at once (passed on to the command) rather than after it ends.
child=""
forward() {
    [ -z "$child" ] || kill "-$1" "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
    exit "$2"
}
trap 'forward INT 130' INT
trap 'forward TERM 143' TERM
set +e
"$@" &
child=$!
wait "$child"
status=$?
set -e
exit "$status"
