import APNSWire
import Foundation

/// What one gateway connection saw.
public struct ConnectionStatistics: Sendable, Equatable {
    /// 1 for the first connection accepted, then 2, 3, …
    public var connection: Int
    public var accepted = 0
    /// Notifications refused, by status code.
    public var rejected: [UInt8: Int] = [:]
    /// Complete notifications received after a refused one and thrown away.
    public var discarded = 0
    /// How the connection ended; nil while open.
    public var ending: String? = nil
    /// HTTP/2: answers by status and reason ("200", "400 BadDeviceToken"),
    /// as written to the client.
    public var answers: [String: Int] = [:]
    /// HTTP/2: answers made and dropped with the connection (`--drop-every`)
    /// before they were written: the client never got them, though what
    /// they accepted reached the device (`accepted`).
    public var answersNeverWritten = 0
    /// HTTP/2: broadcasts accepted (`/4/broadcasts`), apart from device pushes.
    public var broadcasts = 0
    /// HTTP/2: broadcasts' answers by status and reason.
    public var broadcastAnswers: [String: Int] = [:]

    public init(connection: Int) { self.connection = connection }
}

/// Totals of a simulator run.
public struct SimulatorStatistics: Sendable, Equatable {
    public var connections: [ConnectionStatistics] = []
    /// Connections whose TLS handshake failed (e.g. a client certificate from another CA).
    public var handshakeFailures = 0
    /// Feedback tuples served.
    public var feedbackServed = 0
    /// The management listener's answers by status and reason, over its connections.
    public var managementAnswers: [String: Int] = [:]
    public var managementConnections = 0
    /// Channels created, and of them deleted (filled in from the channel store).
    public var channelsCreated = 0
    public var channelsDeleted = 0
    /// `--token-min-interval`: different provider tokens taken (filled in from the registry); nil without it.
    public var providerTokens: Int?

    public init(connections: [ConnectionStatistics] = [], handshakeFailures: Int = 0, feedbackServed: Int = 0) {
        (self.connections, self.handshakeFailures, self.feedbackServed) = (connections, handshakeFailures, feedbackServed)
    }

    public var accepted: Int { connections.reduce(0) { $0 + $1.accepted } }
    public var discarded: Int { connections.reduce(0) { $0 + $1.discarded } }
    public var rejected: [UInt8: Int] {
        connections.reduce(into: [:]) { total, c in total.merge(c.rejected, uniquingKeysWith: +) }
    }
    /// HTTP/2: answers by status and reason, over every connection.
    public var answers: [String: Int] {
        connections.reduce(into: [:]) { total, c in total.merge(c.answers, uniquingKeysWith: +) }
    }
    public var answersNeverWritten: Int { connections.reduce(0) { $0 + $1.answersNeverWritten } }
    /// HTTP/2: broadcasts accepted, over every connection.
    public var broadcasts: Int { connections.reduce(0) { $0 + $1.broadcasts } }
    public var broadcastAnswers: [String: Int] {
        connections.reduce(into: [:]) { total, c in total.merge(c.broadcastAnswers, uniquingKeysWith: +) }
    }

    /// The totals as JSON, as `--stats` writes them.
    public func json() -> Data {
        func rejectedObject(_ r: [UInt8: Int]) -> [String: Int] {
            Dictionary(uniqueKeysWithValues: r.map { (String($0.key), $0.value) })
        }
        var object: [String: Any] = [
            "accepted": accepted,
            "rejected": rejectedObject(rejected),
            "discarded": discarded,
            "connections": connections.count,
            "handshake_failures": handshakeFailures,
            "feedback_served": feedbackServed,
            "per_connection": connections.map { c -> [String: Any] in
                ["conn": c.connection, "accepted": c.accepted, "rejected": rejectedObject(c.rejected),
                 "discarded": c.discarded, "ending": c.ending ?? "open"].merging(c.answers.isEmpty && c.answersNeverWritten == 0 ? [:] : ["answers": c.answers]) { $1 }
                    .merging(c.broadcastAnswers.isEmpty ? [:] : ["broadcasts": c.broadcasts, "broadcast_answers": c.broadcastAnswers]) { $1 }
                    .merging(c.answersNeverWritten == 0 ? [:] : ["answers_never_written": c.answersNeverWritten]) { $1 }
            },
        ]
        // An HTTP/2 run's answers, even none written (every one dropped with its connection).
        if !answers.isEmpty || answersNeverWritten > 0 { object["answers"] = answers }
        if answersNeverWritten > 0 { object["answers_never_written"] = answersNeverWritten }
        if let providerTokens { object["provider_tokens"] = providerTokens }
        // Broadcasts and channel management only when used: a device-only run's file is as before.
        if !broadcastAnswers.isEmpty || managementConnections > 0 {
            object["broadcasts"] = broadcasts
            object["broadcast_answers"] = broadcastAnswers
            object["management_answers"] = managementAnswers
            object["management_connections"] = managementConnections
            object["channels_created"] = channelsCreated
            object["channels_deleted"] = channelsDeleted
        }
        return try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    }

    /// A few lines for a terminal.
    public var summary: String {
        func list(_ answers: [String: Int]) -> String {
            answers.isEmpty ? "none" : answers.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
        }
        if !broadcastAnswers.isEmpty || managementConnections > 0 {
            return """
            simulator (HTTP/2): \(accepted) device pushes accepted; answers \(list(answers)); \(broadcasts) broadcasts accepted; \
            answers \(list(broadcastAnswers)); channel management answers \(list(managementAnswers)) (\(channelsCreated) channels created, \
            \(channelsDeleted) deleted); \(connections.count) device connections (\(handshakeFailures) failed handshakes), \
            \(managementConnections) management connections
            """
        }
        if !answers.isEmpty {
            return "simulator (HTTP/2): \(accepted) accepted; answers \(list(answers)); \(connections.count) connections (\(handshakeFailures) failed handshakes)"
        }
        let rejectedText = rejected.isEmpty ? "none"
            : rejected.sorted { $0.key < $1.key }.map { status, count in
                // A sender proves what was accepted by sending a notification the
                // gateway must refuse (campaign's have a token of invalid size).
                let note = status == ErrorResponse.Status.invalidTokenSize.rawValue ? ", most of them senders' proofs of acceptance, refused on purpose" : ""
                return "status \(status) (\(ErrorResponse.Status(rawValue: status).meaning)\(note)): \(count)"
            }.joined(separator: ", ")
        return """
        simulator: \(accepted) accepted, rejected \(rejectedText), \(discarded) discarded, \
        \(connections.count) connections (\(handshakeFailures) failed handshakes), \(feedbackServed) feedback tuples served
        """
    }
}
