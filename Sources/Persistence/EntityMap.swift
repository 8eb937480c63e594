/// A value for each entity of a schema — a store's SQL for each, built once when it opens —
/// looked up by entity. Every entity of the schema has one: asking for another is a
/// programming error, stopped with its name.
///
/// ```swift
/// let sql = EntityMap(schema) { EntitySQL($0, dialect: .sqlite) }
/// let table = sql[entity].table
/// ```
package struct EntityMap<Value> {
    private let values: [String: Value]

    package init(_ schema: Schema, _ make: (EntityDescription) throws -> Value) rethrows {
        var values: [String: Value] = [:]
        for entity in schema.entities { values[entity.name] = try make(entity) }
        self.values = values
    }

    /// The value of `entity`, an entity of the schema.
    package subscript(_ entity: EntityDescription) -> Value {
        guard let value = values[entity.name] else {
            preconditionFailure("\(entity.name) is not an entity of this store's schema")
        }
        return value
    }
}

extension EntityMap: Sendable where Value: Sendable {}
