import APNSWire
import SendJournal

/// A notification written (or about to be written) on the current connection
/// and not yet proven accepted.
package struct InFlight: Equatable {
    package var seq: UInt64
    package var shard: Int32
    package var ordinal: Int32
    package var identifier: UInt32
    /// Where its packet sits in the connection's sent bytes.
    package var start: Int
    package var end: Int
    /// Refusals so far (status 1, 255, undefined codes): the exponent of its
    /// backoff, and the attempts a report names. Saturates; never a limit.
    package var attempts: UInt8
    /// A proof of acceptance, not a notification of the plan.
    package var isProof: Bool = false
    /// A scheduled notification's moment and its device's zone (the release rule asks them again before a replay), or 0 and -1.
    package var moment: Int64 = 0
    package var zone: Int32 = -1
    /// Written on a connection that was lost before it was proven: counted
    /// once as a possible duplicate, however often that happens to it.
    package var risked = false

    @inlinable
    package init(seq: UInt64, shard: Int32, ordinal: Int32, identifier: UInt32, start: Int, end: Int, attempts: UInt8,
                 isProof: Bool = false, moment: Int64 = 0, zone: Int32 = -1, risked: Bool = false) {
        (self.seq, self.shard, self.ordinal, self.identifier, self.start, self.end) = (seq, shard, ordinal, identifier, start, end)
        (self.attempts, self.isProof, self.moment, self.zone, self.risked) = (attempts, isProof, moment, zone, risked)
    }
}

/// A notification to send again, with its packet exactly as it was encoded.
package struct Resend: Equatable {
    package var seq: UInt64
    package var shard: Int32
    package var ordinal: Int32
    package var identifier: UInt32
    package var packet: [UInt8]
    package var attempts: UInt8
    package var moment: Int64 = 0
    package var zone: Int32 = -1
    /// Already counted as a possible duplicate (``InFlight/risked``).
    package var risked = false

    package init(_ e: InFlight, packets: [UInt8]) {
        seq = e.seq
        shard = e.shard
        ordinal = e.ordinal
        identifier = e.identifier
        packet = Array(packets[e.start..<e.end])
        attempts = e.attempts
        (moment, zone, risked) = (e.moment, e.zone, e.risked)
    }

    /// As the queue held it (for the release rule's second asking).
    package var frame: QueuedFrame { QueuedFrame(seq: seq, shard: shard, ordinal: ordinal, start: 0, count: packet.count, moment: moment, zone: zone) }
}

/// What a proof (or a presumption) settled, to journal in one go.
package struct ProofOutcome {
    /// Ordinals proven accepted, per shard.
    package var acceptedOrdinals: [Int32: [Int]] = [:]
    /// Ordinals presumed delivered (simple format), per shard.
    package var presumedOrdinals: [Int32: [Int]] = [:]
    package var accepted = 0
    package var presumed = 0
    /// Refused for good; those with `unregisteredAt` go into the suppression store too.
    package var failures: [SendFailure] = []
    /// Broadcasts accepted: the ids to quote to Apple, journaled beside the proof.
    package var answerIDs: [JournalRecord.AnswerIDs] = []

    /// `e` failed for good; `attempts` is how many times it was sent (by
    /// default, its refusals so far and this one).
    package mutating func fail(_ e: InFlight, status: ErrorResponse.Status, token: [UInt8], gaveUp: Bool, attempts: Int? = nil) {
        failures.append(SendFailure(seq: e.seq, shard: Int(e.shard), ordinal: Int(e.ordinal), cause: .binary(status),
                                    token: token, gaveUp: gaveUp, attempts: attempts ?? Int(e.attempts) + 1))
    }

    package init() {}
}

