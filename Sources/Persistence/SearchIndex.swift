import Locking

/// A full-text index of an entity's rows (``ManagedObject/searchIndex``), kept by the store in
/// every transaction that writes them — an object's save, rows inserted or deleted without
/// objects, a delete rule's cascade, a migration — so that a rollback or a failed save undoes
/// it with the rows. SQLite keeps it in an FTS5 table, PostgreSQL in a `tsvector` with a GIN
/// index. Query it with ``FetchPredicate/matches(_:)`` and order by
/// ``SortDescriptor/relevance``.
///
/// An index has one to four fields, the first the most relevant: each is the text of one or
/// more sources, cut into words (``TextSearch/words(_:)``).
///
/// ```swift
/// override class var searchIndex: SearchIndex? {
///     SearchIndex(
///         SearchField("title", .attribute(\Note.title)),
///         SearchField("folder", .related(\Note.folder, \Folder.name)),
///         SearchField("ext", .pathExtension(\Note.fileName)))
/// }
/// ```
///
/// A store that had no index, or another one, makes it from the rows when it is next opened
/// for writing. ``PersistentContainer/checkSearchIndex(fix:)`` compares it with the rows.
public struct SearchIndex: Sendable {
    /// The fields, the most relevant first.
    public let fields: [SearchField]

    /// An index of `fields` (one to four, with distinct names), the most relevant first.
    public init(_ fields: SearchField...) {
        self.fields = fields
    }
}

/// One field of a ``SearchIndex``: a name that queries can restrict a term to
/// (``TextSearch/Term/field``), and the sources whose text it holds.
public struct SearchField: Sendable {
    /// The field's name: letters, digits and `_`, starting with a letter.
    public let name: String
    let sources: [SearchSource]

    /// A field named `name` holding the text of `sources`, in order.
    public init(_ name: String, _ sources: SearchSource...) {
        self.name = name
        self.sources = sources
    }
}

/// Where the text of a ``SearchField`` comes from.
public struct SearchSource: @unchecked Sendable {
    enum Kind {
        /// A text attribute of the row.
        case attribute(AnyKeyPath)
        /// A text attribute of the row a to-one relationship points at (kept current when
        /// that row's attribute changes).
        case related(link: AnyKeyPath, destination: ManagedObject.Type, attribute: AnyKeyPath)
        /// The lower-cased extension of a path-like text attribute: what follows the last `.`
        /// of its last `/`-separated component, when that dot neither starts nor ends it.
        case pathExtension(AnyKeyPath)
    }
    let kind: Kind

    /// A text attribute of the row.
    public static func attribute<Root: ManagedObject>(_ keyPath: KeyPath<Root, some TextAttribute>) -> SearchSource {
        SearchSource(kind: .attribute(keyPath))
    }

    /// A text attribute of the row that the to-one `link` points at: re-indexed in every row
    /// that links to it when it changes.
    public static func related<Root: ManagedObject, Destination: ManagedObject>(
        _ link: KeyPath<Root, Destination?>, _ attribute: KeyPath<Destination, some TextAttribute>
    ) -> SearchSource {
        SearchSource(kind: .related(link: link, destination: Destination.self, attribute: attribute))
    }

    /// The lower-cased extension of a path-like text attribute (`png` for `a/b.PNG`; none for
    /// `.profile`, `a.` or `a.d/b`).
    public static func pathExtension<Root: ManagedObject>(_ keyPath: KeyPath<Root, some TextAttribute>)
        -> SearchSource
    {
        SearchSource(kind: .pathExtension(keyPath))
    }
}

/// A full-text query: every term must match (``FetchPredicate/matches(_:)``).
public struct TextSearch: Sendable, Hashable {
    /// The terms, all of which a row must match.
    public var terms: [Term]

    /// A query of `terms`, all of which must match.
    public init(_ terms: [Term]) {
        self.terms = terms.filter { !$0.words.isEmpty }
    }

    /// The words of `text` as the index cuts them: the runs of letters and digits, lower-cased
    /// (`"Beach_2024.PNG"` → `beach`, `2024`, `png`). Everything else separates words.
    public static func words(_ text: some StringProtocol) -> [String] {
        var words: [String] = []
        var current = ""
        for character in text {
            if character.isLetter || character.isNumber {
                current.append(character)
            } else if !current.isEmpty {
                words.append(current.lowercased())
                current = ""
            }
        }
        if !current.isEmpty { words.append(current.lowercased()) }
        return words
    }

    /// One term of a ``TextSearch``: a word, or a phrase of words that must come in this order,
    /// one after the other.
    public struct Term: Sendable, Hashable {
        /// The words (``TextSearch/words(_:)``); several make a phrase.
        public var words: [String]
        /// Whether the last word matches any word it starts (`summ` matches `summer`).
        public var isPrefix: Bool
        /// The field the term must match in (``SearchField/name``); `nil` for any field.
        public var field: String?

        /// The term of the words of `text`: one word, or a phrase.
        public init(_ text: String, isPrefix: Bool = false, field: String? = nil) {
            self.init(words: TextSearch.words(text), isPrefix: isPrefix, field: field)
        }

