#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import PlanStream

/// How notifications reach a gateway: the one seam between the sender, which
/// knows what to send and what became of it (the plan, the queues, the
/// journal, the rate, progress and outcomes, all transport-neutral), and a
/// wire protocol, which knows only how bytes reach a gateway and what its
/// answers mean.
///
/// The sender encodes each plan record with ``encode(_:sentAt:to:)`` on its reading
/// thread and queues it (``sharesOneQueue``: in the one queue all connections
/// share; otherwise for the connection ``queue(forShard:parts:queues:)``
/// names); the ``ConnectionPool`` runs one worker per connection, each the
/// protocol around a ``ConnectionEngine``; a worker reports outcomes through
/// ``SendShared`` (``SendShared/record(_:)``) and leaves its queue when it
/// ends; ``settle(_:)`` closes the protocol's books. A third protocol is a
/// transport and a worker, and one line in ``Sender/run(plan:)``.
protocol NotificationTransport: Sendable {
    associatedtype Worker: GatewayConnectionWorker

    /// Whether every connection draws from one queue (each notification
    /// stands alone, and the pool may grow), or each has its own.
    var sharesOneQueue: Bool { get }

    /// Without ``sharesOneQueue``: the queue (connection) of `shard` of a plan
    /// that is one of `parts` parts, among `queues`.
    func queue(forShard shard: Int, parts: Int, queues: Int) -> Int

    /// What the operator must know before this send starts, if anything.
    var warning: String? { get }

    /// Appends what a connection sends for `record`.
    func encode(_ record: PlanReader.RecordView, sentAt: Int64, to bytes: inout [UInt8])

    /// The device token inside `frame`, as ``encode(_:sentAt:to:)`` laid it out.
    var tokenInFrame: @Sendable (UnsafeBufferPointer<UInt8>) -> [UInt8] { get }

    /// The wire protocol around a connection's engine.
    func makeWorker(engine: ConnectionEngine) -> Worker

    /// Every connection has ended: journals what the protocol still holds
    /// as final, or leaves it pending and says so (a note for the report).
    func settle(_ shared: SendShared) -> String?
}

extension NotificationTransport {
    var sharesOneQueue: Bool { true }
    func queue(forShard shard: Int, parts: Int, queues: Int) -> Int { 0 }
    var warning: String? { nil }
    func settle(_ shared: SendShared) -> String? { nil }
}

/// One connection of a transport, run on a thread of its own: its wire
/// protocol, run by its engine.
protocol GatewayConnectionWorker: WireConnection, Sendable {
    var engine: ConnectionEngine { get }
    /// What the connection tells the pool about itself (HTTP/2; nil for a pool of fixed size).
    var gauge: ConnectionGauge? { get }
    /// The pool no longer needs this connection: no new work; it finishes what it holds and ends.
    func retire()
}

extension GatewayConnectionWorker {
    var gauge: ConnectionGauge? { nil }

    /// Sends until its queue is finished and every notification taken from
    /// it is final, or the send stops or gives up; then leaves its queue.
    func run() { engine.run(self) }
}

/// The binary provider interface: commands 0, 1 and 2 over TLS.
struct BinaryTransport: NotificationTransport {
    let encoder: PlanFrameEncoder

    init(header: PlanHeader) {
        encoder = PlanFrameEncoder(header: header)
    }

    /// An error response replays the connection's own stream: each connection has its own queue and shards.
    var sharesOneQueue: Bool { false }

    func queue(forShard shard: Int, parts: Int, queues: Int) -> Int {
        Self.connection(forShard: shard, parts: parts, connections: queues)
    }

    var warning: String? {
        encoder.format == .simple
            ? "the simple format (command 0) has no error responses: failures cannot be detected, and sent notifications are only presumed delivered"
            : nil
    }

    @inline(__always)
    func encode(_ record: PlanReader.RecordView, sentAt: Int64, to bytes: inout [UInt8]) {
        encoder.append(record, sentAt: sentAt, to: &bytes)
    }

    /// The connection that sends `shard` of a plan that is one of `parts`
    /// parts (1 for a whole plan): a part of `plan --parts N` holds shards k,
    /// k+N, k+2N…, so it is their place in the part that spreads them over
    /// the connections (the shard itself would put a whole part on one
    /// connection whenever N and the connections share a factor).
    static func connection(forShard shard: Int, parts: Int, connections: Int) -> Int {
        (shard / max(1, parts)) % connections
    }

    var tokenInFrame: @Sendable (UnsafeBufferPointer<UInt8>) -> [UInt8] {
        let format = encoder.format
        return { frame in
            let bytes = Array(frame)
            return Array(bytes[NotificationEncoder.deviceTokenRange(inPacket: bytes[...], format: format)])
        }
    }

    func makeWorker(engine: ConnectionEngine) -> ConnectionWorker {
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
