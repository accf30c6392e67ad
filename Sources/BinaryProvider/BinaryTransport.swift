#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import PlanStream
import SendEngine

/// The binary provider interface: commands 0, 1 and 2 over TLS.
package struct BinaryTransport: NotificationTransport {
    package let encoder: PlanFrameEncoder

    package init(header: PlanHeader) {
        encoder = PlanFrameEncoder(header: header)
    }

    /// An error response replays the connection's own stream: each connection has its own queue and shards.
    package var sharesOneQueue: Bool { false }

    package func queue(forShard shard: Int, parts: Int, queues: Int) -> Int {
        Self.connection(forShard: shard, parts: parts, connections: queues)
    }

    package var warning: String? {
        encoder.format == .simple
            ? "the simple format (command 0) has no error responses: failures cannot be detected, and sent notifications are only presumed delivered"
            : nil
    }

    @inline(__always)
    package func encode(_ record: PlanReader.RecordView, sentAt: Int64, to bytes: inout [UInt8]) {
        encoder.append(record, sentAt: sentAt, to: &bytes)
    }

    /// The connection that sends `shard` of a plan that is one of `parts`
    /// parts (1 for a whole plan): a part of `plan --parts N` holds shards k,
    /// k+N, k+2N…, so it is their place in the part that spreads them over
    /// the connections (the shard itself would put a whole part on one
    /// connection whenever N and the connections share a factor).
    package static func connection(forShard shard: Int, parts: Int, connections: Int) -> Int {
        (shard / max(1, parts)) % connections
    }

    package var tokenInFrame: @Sendable (UnsafeBufferPointer<UInt8>) -> [UInt8] {
        let format = encoder.format
        return { frame in
            let bytes = Array(frame)
            return Array(bytes[NotificationEncoder.deviceTokenRange(inPacket: bytes[...], format: format)])
        }
    }

    package func makeWorker(engine: ConnectionEngine) -> ConnectionWorker {
        ConnectionWorker(engine: engine, format: encoder.format)
    }
}

/// Encodes plan records as the plan's header says (format, expiry,
/// priority); the identifier is the record's seq, truncated to 32 bits.
public struct PlanFrameEncoder: Sendable {
    public let format: NotificationFormat
    public let header: PlanHeader
    public let priority: NotificationPriority?

    /// `header` must be a binary plan's.
    public init(header: PlanHeader) {
        guard case .binary(let format) = header.wire else { preconditionFailure("an h2 plan goes to the HTTP/2 transport") }
        self.format = format
        self.header = header
        priority = header.priority
    }

    /// Appends the record's notification to `bytes`.
    @inline(__always)
    /// `sentAt`: the send's clock as the reader releases the record (a scheduled record's expiry counts from it).
    public func append(_ record: PlanReader.RecordView, sentAt: Int64, to bytes: inout [UInt8]) {
        let identifier = UInt32(truncatingIfNeeded: record.seq)
        let expiry = record.at == nil ? header.expiry : header.expiry(forMoment: record.at, sentAt: sentAt)
        switch format {
        case .simple:
            NotificationEncoder.appendSimple(token: record.token, payload: record.payload, to: &bytes)
        case .enhanced:
            NotificationEncoder.appendEnhanced(identifier: identifier, expiry: expiry, token: record.token,
                                               payload: record.payload, to: &bytes)
        case .frame:
            NotificationEncoder.appendFrame(token: record.token, payload: record.payload, identifier: identifier,
                                            expiry: expiry, priority: priority, to: &bytes)
        }
    }
}