        /// The term of `words`, each cut again as the index cuts text.
        public init(words: [String], isPrefix: Bool = false, field: String? = nil) {
            self.words = words.flatMap(TextSearch.words)
            self.isPrefix = isPrefix
            self.field = field
        }
    }
}

/// A ``SearchIndex`` with its sources resolved to columns: what a store builds from.
package struct ResolvedSearchIndex: Sendable, Hashable {
    package enum Source: Sendable, Hashable {
        case column(String)
        case related(link: String, table: String, column: String)
        case pathExtension(String)
    }
    package struct Field: Sendable, Hashable {
        package let name: String
        package let sources: [Source]
    }
    package let entity: String
    package let fields: [Field]

    /// The columns of the entity whose change changes the index.
    package var columns: [String] {
        var columns: [String] = []
        for field in fields {
            for source in field.sources {
                let column =
                    switch source {
                    case .column(let c), .pathExtension(let c): c
                    case .related(let link, _, _): link
                    }
                if !columns.contains(column) { columns.append(column) }
            }
        }
        return columns
    }

    /// The related (table, column, link) sources: a change of that column in that table
    /// re-indexes the rows that link to the changed row.
    package var relatedSources: [(table: String, column: String, link: String)] {
        var result: [(table: String, column: String, link: String)] = []
        for field in fields {
            for case .related(let link, let table, let column) in field.sources
            where !result.contains(where: { $0 == (table, column, link) }) {
                result.append((table, column, link))
            }
        }
        return result
    }

    /// The position of the field named `name`.
    package func fieldIndex(_ name: String) -> Int? { fields.firstIndex { $0.name == name } }
}

extension EntityDescription {
    /// The entity's ``ManagedObject/searchIndex`` with its columns; `nil` without one.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` when a key path is not a text attribute or
    ///   to-one relationship of the entity, or the fields are not one to four with distinct
    ///   names of letters, digits and `_`.
    package func resolvedSearchIndex() throws -> ResolvedSearchIndex? {
        if let resolved = resolvedSearch.withLock({ $0 }) { return try resolved.get() }
        let resolved: Result<ResolvedSearchIndex?, PersistenceError>
        do {
            resolved = .success(try resolveSearchIndex())
        } catch let error as PersistenceError {
            resolved = .failure(error)
        } catch {
            resolved = .failure(PersistenceError(.misuse, "The search index of \(name): \(error)"))
        }
        resolvedSearch.withLock { $0 = resolved }
        return try resolved.get()
    }

    private func resolveSearchIndex() throws -> ResolvedSearchIndex? {
        guard let index = objectType.searchIndex else { return nil }
        func column(_ keyPath: AnyKeyPath, of entity: EntityDescription) throws -> String {
            guard let property = entity.property(for: keyPath), property.slot != nil else {
                throw PersistenceError(
                    .misuse, "The search index of \(name) names \(keyPath), which is not an attribute of \(entity.name)"
                )
            }
            return property.name
        }
        guard (1...4).contains(index.fields.count) else {
            throw PersistenceError(.misuse, "The search index of \(name) has \(index.fields.count) fields, not 1 to 4")
        }
        var names = Set<String>()
        let fields = try index.fields.map { field in
            guard let first = field.name.unicodeScalars.first, first.isASCIILetter,
                field.name.unicodeScalars.allSatisfy({ $0.isASCIILetter || ("0"..."9").contains($0) || $0 == "_" }),
                names.insert(field.name).inserted
            else {
                throw PersistenceError(.misuse, "The search index of \(name) has a field named '\(field.name)'")
            }
            return ResolvedSearchIndex.Field(
                name: field.name,
                sources: try field.sources.map { source in
                    switch source.kind {
                    case .attribute(let keyPath): .column(try column(keyPath, of: self))
                    case .pathExtension(let keyPath): .pathExtension(try column(keyPath, of: self))
                    case .related(let link, let destination, let attribute):
                        .related(
                            link: try column(link, of: self), table: destination.entityName,
                            column: try column(attribute, of: destination.entityDescription))
                    }
                })
        }
        return ResolvedSearchIndex(entity: name, fields: fields)
    }
}

extension Unicode.Scalar {
    fileprivate var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
}

/// A search term resolved against its entity's index: the position of its field.
package struct ResolvedSearchTerm: Sendable, Hashable {
    package let words: [String]
    package let isPrefix: Bool
    /// The field's position in the index; `nil` for any field.
    package let field: Int?
    /// The field's name; `nil` for any field.
    package let fieldName: String?
}

/// One finding of ``PersistentContainer/checkSearchIndex(fix:)``: an entity whose search
/// index does not match its rows.
public struct SearchIndexDiscrepancy: Sendable, Hashable, CustomStringConvertible {
    /// The entity's name.
    public var entity: String
    /// What is wrong.
    public var problem: String

    package init(entity: String, problem: String) {
        self.entity = entity
        self.problem = problem
    }

    /// One line naming what was wrong.
    public var description: String { "the search index of \(entity) \(problem)" }
}
