import Foundation

/// A message a committed save sent to every container on the store
/// (``SaveEffects/announce(_:payload:)``), as ``PersistentContainer/announcements()``
/// delivers it; or one of two markers of the stream itself:
///
/// - the interruption marker (``isInterruption``): from now on, announcements are not
///   delivered (the store lost the means to hear them) — until the next re-read marker;
///   meanwhile, look at the store yourself (poll);
/// - the re-read marker (``isReread``): announcements may have been missed, look at the store
///   itself; and, after an interruption, announcements are delivered again (stop polling).
///
/// A receiver that relies on announcements to learn of changes is "listening" from its
/// stream's start until an interruption marker, and again from the next re-read marker.
///
/// Announcements are for rare events that other hosts must hear of at once (a deletion
/// that stops their work), not for every save: on PostgreSQL, a transaction that notifies
/// commits one at a time with every other notifying transaction of the database.
public struct Announcement: Sendable, Equatable {
    /// What the announcement is about, as its sender named it; ``rereadTopic`` for the
    /// re-read marker, ``interruptionTopic`` for the interruption marker.
    public let topic: String
    /// What its sender said, byte for byte (empty for the markers).
    public let payload: String
    /// Whether a save of this process sent it (`false` for the markers).
    public let isFromThisProcess: Bool

    /// The topic of the re-read marker, which no save can announce.
    public static let rereadTopic = "*"
    /// The topic of the interruption marker, which no save can announce.
    public static let interruptionTopic = "-"

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
    /// store cannot tell what changed); look at the store. After an interruption marker, it
    /// also says that announcements are delivered again.
    public static let reread = Announcement(topic: rereadTopic, payload: "", isFromThisProcess: false)

    /// The interruption marker: the store cannot deliver other containers' announcements
    /// from now until the re-read marker that ends the interruption (on PostgreSQL, the
    /// `LISTEN` connection is lost or could not be made; on SQLite, the store's `-wal`
    /// cannot be watched, or its watch failed, for good). A stream asked for during an
    /// interruption begins with it. Meanwhile, a receiver that must learn of other
    /// containers' changes looks at the store itself.
    public static let interruption = Announcement(topic: interruptionTopic, payload: "", isFromThisProcess: false)

    /// Whether this is the re-read marker.
    public var isReread: Bool { topic == Self.rereadTopic }

    /// Whether this is the interruption marker.
    public var isInterruption: Bool { topic == Self.interruptionTopic }

    /// Whether `topic` and `payload` can be announced (``SaveEffects/announce(_:payload:)``
    /// accepts them): a topic that is not empty, ``rereadTopic`` or ``interruptionTopic``, no
    /// NUL character, and at most ``maximumBytes`` together.
    public static func fits(topic: String, payload: String) -> Bool {
        (try? check(topic: topic, payload: payload)) != nil
    }

    /// Throws the misuse error `announce` throws for `topic` and `payload`.
    static func check(topic: String, payload: String) throws {
        guard !topic.isEmpty, topic != rereadTopic, topic != interruptionTopic else {
            throw PersistenceError(
                .misuse,
                "An announcement needs a topic other than \"\(rereadTopic)\", \"\(interruptionTopic)\" and the "
                    + "empty one; got \"\(topic)\"")
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

    /// The announcement `text` encodes (``encoded(sender:)``); `nil` when it is not one (a
    /// marker's topic included).
    package init?(encoded text: String) {
        let bytes = Array(text.utf8)
        guard let space = bytes.firstIndex(of: 0x20),
            let second = bytes[(space + 1)...].firstIndex(of: 0x20),
            let count = Int(String(decoding: bytes[(space + 1)..<second], as: UTF8.self)), count >= 0,
            second + 1 + count <= bytes.count
        else { return nil }
        let sender = String(decoding: bytes[..<space], as: UTF8.self)
        let topicEnd = second + 1 + count
        let topic = String(decoding: bytes[(second + 1)..<topicEnd], as: UTF8.self)
        // A marker's topic, which no save announces (a notification sent by hand): not one.
        guard topic != Self.rereadTopic, topic != Self.interruptionTopic else { return nil }
        self.init(
            topic: topic,
            payload: String(decoding: bytes[topicEnd...], as: UTF8.self),
            isFromThisProcess: sender == Self.thisProcess)
    }
}
