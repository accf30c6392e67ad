import APNSWire
import CampaignIO
import CampaignJSON
import PlanStream
import SendJournal
import GatewayClient
import SendEngine

/// The HTTP/2 provider API: one `POST /3/device/<token>` stream per
/// notification, each answered with a status (``H2Answer``), over
/// ``H2ConnectionWorker``s.
package struct HTTP2Transport: NotificationTransport {
    package let fields: RequestFields
    package let tokens: ProviderTokenSource?
    package let malformed = MalformedRefusals()

    package init(header: PlanHeader, settings: SendSettings, journal: String) throws {
        fields = RequestFields(header: header)
        // A shared directory a fleet keeps its token in: made (0700) by whoever comes first.
        if settings.authKey != nil, let dir = settings.tokenCache { try SecureFile.makeDirectory(dir, mode: 0o700) }
        tokens = try settings.authKey.map { path in
            try ProviderTokenSource(keyPath: path, keyID: settings.keyID ?? "", teamID: settings.teamID ?? "",
                                    cachePath: settings.tokenCache.map { ProviderTokenSource.sharedCachePath(directory: $0, keyID: settings.keyID ?? "") }
                                        ?? "\(journal)/\(ProviderTokenSource.cacheName)")
        }
    }

    /// A queued notification: the token's length (two bytes, big-endian: a
    /// channel id may be longer than 255 bytes), the token, the collapse id's
    /// length and the collapse id (0 and none without a template), the payload.
    @inline(__always)
    package func encode(_ record: PlanReader.RecordView, sentAt: Int64, to bytes: inout [UInt8]) {
        H2QueuedRequest.append(token: record.token, collapseId: record.collapseId ?? UnsafeRawBufferPointer(start: nil, count: 0),
                               payload: record.payload, to: &bytes)
    }

    package var tokenInFrame: @Sendable (UnsafeBufferPointer<UInt8>) -> [UInt8] {
        { frame in Array(frame[H2QueuedRequest.tokenRange(frame)]) }
    }

    package func makeWorker(engine: ConnectionEngine) -> H2ConnectionWorker {
        H2ConnectionWorker(engine: engine, fields: fields, tokens: tokens, malformed: malformed)
    }

    /// Refusals as malformed are final unless the malformed stop said the
    /// server refuses everything; then they stay pending for the resume.
    package func settle(_ shared: SendShared) -> String? {
        if case .malformedRequests? = shared.failureReason { return "\(malformed.count) refusals left pending" }
        let held = malformed.release()
        if !held.isEmpty {
            var outcome = ProofOutcome()
            outcome.failures = held
            shared.record(outcome)
        }
        return nil
    }
}

/// Where the parts of a queued request (``HTTP2Transport/encode(_:sentAt:to:)``) are.
package enum H2QueuedRequest {
    package static let tokenStart = 2

    /// Appends one request: the token's length (two bytes, big-endian), the
    /// token, the collapse id's length (one byte) and the collapse id, the payload.
    @inline(__always)
    package static func append(token: some Collection<UInt8>, collapseId: some Collection<UInt8>, payload: some Collection<UInt8>, to bytes: inout [UInt8]) {
        bytes.append(UInt8(truncatingIfNeeded: token.count >> 8))
        bytes.append(UInt8(truncatingIfNeeded: token.count))
        bytes.append(contentsOf: token)
        bytes.append(UInt8(min(collapseId.count, 255)))
        bytes.append(contentsOf: collapseId.prefix(255))
        bytes.append(contentsOf: payload)
    }

    /// The token's place in `bytes`, which start at index 0 (an array, or a buffer of one).
    @inline(__always)
    package static func tokenRange<C: RandomAccessCollection<UInt8>>(_ bytes: C) -> Range<Int> where C.Index == Int {
        tokenStart..<(tokenStart + (Int(bytes[0]) << 8 | Int(bytes[1])))
    }
}

/// HTTP/2 requests refused as malformed (a 400 not about the token, 404,
/// 405, 413): final only once the server has shown it is sane (it accepted
/// something since), or at the end of a run the malformed stop did not end.
/// A `--gateway` naming some other HTTP/2 server refuses everything, and none
/// of that is final; past ``limit`` in a row the send stops (exit 65).
package final class MalformedRefusals: @unchecked Sendable {
    /// Refusals in a row after which the send stops.
    package static let limit = 100
    private let mutex = Lock()
    private var inARow = 0
    private var held: [SendFailure] = []

    /// Holds `refusal`; returns how many came in a row.
    package func hold(_ refusal: SendFailure) -> Int {
        mutex.lock(); defer { mutex.unlock() }
        inARow += 1
        held.append(refusal)
        return inARow
    }

    /// The server accepted something: the refusals held are final, and the count starts again.
    package func release() -> [SendFailure] {
        mutex.lock(); defer { mutex.unlock() }
        inARow = 0
        defer { held = [] }
        return held
    }

    package var count: Int { mutex.lock(); defer { mutex.unlock() }; return held.count }
}

/// Which pieces of advice a send has logged: each once.
package final class OnceNotes: @unchecked Sendable {
    private let mutex = Lock()
    private var told = Set<String>()

    /// Whether `note` is new (and now told).
    package func first(_ note: String) -> Bool {
        mutex.lock(); defer { mutex.unlock() }
        return told.insert(note).inserted
    }
}

/// What every request of a plan carries besides its token, payload and id.
package struct RequestFields: Sendable {
    /// Header fields in request order after the pseudo-headers (authorization is added per connection).
    package let common: [(name: String, value: String)]
    /// Names the plan in each notification's `apns-id` (its header: the same on every resume).
    package let planIdentity: String
    /// Each record carries its own `apns-collapse-id` (the job's collapseId is a template).
    package let collapsePerRecord: Bool
    /// A scheduled plan: each request's `apns-expiration` counts from its moment
    /// (``PlanHeader/expiry(forMoment:)``).
    package let expiryPerRecord: Bool
    package let header: PlanHeader

    /// A device or a broadcast channel (``H2RequestTarget``).
    package let target: H2RequestTarget
    /// Advice logged once per send, however many connections meet its cause.
    package let toldOnce = OnceNotes()

    package init(header: PlanHeader) {
        var common: [(String, String)] = []
        let broadcast = header.http2?.broadcast == true
        // A broadcast names its bundle id in the path and carries no apns-topic (apns-broadcast.md §2).
        if let topic = header.http2?.topic, !broadcast { common.append(("apns-topic", topic)) }
        target = H2RequestTarget(header: header)
        common.append(("apns-push-type", header.http2?.pushType ?? "alert"))
        common.append(("apns-priority", String(header.priority?.rawValue ?? 10)))
        expiryPerRecord = header.schedule != nil && header.expiry != 0
        if !expiryPerRecord { common.append(("apns-expiration", String(header.expiry))) }
        if let collapse = header.http2?.collapseId { common.append(("apns-collapse-id", collapse)) }
        self.common = common
        planIdentity = String(decoding: header.json.serialized(), as: UTF8.self)
        collapsePerRecord = header.http2?.collapseIdTemplate != nil
        self.header = header
    }
}