/// The unproven window of one connection: every notification written on it
/// since it opened, in order, and at most one proof after them.
///
/// An error response splits it (``resolve(_:packets:format:)``): before the
/// named notification, accepted; the named one, final when the answer is
/// about it (status 8, 2–7, 128) and otherwise the gateway's trouble, sent
/// again after a backoff; after it, discarded by the gateway and sent again,
/// exactly.
/// A connection lost without a response proves nothing
/// (``lost(written:)``). Pure: no I/O, so tests drive it with packets alone.
package struct UnprovenWindow {
    // Set only in this module; usable from inline for `append`, called once per notification from the binary worker's module.
    @usableFromInline package internal(set) var entries: [InFlight] = []
    /// Notifications in the window (the proof not counted).
    @usableFromInline package internal(set) var notificationCount = 0
    /// Whether a proof has been appended (and so nothing more may be).
    package private(set) var hasProof = false

    package var isEmpty: Bool { entries.isEmpty }

    package init() { entries.reserveCapacity(1024) }

    @inlinable
    package mutating func append(_ entry: InFlight) {
        entries.append(entry)
        notificationCount += 1
    }

    package mutating func appendProof(identifier: UInt32, start: Int, end: Int) {
        entries.append(InFlight(seq: 0, shard: -1, ordinal: -1, identifier: identifier, start: start, end: end,
                                attempts: 0, isProof: true))
        hasProof = true
    }

    package mutating func removeAll() {
        entries.removeAll(keepingCapacity: true)
        notificationCount = 0
        hasProof = false
    }

    /// What an error response made of the window.
    package struct Resolution {
        package var outcome = ProofOutcome()
        /// To send again before anything else, in order: the discarded
        /// notifications after the named one (the gateway never processed them).
        package var resend: [Resend] = []
        /// The named notification, refused for the gateway's own trouble
        /// (status 1, 255, a code no guide defines): to send again after a
        /// backoff, never final; its `attempts` counts this refusal.
        package var retryLater: [Resend] = []
        /// Refused with a status that means a bug in the plan or the encoder (2–7, 128).
        package var refusedAsMalformed: [(seq: UInt64, status: ErrorResponse.Status)] = []
        package var wasShutdown = false
    }

    /// Splits the window at the notification `response` names. Nil when it
    /// names an identifier never sent on this connection (the connection is
    /// then as good as lost). A shutdown (status 10) names the last accepted
    /// notification, or identifier 0 when none was.
    package func resolve(_ response: ErrorResponse, packets: [UInt8], format: NotificationFormat) -> Resolution? {
        let named = entries.lastIndex { $0.identifier == response.identifier }
        var result = Resolution()
        if response.status == .shutdown {
            guard let end = named.map({ $0 + 1 }) ?? (response.identifier == 0 ? 0 : nil) else { return nil }
            accept(entries[..<end], into: &result.outcome)
            result.resend = resends(entries[end...], packets: packets)
            result.wasShutdown = true
            return result
        }
        guard let i = named else { return nil }
        accept(entries[..<i], into: &result.outcome)
        let entry = entries[i]
        if !entry.isProof {
            let token = Array(packets[NotificationEncoder.deviceTokenRange(inPacket: packets[entry.start..<entry.end], format: format)])
            switch response.status {
            case .invalidToken:
                result.outcome.fail(entry, status: response.status, token: token, gaveUp: false)
            case .missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize, .invalidTopicSize,
                 .invalidPayloadSize, .protocolError:
                result.refusedAsMalformed.append((entry.seq, response.status))
                result.outcome.fail(entry, status: response.status, token: token, gaveUp: false)
            default:
                // Processing errors, "unknown" and codes the guides do not
                // define say nothing about the notification: the gateway's
                // state, so never final, however often (a gateway that keeps
                // failing ends the send by the outage limit, resumable).
                var again = entry
                again.attempts = again.attempts == .max ? .max : again.attempts + 1
                result.retryLater = [Resend(again, packets: packets)]
            }
        }
        result.resend = resends(entries[(i + 1)...], packets: packets)
        return result
    }

    /// The notifications of the window, for a connection that ended without
    /// an answer: none is proven; those that start before byte `written`
    /// (`writtenCount` of them) may have reached the gateway, and sent again
    /// they may be duplicates: `risked` counts those not counted before (each
    /// notification once, however many connections it is lost with), and
    /// they come back marked.
    package func lost(written: Int) -> (notifications: [InFlight], writtenCount: Int, risked: Int) {
        var (wasWritten, newlyRisked) = (0, 0)
        let notifications = entries.filter { !$0.isProof }.map { e -> InFlight in
            guard e.start < written else { return e }
            wasWritten += 1
            guard !e.risked else { return e }
            var risked = e
            risked.risked = true
            newlyRisked += 1
            return risked
        }
        return (notifications, wasWritten, newlyRisked)
    }

    /// Simple format: there are no error responses, so what was written is
    /// presumed delivered (of a connection lost mid-batch, the notifications
    /// that end within its first `written` bytes).
    package func presumed(written: Int = .max) -> ProofOutcome {
        var outcome = ProofOutcome()
        for e in entries where !e.isProof && e.end <= written {
            outcome.presumedOrdinals[e.shard, default: []].append(Int(e.ordinal))
            outcome.presumed += 1
        }
        return outcome
    }

    private func accept(_ accepted: ArraySlice<InFlight>, into outcome: inout ProofOutcome) {
        // Bucketed by shard in an array, then moved into the outcome: a
        // dictionary operation per notification cost more than the rest of the proof.
        var maxShard: Int32 = -1
        for e in accepted where e.shard > maxShard { maxShard = e.shard }
        guard maxShard >= 0 else { return }
        var byShard = [[Int]](repeating: [], count: Int(maxShard) + 1)
        for e in accepted where !e.isProof { byShard[Int(e.shard)].append(Int(e.ordinal)) }
        for (shard, ordinals) in byShard.enumerated() where !ordinals.isEmpty {
            outcome.acceptedOrdinals[Int32(shard), default: []] += ordinals
            outcome.accepted += ordinals.count
        }
    }

    private func resends(_ discarded: ArraySlice<InFlight>, packets: [UInt8]) -> [Resend] {
        discarded.filter { !$0.isProof }.map { Resend($0, packets: packets) }
    }
}

