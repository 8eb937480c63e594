#!/usr/bin/env bash
# Counts the statements — the round trips — that `assetcat` sends to PostgreSQL per unit of
# work: per file added, per job run, and the fixed cost of opening and closing a catalog.
#
#   Scripts/with-postgres.sh Benchmarks/round-trips.sh [ASSETCAT]
#
# ASSETCAT is the binary to measure (default: $ASSETCAT, else .build-bench/release/assetcat,
# as `make bench` builds it); nothing is built. The cluster is the one with-postgres.sh starts
# (ASSETCAT_TEST_POSTGRESQL_URL, its role a superuser). The script turns on the server's
# statement log (log_statement = all, a parseable log_line_prefix with the pid and the
# application name), brackets each command with marker statements from psql, and counts the
# statements logged in between by the catalog's connections (application_name `persistence
# …`; psql's are `assetcat-round-trips`). postgres-nio sends every statement, BEGIN and COMMIT
# included, as an extended-protocol exchange of its own, so a statement is a round trip; the
# connections' start-up (TLS, authentication) is not a statement and is counted apart, as
# connections. A statement bound with parameters is logged as `execute <unnamed>: …` plus a
# `DETAIL: parameters: …` line (values may span lines): statements are counted, not lines.
#
# Cases, each on a fresh catalog (its own schema) of tiny files (a few bytes each, 100 a
# folder, referenced, not copied): `ls` of an empty catalog (the bare open and close), `add
# --reference --recursive` of 100 and 10,000 files (the per-file cost is their difference),
# the same with --tag, `show` and `rm` of one asset, and `jobs run` of the digest jobs that
# `add --defer-hash` of 1,000 and 10,000 files queued. It prints a Markdown table and the most
# frequent statements (literals and parameters stripped) of the add of 10,000 files and of
# `jobs run` of 10,000 jobs. Wall times are given for orientation only: every statement is
# being logged. The add's counts repeat exactly; `jobs run`'s vary by a few per cent between
# runs (how many jobs a claim or a result takes depends on timing).
# Takes about a minute; leaves nothing behind (the statement log is turned off again).
# ROUND_TRIPS_STATEMENTS=DIR keeps each case's statements there (CASE.tsv: pid, application, text).
set -euo pipefail
export LC_ALL=C.UTF-8

