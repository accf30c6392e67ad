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
    /// HTTP/2: answers by status and reason ("200", "400 BadDeviceToken").
    public var answers: [String: Int] = [:]

    public init(connection: Int) { self.connection = connection }
}

/// Totals of a simulator run.
public struct SimulatorStatistics: Sendable, Equatable {
    public var connections: [ConnectionStatistics] = []
    /// Connections whose TLS handshake failed (e.g. a client certificate from another CA).
    public var handshakeFailures = 0
    /// Feedback tuples served.
    public var feedbackServed = 0

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
                 "discarded": c.discarded, "ending": c.ending ?? "open"].merging(c.answers.isEmpty ? [:] : ["answers": c.answers]) { $1 }
            },
        ]
        if !answers.isEmpty { object["answers"] = answers }
        return try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    }

    /// A few lines for a terminal.
    public var summary: String {
        if !answers.isEmpty {
            let text = answers.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
            return "simulator (HTTP/2): \(accepted) accepted; answers \(text); \(connections.count) connections (\(handshakeFailures) failed handshakes)"
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
