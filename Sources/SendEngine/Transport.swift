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
/// module with a transport and a worker, and one case in `makeTransport`
/// (CampaignSend's TransportChoice.swift).
package protocol NotificationTransport: Sendable {
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
    package var sharesOneQueue: Bool { true }
    package func queue(forShard shard: Int, parts: Int, queues: Int) -> Int { 0 }
    package var warning: String? { nil }
    package func settle(_ shared: SendShared) -> String? { nil }
}

/// One connection of a transport, run on a thread of its own: its wire
/// protocol, run by its engine.
package protocol GatewayConnectionWorker: WireConnection, Sendable {
    var engine: ConnectionEngine { get }
    /// What the connection tells the pool about itself (HTTP/2; nil for a pool of fixed size).
    var gauge: ConnectionGauge? { get }
    /// The pool no longer needs this connection: no new work; it finishes what it holds and ends.
    func retire()
}

extension GatewayConnectionWorker {
    package var gauge: ConnectionGauge? { nil }

    /// Sends until its queue is finished and every notification taken from
    /// it is final, or the send stops or gives up; then leaves its queue.
    package func run() { engine.run(self) }
}