repo=$(cd "$(dirname "$0")/.." && pwd)
assetcat=${1:-${ASSETCAT:-$repo/.build-bench/release/assetcat}}
[[ $assetcat = /* ]] || assetcat=$PWD/$assetcat
url=${ASSETCAT_TEST_POSTGRESQL_URL:?run under Scripts/with-postgres.sh, which sets ASSETCAT_TEST_POSTGRESQL_URL}
if [ ! -x "$assetcat" ]; then
    echo "no assetcat binary at $assetcat (make bench builds one; or give its path)" >&2
    exit 2
fi
psql=$(command -v psql || ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1)

# psql's own statements (the markers) are told apart from the catalog's by this name.
export PGAPPNAME=assetcat-round-trips
work=$(mktemp -d "${TMPDIR:-/tmp}/assetcat-round-trips.XXXXXX")
# The catalogs keep their store's URL (with its password) for this host here, not in ~/.config.
export XDG_CONFIG_HOME=$work/config
mkdir -p "$work/config" "$work/corpus" "$work/catalogs" "$work/statements" "$work/output"

# How the statement texts are normalized for the breakdown: literals and $N parameters become
# ?, a parameter's cast goes, lists of them (an IN list, a row of VALUES) and runs of quoted
# column names are cut short, and the rows of a multi-row VALUES become one.
cat >"$work/normalize.sed" <<'SED'
s/[[:space:]]+/ /g
s/'([^']|'')*'/?/g
s/\$[0-9]+/?/g
s/\b[0-9]+(\.[0-9]+)?\b/?/g
s/\?::(DOUBLE PRECISION|[A-Za-z_]+)/?/g
s/\?(, \?)+/?, …/g
s/ IN \(\?\)/ IN (?, …)/g
s/\(\?, …\)(, \(\?, …\))+/(?, …), …/g
s/("[^"]+")(, "[^"]+"){2,}/\1, …/g
SED

sql() { "$psql" "$url" -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }

logging=0
cleanup() {
    local status=$?
    if [ "$logging" -eq 1 ]; then
        sql "ALTER SYSTEM RESET log_statement" >/dev/null 2>&1 || true
        sql "ALTER SYSTEM RESET log_line_prefix" >/dev/null 2>&1 || true
        sql "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Formats an integer with thousands separators: 12345 -> 12,345.
thousands() { sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$1"; }
# Prints $1 / $2 with $3 decimals (default 1).
ratio() { awk -v a="$1" -v b="$2" -v d="${3:-1}" 'BEGIN { printf "%.*f", d, a / b }'; }

# --- The corpus: N tiny files, 100 a folder. -------------------------------------------------

# make_corpus NAME COUNT: $work/corpus/NAME/dNNN/fNNNNN, each file a few distinct bytes.
make_corpus() {
    local dir=$work/corpus/$1 count=$2 i folder file
    for ((i = 0; i < count; i++)); do
        printf -v folder '%s/d%03d' "$dir" $((i / 100))
        printf -v file '%s/f%05d' "$folder" "$i"
        if ((i % 100 == 0)); then mkdir -p "$folder"; fi
        printf 'file %d\n' "$i" >"$file"
    done
}
make_corpus c100 100
make_corpus c1000 1000
make_corpus c10000 10000

# --- The statement log. -----------------------------------------------------------------------

log=$(dirname "$(sql "SHOW data_directory")")/server.log
[ -r "$log" ] || { echo "cannot read the server's log at $log" >&2; exit 1; }
# The prefix starts every line the server writes (not the continuation lines of a statement or
# a parameter value that spans lines): @rt@|PID|APPLICATION|.
logging=1
sql "ALTER SYSTEM SET log_statement = 'all'"
sql "ALTER SYSTEM SET log_line_prefix = '@rt@|%p|%a|'"
sql "SELECT pg_reload_conf()" >/dev/null
sleep 0.2 # the postmaster passes the reload on to its backends asynchronously

# statements CASE: from the log written since the offset in $work/offset, the statements the
# catalog sent between CASE's markers, one a line: PID<TAB>APPLICATION<TAB>TEXT (the lines of a
# multi-line statement joined with spaces).
statements() {
    tail -c +"$(($(cat "$work/offset") + 1))" "$log" | awk -v name="$1" -v psql_app="$PGAPPNAME" '
        function flush() {
            if (text != "" && inside && app != psql_app) print pid "\t" app "\t" text
            text = ""
        }
        /^@rt@\|[0-9]+\|/ {
            flush()
            line = substr($0, 6)
            p = index(line, "|"); pid = substr(line, 1, p - 1); line = substr(line, p + 1)
            p = index(line, "|"); app = substr(line, 1, p - 1); line = substr(line, p + 1)
            statement = line ~ /^LOG:  (statement|execute [^:]*): /
            if (!statement) next
            sub(/^LOG:  (statement|execute [^:]*): /, "", line)
            if (app == psql_app && line == "SELECT '\''rt-begin-" name "'\''") inside = 1
            if (app == psql_app && line == "SELECT '\''rt-end-" name "'\''") { inside = 0; exit }
            text = line
            next
        }
        statement && text != "" { text = text " " $0 }
        END { flush() }
    '
}

# --- Measuring one command. -------------------------------------------------------------------

declare -A count begins commits rollbacks connections seconds

# measure CASE COMMAND...: runs COMMAND between CASE's markers and keeps its statements in
# $work/statements/CASE.tsv and its counts in the arrays above. COMMAND's output is kept in
# $work/output/CASE and shown if it fails.
measure() {
    local name=$1 start end file=$work/statements/$1.tsv
    shift
    stat -c %s "$log" >"$work/offset"
    sql "SELECT 'rt-begin-$name'" >/dev/null
    start=$(date +%s%N)
    if ! "$@" >"$work/output/$name" 2>&1; then
        echo "$name failed: $*" >&2
        cat "$work/output/$name" >&2
        exit 1
    fi
    end=$(date +%s%N)
    sql "SELECT 'rt-end-$name'" >/dev/null
    statements "$name" >"$file"
    count[$name]=$(wc -l <"$file")
    begins[$name]=$(awk -F '\t' '$3 ~ /^(BEGIN|START TRANSACTION)/' "$file" | wc -l)
    commits[$name]=$(awk -F '\t' '$3 ~ /^(COMMIT|END)/' "$file" | wc -l)
    rollbacks[$name]=$(awk -F '\t' '$3 ~ /^ROLLBACK( |$)/' "$file" | wc -l)
    connections[$name]=$(cut -f 1 "$file" | sort -u | wc -l)
    seconds[$name]=$(ratio $((end - start)) 1000000000 2)
    printf '%-22s %7d statements  %6.2f s\n' "$name" "${count[$name]}" "${seconds[$name]}" >&2
}

# new_catalog NAME: an empty catalog in $work/catalogs/NAME, its records in schema rt_NAME.
new_catalog() {
    "$assetcat" init --quiet --store "$url?schema=rt_$1" "$work/catalogs/$1" >/dev/null 2>&1 || {
        echo "init of catalog $1 failed" >&2
        "$assetcat" init --store "$url?schema=rt_$1" "$work/catalogs/$1" >&2
        exit 1
    }
}

# The binary under measure.
ac() { "$assetcat" "$@"; }

# The bare open and close: `ls` of an empty catalog (one page query besides).
new_catalog empty
measure open ac ls --catalog "$work/catalogs/empty"

# add: 100 files (the fixed cost shows), 10,000 files, 10,000 files tagged.
new_catalog add100
measure add-100 ac add --quiet --catalog "$work/catalogs/add100" --reference --recursive "$work/corpus/c100"
new_catalog add10000
measure add-10000 ac add --quiet --catalog "$work/catalogs/add10000" --reference --recursive "$work/corpus/c10000"
new_catalog tagged
measure add-10000-tag ac add --quiet --catalog "$work/catalogs/tagged" --reference --recursive --tag bulk \
    "$work/corpus/c10000"

# show and rm of one asset of the 10,000-asset catalog, each a whole command.
id=$(ac ls --catalog "$work/catalogs/add10000" --jsonl --fields id | sed -n '1s/[^0-9]//gp')
measure show ac show --catalog "$work/catalogs/add10000" "$id"
measure rm ac rm --quiet --catalog "$work/catalogs/add10000" "$id"

# jobs: add --defer-hash queues a digest job a file; jobs run runs them.
for n in 1000 10000; do
    new_catalog jobs$n
    measure "add-$n-defer-hash" ac add --quiet --catalog "$work/catalogs/jobs$n" --reference --recursive --defer-hash \
        "$work/corpus/c$n"
    measure "jobs-run-$n" ac jobs run --quiet --catalog "$work/catalogs/jobs$n"
done

sql "ALTER SYSTEM RESET log_statement"
sql "ALTER SYSTEM RESET log_line_prefix"
sql "SELECT pg_reload_conf()" >/dev/null
logging=0

# --- The report. ------------------------------------------------------------------------------

[ -z "${ROUND_TRIPS_STATEMENTS:-}" ] || { mkdir -p "$ROUND_TRIPS_STATEMENTS" && cp "$work"/statements/*.tsv "$ROUND_TRIPS_STATEMENTS"; }

label() {
    case $1 in
        open) echo '`ls` of an empty catalog (bare open + close)' ;;
        add-100) echo '`add --reference --recursive`, 100 files' ;;
        add-10000) echo '`add --reference --recursive`, 10,000 files' ;;
        add-10000-tag) echo '`add --reference --recursive --tag bulk`, 10,000 files' ;;
        show) echo '`show ID` (one asset of 10,000)' ;;
        rm) echo '`rm ID` (one asset of 10,000)' ;;
        add-*-defer-hash) echo "\`add --reference --recursive --defer-hash\`, $(thousands "${1//[^0-9]/}") files" ;;
        jobs-run-*) echo "\`jobs run\`, $(thousands "${1//[^0-9]/}") digest jobs" ;;
    esac
}
# row CASE PER-UNIT NOTES
row() {
    local c=$1 extra=""
    [ "${rollbacks[$c]}" -eq 0 ] || extra=" (+ ${rollbacks[$c]} ROLLBACK)"
    printf '| %s | %s | %s | %s / %s%s | %s | %s s | %s |\n' "$(label "$c")" "$(thousands "${count[$c]}")" "$2" \
        "$(thousands "${begins[$c]}")" "$(thousands "${commits[$c]}")" "$extra" "${connections[$c]}" \
        "${seconds[$c]}" "$3"
}
open=${count[open]}
add_marginal=$(ratio $((count[add-10000] - count[add-100])) 9.9)
add_fixed=$(awk -v a="${count[add-100]}" -v m="$add_marginal" 'BEGIN { printf "%.0f", a - m / 10 }')
job_marginal=$(ratio $((count[jobs-run-10000] - count[jobs-run-1000])) 9000 2)

echo
echo "## Round trips to PostgreSQL per unit of work"
echo
echo "$("$assetcat" --version | sed -n 1p), PostgreSQL $(sql 'SHOW server_version'), $(date -u +%F). A statement is a"
echo "round trip; only the catalog's connections are counted. Wall times include logging every statement."
echo
echo '| case | statements | per unit | BEGIN / COMMIT | connections | wall time | notes |'
echo '|---|---:|---|---:|---:|---:|---|'
row open "–" "open, one page query, close: the floor of every command below"
row add-100 "$(ratio "${count[add-100]}" 100 2) per file" "$((count[add-100] - open)) beyond the bare open"
row add-10000 "$(ratio "${count[add-10000]}" 10) per 1,000 files" \
    "$add_marginal per 1,000 files beyond the 100-file add (the difference ÷ 9.9); fixed cost ≈ $add_fixed"
row add-10000-tag "$(ratio "${count[add-10000-tag]}" 10) per 1,000 files" \
    "$((count[add-10000-tag] - count[add-10000])) more than untagged"
row show "–" "$((count[show] - open)) beyond the bare open"
row rm "–" "$((count[rm] - open)) beyond the bare open"
for n in 1000 10000; do
    row "add-$n-defer-hash" "$(ratio "${count[add-$n-defer-hash]}" $((n / 1000))) per 1,000 files" \
        "queues the next row's jobs"
    row "jobs-run-$n" "$(ratio $((count[jobs-run-$n] - open)) "$n" 2) per job" "(statements − bare open) ÷ jobs"
done
echo
echo "Beyond the 100-file add, each 1,000 files added cost $add_marginal statements; beyond \`jobs run\` of"
echo "1,000 jobs, each job cost $job_marginal (the 10,000 rows less the smaller ones). The run took $SECONDS s."

# top NAME: the 10 most frequent statements of case NAME, normalized (normalize.sed above).
top() {
    local file=$work/statements/$1.tsv total=${count[$1]}
    echo
    echo "### Most frequent statements: $(label "$1") — $(thousands "$total") in all"
    echo
    echo '| statements | share | statement (normalized) |'
    echo '|---:|---:|---|'
    cut -f 3- "$file" | sed -E -f "$work/normalize.sed" | sort | uniq -c | sort -k 1,1nr -k 2 | awk 'NR <= 10' |
        while read -r times text; do
            [ ${#text} -le 240 ] || text="${text:0:239}…"
            printf '| %s | %s %% | `%s` |\n' "$(thousands "$times")" "$(ratio $((times * 100)) "$total" 1)" \
                "${text//|/\\|}"
        done
}
top add-10000
top jobs-run-10000
