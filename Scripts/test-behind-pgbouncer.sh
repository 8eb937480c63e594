#!/usr/bin/env bash
# Runs the suites of catalogs shared by hosts (several processes, sessions, announcements,
# claims, kills) with every store behind pgbouncer in pool_mode = session, as deployments put
# it in front of PostgreSQL. Run inside Scripts/with-postgres.sh, which starts pgbouncer:
#
#   Scripts/with-postgres.sh Scripts/test-behind-pgbouncer.sh [SWIFT]
set -euo pipefail
swift=${1:-swift}
if [ -z "${ASSETCAT_TEST_PGBOUNCER_SESSION_URL:-}" ]; then
    echo "$0: ASSETCAT_TEST_PGBOUNCER_SESSION_URL is not set: run it inside Scripts/with-postgres.sh" >&2
    exit 2
fi
suites=(
    # Persistence: processes sharing a store, sessions and their reaping, announcements, claims.
    MultiProcessTests SessionTests AnnouncementTests ClaimRowsTests
    # The catalog: hosts sharing one, a host killed mid-add, jobs across hosts, liveness.
    SharedCatalogSessionTests MultiHostCrashTests LostSessionJobTests JobsOnPostgreSQLTests
    SessionLivenessPassTests
    # The CLI: the README's sharing walk-through, content locks between hosts.
    ReadmeSharingTests ContentLockCLITests
)
filter=$(IFS='|'; echo "${suites[*]}")
echo "the multi-host suites, behind pgbouncer (pool_mode = session)" >&2
ASSETCAT_TEST_POSTGRESQL_URL=$ASSETCAT_TEST_PGBOUNCER_SESSION_URL exec "$swift" test --skip-build --filter "$filter"
