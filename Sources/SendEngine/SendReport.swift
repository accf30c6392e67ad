import APNSWire
import CampaignJSON
import CampaignTLS
import LocalTime
import SendJournal
import GatewayClient

/// Why a send stopped before its end.
public enum SendFailureReason: Error, Sendable, CustomStringConvertible {
    /// A certificate, key or trust problem: retrying cannot help.
    case credentials(TLSError)
    /// The gateway could not be reached after repeated attempts.
    case unreachable(TLSError)
    /// The gateway keeps ending connections without accepting anything.
    case unproductive(connections: Int)
    /// A binary plan's gateway answered with an HTTP/2 frame: the provider
    /// API's port (`gateway` as given), not the binary interface's.
    case speaksHTTP2(gateway: String)
    /// HTTP/2: APNs refused a credential (a 403, or TopicDisallowed): the sentence says which and what to do.
    case credentialRefused(String)
    /// HTTP/2: this many requests in a row were refused as malformed (a bug in the plan or in us).
    case malformedRequests(count: Int, last: String)
    /// The gateway kept failing (HTTP/2: 5xx, 429, resets, connections that
    /// achieved nothing; binary: status 1, 255, undefined codes) for this
    /// long with nothing accepted: resumable.
    case serverTrouble(seconds: Int, count: Int, last: String)
    /// Notifications were on too many lost connections each (HTTP/2: open on
    /// 3; binary: at the head of 5 in a row); not sent again in this run
    /// (possible duplicates), not final, left for `--resume`.
    case notificationsParked(count: Int)
    /// HTTP/2: APNs refused for the account's state at Apple (a broadcast's
    /// FeatureNotEnabled): the sentence says what to change; resumable.
    case accountState(String)
    /// HTTP/2: APNs refuses the provider token as one update too many (429
    /// TooManyProviderTokenUpdates): another token of the key was made within
    /// 20 minutes, by another process using the key; resumable.
    case providerTokenRefused(keyID: String)
    /// `--ledger`: another send of the frequencyCap's scope held the ledger's
    /// claim lock too long (a stopped or hung process): nothing is sent
    /// unclaimed, so the send stops; resumable.
    case ledgerBusy(lock: String, seconds: Int)

    public var description: String { sentence(journal: nil) }

    /// The sentence, its resume command naming `journal` when given.
    public func sentence(journal: String?) -> String {
        let resume = "`campaign send --resume\(journal.map { " \($0)" } ?? "")`"
        return switch self {
        case .credentials(let e): "\(e)"
        case .unreachable(let e): "Giving up after repeated connection failures: \(e)\(journal.map { " (`campaign send --resume \($0)` goes on once the gateway is reachable)" } ?? "")"
        case .unproductive(let n):
            "Giving up: the gateway ended \(n) connections in a row without accepting or refusing anything (is it an APNs gateway?)"
        case .speaksHTTP2(let gateway):
            "Stopping: \(gateway) answered in HTTP/2: it is the HTTP/2 provider API (api.push.apple.com:443, or the simulator's --protocol h2), not a binary-interface gateway for a plan of this format. Give the binary gateway's address, or plan the campaign with \"format\": \"h2\"; nothing was made final, and \(resume) sends it all"
        case .credentialRefused(let sentence), .accountState(let sentence): sentence
        case .providerTokenRefused(let kid):
            "APNs refuses this send's provider token for key \(kid) (429 TooManyProviderTokenUpdates): another token of the key was made less than 20 minutes ago, by another send, part or machine using it, and APNs takes one new token a key every 20 minutes. Give every send of the key one --token-cache DIR (parallel.sh gives its parts one), or resume in 20 minutes with \(resume); nothing was made final"
        case .malformedRequests(let n, let last):
            "Stopping: APNs refused \(n) requests in a row as malformed (the last: \(last)); the plan or campaign is wrong, or --gateway is not APNs; none of those refusals is final, and sending the rest would fail the same way"
        case .serverTrouble(let seconds, let count, let last):
            "Stopping: the gateway has been failing for \(seconds) s with nothing accepted (\(count) times; the last: \(last)); nothing it failed is final: resume later with \(resume)"
        case .ledgerBusy(let lock, let seconds):
            "Stopping: another send of this frequencyCap's scope has held the ledger's claim lock \(lock) for \(seconds) s (a stopped or hung process: `fuser \(lock)` names it), and no notification goes out unclaimed; nothing was made final: resume with \(resume) once it is free"
        case .notificationsParked(let n):
            "Stopping: \(n) notification\(n == 1 ? " was" : "s were") on too many lost connections (over HTTP/2 open on \(H2NotificationLimits.maxLosses), over the binary interface at the head of \(DropStrikes.parkAfter) in a row, each) and not sent again in this run (possible duplicates); none is final: resume later with \(resume) to send \(n == 1 ? "it" : "them")"
        }
    }
}

