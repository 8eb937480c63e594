import Foundation

/// A message a committed save sent to every container on the store
/// (``SaveEffects/announce(_:payload:)``), as ``PersistentContainer/announcements()``
/// delivers it; or the re-read marker (``isReread``), which says that announcements may
/// have been missed and the receiver should look at the store itself.
///
/// Announcements are for rare events that other hosts must hear of at once (a deletion
/// that stops their work), not for every save: on PostgreSQL, a transaction that notifies
/// commits one at a time with every other notifying transaction of the database.
public struct Announcement: Sendable, Equatable {
    /// What the announcement is about, as its sender named it; ``rereadTopic`` for the
    /// re-read marker.
    public let topic: String
    /// What its sender said, byte for byte (empty for the re-read marker).
    public let payload: String
    /// Whether a save of this process sent it (`false` for the re-read marker).
    public let isFromThisProcess: Bool

    /// The topic of the re-read marker, which no save can announce.
    public static let rereadTopic = "*"

    /// The most bytes (UTF-8) of a topic and payload together: PostgreSQL refuses a
    /// notification of 8,000 bytes or more, and the store adds its own few bytes.
    /// ``SaveEffects/announce(_:payload:)`` refuses more; a sender with more to say
    /// announces less — a topic that makes receivers look at the store — instead.
    public static let maximumBytes = 7_900

    /// An announcement of `topic` with `payload`.
    public init(topic: String, payload: String, isFromThisProcess: Bool) {
        self.topic = topic
        self.payload = payload
        self.isFromThisProcess = isFromThisProcess
    }

    /// The re-read marker: announcements may have been missed (a connection was lost, or the
    /// store cannot tell what changed); look at the store.
    public static let reread = Announcement(topic: rereadTopic, payload: "", isFromThisProcess: false)

    /// Whether this is the re-read marker.
    public var isReread: Bool { topic == Self.rereadTopic }

    /// Whether `topic` and `payload` can be announced (``SaveEffects/announce(_:payload:)``
    /// accepts them): a topic that is not empty and not ``rereadTopic``, no NUL character,
    /// and at most ``maximumBytes`` together.
    public static func fits(topic: String, payload: String) -> Bool {
        (try? check(topic: topic, payload: payload)) != nil
    }

    /// Throws the misuse error `announce` throws for `topic` and `payload`.
    static func check(topic: String, payload: String) throws {
        guard !topic.isEmpty, topic != rereadTopic else {
            throw PersistenceError(
                .misuse,
                "An announcement needs a topic other than \"\(rereadTopic)\" and the empty one; got \"\(topic)\"")
        }
        guard !topic.utf8.contains(0), !payload.utf8.contains(0) else {
            throw PersistenceError(.misuse, "An announcement cannot hold a NUL character (topic \"\(topic)\")")
        }
        let size = topic.utf8.count + payload.utf8.count
        guard size <= maximumBytes else {
            throw PersistenceError(
                .misuse,
                "The announcement \"\(topic)\" is \(size) bytes; at most \(maximumBytes) can be announced "
                    + "(announce less, and let receivers read the rest from the store)")
        }
    }

    /// The process's mark on what it announces (``encoded(sender:)``): random, so that a
    /// receiver tells its own process's announcements from others'.
    package static let thisProcess: String = {
        var generator = SystemRandomNumberGenerator()
        return String(format: "%016llx", generator.next() as UInt64)
    }()

    /// The announcement as one string, for a store that carries text (PostgreSQL's
    /// notifications): `SENDER TOPICBYTES TOPICPAYLOAD`.
    package func encoded(sender: String = thisProcess) -> String {
        "\(sender) \(topic.utf8.count) \(topic)\(payload)"
    }

    /// The announcement `text` encodes (``encoded(sender:)``); `nil` when it is not one.
    package init?(encoded text: String) {
        let bytes = Array(text.utf8)
        guard let space = bytes.firstIndex(of: 0x20),
            let second = bytes[(space + 1)...].firstIndex(of: 0x20),
            let count = Int(String(decoding: bytes[(space + 1)..<second], as: UTF8.self)), count >= 0,
            second + 1 + count <= bytes.count
        else { return nil }
        let sender = String(decoding: bytes[..<space], as: UTF8.self)
        let topicEnd = second + 1 + count
        self.init(
            topic: String(decoding: bytes[(second + 1)..<topicEnd], as: UTF8.self),
            payload: String(decoding: bytes[topicEnd...], as: UTF8.self),
            isFromThisProcess: sender == Self.thisProcess)
    }
}
