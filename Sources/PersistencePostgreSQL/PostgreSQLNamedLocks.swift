import Persistence

/// Named locks (`SaveEffects.lockFirst(_:shared:)`, `TransactionReader.lock(_:shared:)`) on
/// PostgreSQL: transaction-scoped advisory locks, which the server releases when the
/// transaction ends — after its commit is visible, so a save granted the lock next sees
/// what the holder committed.
///
/// A lock's key is in the two-`int4` form: (`hashtext('persistence-lock:' || schema)`,
/// `hashtext(name)`). The store's own advisory locks (the schema's extension at open, the
/// tallies' triggers, PostgreSQLTallies.swift) are in the one-`bigint` form, a key space of
/// its own (`pg_locks.objsubid` 1, where the two-`int4` form has 2): a named lock never
/// waits for them, whatever its name. Two names, or two stores' schemas in one database,
/// whose hashes meet share a lock: the holders wait for each other more than they need to,
/// never less.
extension PostgreSQLStore {
    /// The first half of the keys of this store's named locks.
    var namedLockSpace: String { "persistence-lock:" + location.schema }

    /// Takes the named lock `name` on `connection`, inside its transaction, until the
    /// transaction ends.
    func takeNamedLock(_ name: String, shared: Bool, on connection: PostgreSQLConnection) throws {
        let function = shared ? "pg_advisory_xact_lock_shared" : "pg_advisory_xact_lock"
        try connection.run("SELECT \(function)(hashtext($1), hashtext($2))", [.text(namedLockSpace), .text(name)])
    }
}