/// How far a running send has got, for a progress line.
public struct SendProgress: Equatable, Sendable {
    /// Plan records read so far, and how many of them were final before this run.
    public var read: Int
    public var alreadyDone: Int
    /// The plan's record count, when known before it is read.
    public var total: Int?
    /// Final in this run (accepted, presumed or failed), and of them failed.
    public var settled: Int
    public var failed: Int
    /// Taken by the connections in this run to write (nil: not known, taken
    /// as read less what was done before). Not what was read, nor what waits
    /// in their queues: a scheduled send holds the next record read until its
    /// moment, and `--rate` holds the queued until their turn.
    public var taken: Int?

    public init(read: Int, alreadyDone: Int, total: Int?, settled: Int, failed: Int, taken: Int? = nil) {
        (self.read, self.alreadyDone, self.total, self.settled, self.failed, self.taken) = (read, alreadyDone, total, settled, failed, taken)
    }

    /// Taken by a connection and not final yet (or given up for this run).
    public var inFlight: Int { max(0, (taken ?? (read - alreadyDone)) - settled) }

    /// `sent 120000 of 1000000 (52000/s), 3 failed, ETA 16 s` after `seconds`
    /// of sending: measured against the plan's total when it is known, else
    /// against what has been read.
    public func line(seconds: Double) -> String {
        let rate = seconds > 0 ? Double(settled) / seconds : 0
        let toDo = (total ?? read) - alreadyDone
        let remaining = max(0, toDo - settled)
        let eta = rate > 0 ? ", ETA \(Int((Double(remaining) / rate).rounded(.up))) s" : ""
        let of = total != nil ? "of \(toDo)" : "of \(toDo) read so far"
        return "sent \(settled) \(of) (\(rateText(rate))), \(failed) failed\(eta)"
    }
}

/// The whole send, every run of it: what its journal held when this run
/// started (a resume) and this run's counts.
public struct SendTotals: Sendable, Equatable {
    public var runs = 1
    /// Notifications skipped for good: too late (a scheduled one), or at the frequencyCap.
    public var skipped = 0
    /// Of ``skipped``, those at the frequencyCap.
    public var skippedFrequencyCapped = 0
    public var accepted = 0
    public var presumed = 0
    public var failedByStatus: [Int: Int] = [:]
    public var failedByReason: [String: Int] = [:]
    public var resends = 0
    /// Resends by why ("429 TooManyRequests": n).
    public var resentByKind: [String: Int] = [:]
    public var duplicatesRisked = 0
    public var reconnects = 0

    public var failed: Int { failedByStatus.values.reduce(0, +) }
    /// Every run's time together: the earlier runs' as their journal tells
    /// it (``JournalState/sendingSeconds``), and this run's.
    public var seconds = 0.0
    /// Answered over ``seconds``.
    public var perSecond: Double { seconds > 0 ? Double(accepted + presumed + failed) / seconds : 0 }

    /// `before`: the journal as this run found it (nil for a new send).
    /// `run.duplicatesRisked` already holds those carried over from a killed run.
    public init(before: JournalState?, run: SendReport) {
        runs = (before?.runs ?? 0) + 1
        accepted = (before?.accepted ?? 0) + run.accepted
        presumed = (before?.presumed ?? 0) + run.presumed
        let earlier = before?.failures ?? []
        failedByStatus = run.failedByStatus.merging(earlier.countedByStatus, uniquingKeysWith: +)
        failedByReason = run.failedByReason.merging(earlier.countedByReason, uniquingKeysWith: +)
        resends = (before?.resends ?? 0) + run.resends
        resentByKind = (before?.resentByKind ?? [:]).merging(run.resentByKind, uniquingKeysWith: +)
        duplicatesRisked = (before?.duplicatesRisked ?? 0) + run.duplicatesRisked
        reconnects = (before?.reconnects ?? 0) + run.reconnects
        skipped = (before?.skipped.count ?? 0) + run.skipped
        skippedFrequencyCapped = (before?.skipped.filter { $0.rule != nil }.count ?? 0) + run.skippedFrequencyCapped
        seconds = (before?.sendingSeconds ?? 0) + run.seconds
    }
}

/// The counts of a send, for the terminal and `--report`: this run's, and
/// (``wholeSend``) every run's together.
public struct SendReport: Sendable {
    public init() {}