/// Notifications to send again on the next connection, first in line.
package struct ResendQueue {
    private var items: [Resend] = []
    private var head = 0

    package var isEmpty: Bool { head == items.count }
    package var count: Int { items.count - head }

    /// Puts `fresh` before everything already waiting, in its order.
    package mutating func pushFront(_ fresh: [Resend]) {
        guard !fresh.isEmpty else { return }
        items = fresh + items[head...]
        head = 0
    }

    package mutating func popFirst() -> Resend? {
        guard head < items.count else { return nil }
        let r = items[head]
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        }
        return r
    }

    package init() {}
}

/// Which notification headed connections lost with nothing accepted: one
/// that heads 5 in a row may be what kills them, and is parked: not sent
/// again in this run, so it cannot loop for ever, and not final either (a
/// lost connection says nothing certain about a notification): the run
/// ends with 69 and `--resume` sends it.
package struct DropStrikes {
    private var strikes: [UInt64: Int] = [:]
    package static let parkAfter = SendFailure.quarantineAfterLostConnections

    /// Counts a lost connection headed by `seq`; true when it is the fifth
    /// (and `seq` is then forgotten).
    package mutating func strike(_ seq: UInt64) -> Bool {
        let n = (strikes[seq] ?? 0) + 1
        if n >= Self.parkAfter {
            strikes[seq] = nil
            return true
        }
        strikes[seq] = n
        return false
    }

    /// Something was accepted: the run of lost connections is broken.
    package mutating func clear() {
        if !strikes.isEmpty { strikes.removeAll() }
    }

    package init() {}
}

/// How often one notification may be lost with its HTTP/2 connection
/// before a run stops sending it.
public enum H2NotificationLimits {
    public static let maxLosses = 3
}
