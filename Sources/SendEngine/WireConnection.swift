#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignTLS

/// The link an open connection reads and writes: TLS over TCP in a send
/// (``TLSConnection``), an in-memory peer in a test. Only the engine calls it.
package protocol ConnectionLink: AnyObject {
    /// What poll(2) watches for this link's bytes.
    var pollDescriptor: Int32 { get }
    /// The protocol the peer agreed to (ALPN), if any.
    var negotiatedProtocol: String? { get }
    func tryRead(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> TLSConnection.IOResult
    /// Writes from `offset` until all is written or it would block; false when the peer has closed.
    func writeAvailable(_ bytes: [UInt8], from offset: inout Int) throws(TLSError) -> Bool
    /// A clean close: the peer reads every byte first.
    func close()
    func abort()
}

extension TLSConnection: ConnectionLink {
    package var pollDescriptor: Int32 { socket.fd }
}

/// Opens an engine's connections (``GatewayDialer`` in a send: TLS, with
/// backoff and a spare; a test's peer in a test).
package protocol LinkDialer: AnyObject {
    /// A connection, or nil after a failed attempt (backed off already) or when the send stops or gives up.
    func connect() -> ConnectionLink?
    /// Starts opening the next connection ahead of need.
    func openSpare()
    /// Closes a spare connection that will not be used.
    func dropSpare()
    /// A connection got an answer about a notification: the next pause starts small.
    func productive()
    /// A connection ended having achieved nothing: pause before the next.
    func backOffAfterFruitlessConnection()
}

/// What a protocol decided about its connection after an event. The engine,
/// which owns the link, carries it out: a protocol never closes a link.
package enum WireVerdict: Equatable, Sendable {
    /// The connection goes on.
    case keep
    /// Its work is done and the gateway answered it (the binary proof's
    /// response, every answer in on an HTTP/2 connection going away): a clean
    /// close, the peer reading every byte first; silence counts from zero.
    case close
    /// It is lost (a protocol error, an answer naming nothing sent, a session
    /// that ended): aborted; what was unanswered on it goes again.
    case lost
    /// It went silent (`reason`): aborted, counted towards the silent
    /// connections in a row that end a send (``ConnectionEngine/silent(_:_:)``).
    case silent(String)
}

/// What comes between a closed connection and the next dial.
package enum AfterClose: Equatable, Sendable {
    /// The next connection at once.
    case dial
    /// The dialer's growing pause (``LinkDialer/backOffAfterFruitlessConnection()``):
    /// the connection achieved nothing.
    case backOff
    /// A pause the protocol chose (watching the stop).
    case pause(seconds: Double)
}

/// A wire protocol's side of one connection (binary: ``ConnectionWorker``,
/// HTTP/2: ``H2ConnectionWorker``): it encodes what may go into the
/// engine's outbound bytes, turns bytes read into outcomes, and decides what
/// its answers, losses and silences mean, returning a ``WireVerdict``. It
/// never reads, writes, waits or closes: the engine does
/// (``ConnectionEngine/run(_:)``).
package protocol WireConnection: AnyObject {
    /// Something can be sent now (a retry or resend, or the queue's frames).
    var hasWork: Bool { get }
    /// When the next notification waiting out a backoff falls due: an idle wait wakes then.
    var nextRetryDue: UInt64? { get }
    /// Starts a turn; false when this connection's work is over (everything
    /// taken is final, or a stop whose grace has run out).
    func beginTurn() -> Bool
    /// A connection is open on `link`; false refuses it (the engine aborts it).
    func opened(_ link: ConnectionLink) -> Bool
    /// Appends what may go now to ``ConnectionEngine/outbound``: `.keep`, or
    /// `.lost` when the connection broke doing so.
    func frame() -> WireVerdict
    /// Whether more bytes may still join the unwritten ones before they are
    /// written (else they are written at once, without the batch delay).
    var moreCanJoin: Bool { get }
    /// Whether the turn's wait also wakes when frames reach the queue.
    var watchesQueue: Bool { get }
    /// The protocol's own wake-ups (a proof due, a retry, a pause's end), monotonic.
    var nextWakeUp: UInt64? { get }
    /// The engine waited from `since` until now (for the pool's gauge).
    func waited(since: UInt64)
    /// Bytes read: `.keep` reads on; anything else ends this turn's reading.
    func received(_ bytes: ArraySlice<UInt8>) -> WireVerdict
    /// The peer closed the connection, or reading or writing it failed: what
    /// is unanswered goes again. The engine aborts the link next.
    func lost()
    /// The connection went silent (``ConnectionEngine/silent(_:_:)``): as
    /// lost, without blaming a notification. The engine aborts the link next.
    func lostSilently()
    /// Every outbound byte has been written: true when the written bytes may
    /// be forgotten (nothing will be replayed from them).
    func wroteAll() -> Bool
    /// After the turn's reads and writes: the protocol's timers (proofs, answers, PINGs, going away).
    func checkTimers() -> WireVerdict
    /// The engine is about to close the open connection: the protocol lets
    /// go of what it held for it (its session, its window, its gauge).
    func closing()
    /// The connection is closed (not at the loop's end): what comes before the next dial.
    func closed() -> AfterClose
    /// The loop is over: whether the connection may close cleanly (nothing
    /// unproven or unanswered on it); what is unanswered stays pending.
    func end() -> Bool
}

/// One connection's life as the engine sees it: the link and the bytes on
/// their way exist only while it is open, so closing drops them at once.
package enum ConnectionState {
    case closed
    case open(OpenConnection)

    /// What exists only while a connection is open.
    package struct OpenConnection {
        package let link: ConnectionLink
        /// Bytes to write, or written: the protocol may keep written bytes
        /// (the binary interface replays its window from them).
        package var outbound: [UInt8] = []
        /// How many of ``outbound`` have been written.
        package var written = 0
        /// When the oldest unwritten bytes were framed (for `--batch-delay-ms`).
        package var batchStartedAt: UInt64?
        /// When a write last moved bytes (or the connection opened).
        package var lastWriteProgress: UInt64
        /// When bytes were last read (or the connection opened).
        package var lastReadAt: UInt64
        /// When this connection's first bytes were written.
        package var firstWriteAt: UInt64?
    }
}