    public var outcome: SendOutcome = .complete
    /// Plan records this run read (every one when it read the plan to its
    /// end; a scheduled run stops at the first not yet due): `this_run`'s `records_read`.
    public var planRecords = 0
    /// The plan's record count (its trailer's, the journal's, or what this
    /// run read when it read the plan to its end); nil while unknown.
    public var planTotal: Int?
    /// Final before this run started (a resume).
    public var alreadyDone = 0
    public var accepted = 0
    public var presumed = 0
    /// Binary statuses (1–255) and HTTP/2 statuses (400 and up).
    public var failedByStatus: [Int: Int] = [:]
    /// By status and reason: "410 Unregistered", "8 invalid token" (``FailureCause/label``).
    public var failedByReason: [String: Int] = [:]
    /// Notifications sent again, by why: "429 TooManyRequests", "503 ServiceUnavailable",
    /// "REFUSED_STREAM", "lost connection", "discarded by the gateway"…
    public var resentByKind: [String: Int] = [:]
    public var resends = 0
    public var duplicatesRisked = 0
    public var reconnects = 0
    public var drops = 0
    public var shutdowns = 0
    public var seconds = 0.0
    public var message: String? = nil
    /// The protocol the run sent with (the words for resends differ); nil
    /// when the run ended before sending (then it resent nothing).
    public var wire: WireProtocol?
    /// Connections in the pool at the end (it may have grown from `--connections`' start),
    /// counting only connections opened: 0 when the run opened none (nothing was due, or left to send).
    public var poolConnections = 0
    /// The median over the run's seconds of the shortest round trip measured (HTTP/2), in milliseconds.
    public var roundTripMilliseconds: Double?
    /// Every run of the send together (set at the end of a run); nil: this run is the whole send.
    public var wholeSend: SendTotals?
    /// A scheduled plan: skipped as too late in this run (final), and held
    /// back because the device was in its quiet hours (left for later).
    public var skipped = 0
    /// Of ``skipped``, those whose device was at the frequencyCap.
    public var skippedFrequencyCapped = 0
    public var deferred = 0
    /// A scheduled plan: the next moment something is due (UNIX seconds), when the run ended before it.
    public var nextMoment: Int64?
    /// The next moment ends some device's quiet hours: the next run starts at it, not early.
    public var nextMomentEndsQuietHours = false
    /// A scheduled plan: the moments released after a wait in this run.
    public var waves = 0
    /// A plan with variants: each one's planned, accepted and failed, over every run of the send.
    public var variants: [VariantCounts] = []

    /// The whole send: ``wholeSend``, or this run when it is the first.
    public var totals: SendTotals { wholeSend ?? SendTotals(before: nil, run: self) }

    public var failed: Int { failedByStatus.values.reduce(0, +) }

    /// Failures by label split into status and reason ("410", "Unregistered"), in order.
    public static func split(_ failedByReason: [String: Int]) -> [(status: String, reason: String, count: Int)] {
        failedByReason.sorted { $0.key < $1.key }.map { label, count in
            let parts = label.split(separator: " ", maxSplits: 1)
            return (String(parts.first ?? ""), parts.count > 1 ? String(parts[1]) : "", count)
        }
    }
    public var perSecond: Double { seconds > 0 ? Double(accepted + presumed + failed) / seconds : 0 }

    /// The whole send's counts at the top (every run: a resume adds to what
    /// was there), this run's under `this_run`.
    public var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        func byStatus(_ d: [Int: Int]) -> JSONValue { .object(d.sorted { $0.key < $1.key }.map { (String($0.key), n($0.value)) }) }
        func byName(_ d: [String: Int]) -> JSONValue { .object(d.sorted { $0.key < $1.key }.map { ($0.key, n($0.value)) }) }
        let whole = totals
        return .object([
            ("outcome", .string(outcome.rawValue)),
            ("plan_records", planTotal.map(n) ?? .null), ("runs", n(whole.runs)),
            ("accepted", n(whole.accepted)), ("presumed", n(whole.presumed)), ("failed", n(whole.failed)), ("skipped", n(whole.skipped)),
            ("skipped_frequency_capped", n(whole.skippedFrequencyCapped)),
            ("next_moment", outcome == .cancelled ? .null : nextMoment.map { .string(utcText($0)) } ?? .null),
            // Held back now (at this run's end) by quiet hours, waiting for a later run: the send's state, not a sum over runs.
            ("deferred_for_quiet_hours", n(outcome == .complete || outcome == .cancelled ? 0 : deferred)),
            ("failed_by_status", byStatus(whole.failedByStatus)), ("failed_by_reason", byName(whole.failedByReason)),
            ("resends", n(whole.resends)), ("resent_by_kind", byName(whole.resentByKind)),
            ("duplicates_risked", n(whole.duplicatesRisked)), ("reconnects", n(whole.reconnects)),
            ("pool_connections", n(poolConnections)),
            ("round_trip_ms", roundTripMilliseconds.map { .number(String(($0 * 10).rounded() / 10)) } ?? .null),
            ("seconds", .number(format3(whole.seconds))),
            // Two decimals: a slow send (a rate of 2 a second over 3 s) is not 0.
            ("notifications_per_second", .number(String((whole.perSecond * 100).rounded() / 100))),
            ("this_run", .object([
                ("records_read", n(planRecords)), ("already_done", n(alreadyDone)),
                ("accepted", n(accepted)), ("presumed", n(presumed)), ("failed", n(failed)),
                ("failed_by_reason", byName(failedByReason)),
                ("resends", n(resends)), ("resent_by_kind", byName(resentByKind)), ("duplicates_risked", n(duplicatesRisked)),
                ("reconnects", n(reconnects)), ("drops", n(drops)), ("shutdowns", n(shutdowns)),
                ("skipped", n(skipped)), ("deferred_for_quiet_hours", n(deferred)), ("waves", n(waves)),
                ("seconds", .number(format3(seconds))), ("notifications_per_second", .number(String((perSecond * 100).rounded() / 100))),
            ])),
        ] + variantsJSON)
    }

    /// `"variants":{"A":{"planned":…,"accepted":…,"failed":…},…}`, with variants only.
    private var variantsJSON: [(key: String, value: JSONValue)] {
        variants.isEmpty ? [] : [("variants", VariantCounts.json(variants))]
    }

    public var text: String {
        var s = "send: \(outcome.rawValue): \(accepted) accepted"
        if presumed > 0 { s += ", \(presumed) presumed delivered (simple format: failures cannot be detected)" }
        s += ", \(failed) failed"
        if !failedByReason.isEmpty {
            s += " (" + failedByReason.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")"
        }
        if skipped > 0 {
            let capped = min(skipped, skippedFrequencyCapped), late = skipped - capped
            let why = [late > 0 ? "\(late) too late" : nil, capped > 0 ? "\(capped) at their frequencyCap as they were about to go" : nil]
            s += ", \(skipped) skipped (\(why.compactMap { $0 }.joined(separator: ", ")))"
        }
        if alreadyDone > 0 { s += ", \(alreadyDone) already done before this run" }
        // A cancelled send has no next notifications, whatever was due next when it stopped.
        if let next = nextMoment, outcome != .cancelled {
            s += "\n  scheduled: the next notifications are due at \(utcText(next))" + (deferred > 0 ? " (\(deferred) held back by their quiet hours)" : "")
        }
        if let whole = wholeSend, whole.runs > 1 {
            s += "\n  the whole send (\(whole.runs) runs): \(whole.accepted) accepted\(whole.presumed > 0 ? ", \(whole.presumed) presumed" : ""), \(whole.failed) failed"
                + (whole.failedByReason.isEmpty ? "" : " (" + whole.failedByReason.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")")
                + (whole.skipped > 0 ? ", \(whole.skipped) skipped" + (whole.skippedFrequencyCapped > 0 ? " (\(whole.skippedFrequencyCapped) at their frequencyCap)" : "") : "")
                + ", \(whole.resends) resent, \(whole.duplicatesRisked) possible duplicates, \(format3(whole.seconds)) s"
        }
        s += "\n  \(resends) resent, \(duplicatesRisked) possible duplicates, \(reconnects) connection\(reconnects == 1 ? "" : "s"), \(drops) lost without a response, \(format3(seconds)) s, \(rateText(perSecond))"
        if wire?.poolMayGrow == true, poolConnections > 0 {
            s += "\n  pool: \(poolConnections) connection\(poolConnections == 1 ? "" : "s")"
                + (roundTripMilliseconds.map { ", round trip \(format1(($0 * 10).rounded() / 10)) ms" } ?? "")
        }
        if resends > 0, let wire {
            s += "\n  (resent: " + wire.resendsExplained
                + (resentByKind.isEmpty ? "" : ": " + resentByKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")) + ")"
        }
        if !variants.isEmpty { s += "\n  variants (every run): " + VariantCounts.text(variants) }
        if let message { s += "\n  \(message)" }
        return s
    }
}

extension JournalRecord.Tick {
    /// The tick of a run's live counts at `second`.
    package init(second: Int, counts c: SendReport, open: Int?, roundTripMilliseconds: Double?) {
        self.init(second: second, accepted: c.accepted + c.presumed, failed: c.failed, resent: c.resends, connections: c.reconnects,
                  open: open, roundTripMilliseconds: roundTripMilliseconds, resentByKind: c.resentByKind)
    }
}
