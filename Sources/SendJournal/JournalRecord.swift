import APNSWire
import CampaignJSON

/// One record of `journal.log`, as docs/journal.md tables them. Only
/// ``Journal`` encodes and decodes them; everyone else appends these values.
public enum JournalRecord: Equatable, Sendable {
    /// A run began; its settings are what `--resume` reuses.
    case start(settings: SendSettings, planHeader: JSONValue)
    /// Per shard, the ordinals below this may have reached the gateway.
    case sent(below: [Int: Int])
    /// Ordinals of a shard proven accepted.
    case done(shard: Int, ranges: [Range<Int>])
    /// Ordinals of a shard written in the simple format, presumed delivered.
    case presumed(shard: Int, ranges: [Range<Int>])
    /// A notification refused for good.
    case fail(SendFailure)
    /// The plan was read to its end (`crc32`: its trailer's checksum).
    case plan(records: Int, crc32: String?, incomplete: Bool)
    /// Counts added up over runs (`resentByKind`: a run's resends by why, at its end).
    case counters(resends: Int, duplicatesRisked: Int, reconnects: Int, resentByKind: [String: Int] = [:])
    /// How a run ended.
    /// How a run ended, and how long it ran (seconds; nil in journals from before).
    case end(outcome: SendOutcome, seconds: Double? = nil)
    /// Once a second while a run sends: its counts so far (this run's, from its start).
    case tick(Tick)
    /// When a run began sending, in UNIX seconds (for the page's times; older journals have none).
    case clock(unixSeconds: Int)
    /// A scheduled notification not sent: its moment passed more than the
    /// job's window ago and the job says `late: skip`. Final, not a failure.
    case skip(SkippedNotification)
    /// A scheduled send began releasing the notifications of `moment` (UNIX seconds), at `unixSeconds`.
    case wave(moment: Int, unixSeconds: Int)
    /// A scheduled send's run ended and the send waits (holding the journal)
    /// to start the next at `untilUnixSeconds`: `status` tells such a send,
    /// alive, from one killed while waiting.
    case wait(untilUnixSeconds: Int)
    /// The waiting send's next run begins (its start record follows): not a resume.
    case woke
    /// A broadcast accepted: the ids to quote when asking Apple about it.
    case ids(AnswerIDs)
    /// A plan with variants: each variant's counts over every run so far (planned, accepted, failed), at each tick and a run's end.
    case variants([VariantCounts])

    /// A broadcast's ids: `apns-request-id` (ours, made from the plan and
    /// the record's seq) and `apns-unique-id` (APNs's, when it gave one).
    public struct AnswerIDs: Equatable, Sendable {
        public var seq: UInt64
        public var requestID: String
        public var uniqueID: String?

        public init(seq: UInt64, requestID: String, uniqueID: String?) {
            (self.seq, self.requestID, self.uniqueID) = (seq, requestID, uniqueID)
        }
    }

    /// A point of a run's timeline.
    public struct Tick: Equatable, Sendable {
        /// Seconds since the run started.
        public var second: Int
        public var accepted: Int
        public var failed: Int
        public var resent: Int
        /// Connections opened so far (reconnects included).
        public var connections: Int
        /// Connections in the pool (HTTP/2; nil in journals before the pool could grow).
        public var open: Int?
        /// The shortest round trip the connections measured in that second, in milliseconds.
        public var roundTripMilliseconds: Double?
        /// Resent so far, by why ("429 TooManyRequests", "REFUSED_STREAM"…); empty in older journals.
        public var resentByKind: [String: Int] = [:]

        public init(second: Int, accepted: Int, failed: Int, resent: Int, connections: Int, open: Int? = nil, roundTripMilliseconds: Double? = nil,
                    resentByKind: [String: Int] = [:]) {
            (self.second, self.accepted, self.failed, self.resent, self.connections) = (second, accepted, failed, resent, connections)
            (self.open, self.roundTripMilliseconds, self.resentByKind) = (open, roundTripMilliseconds, resentByKind)
        }
    }

    /// The record's JSON, `t` first.
    package var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        func ranges(_ rs: [Range<Int>]) -> JSONValue { .array(rs.map { .array([n($0.lowerBound), n($0.upperBound)]) }) }
        switch self {
        case .start(let settings, let header):
            return .object([("t", .string("start")), ("settings", settings.json), ("plan_header", header)])
        case .sent(let below):
            return .object([("t", .string("sent")), ("below", .object(below.sorted { $0.key < $1.key }.map { (String($0.key), n($0.value)) }))])
        case .done(let shard, let rs):
            return .object([("t", .string("done")), ("shard", n(shard)), ("ranges", ranges(rs))])
        case .presumed(let shard, let rs):
            return .object([("t", .string("presumed")), ("shard", n(shard)), ("ranges", ranges(rs))])
        case .fail(let f):
            var token: [UInt8] = []
            HexEncoding.append(f.token, to: &token)
            // Built step by step: as one expression it took seconds to type-check.
            var fields: [(String, JSONValue)] = [("t", .string("fail")), ("seq", .number(String(f.seq))), ("shard", n(f.shard)),
                                                 ("ordinal", n(f.ordinal)), ("status", n(f.status))]
            if let reason = f.cause.journaledReason { fields.append(("http_reason", .string(reason))) }
            fields.append(("protocol", .string(f.cause.interface.rawValue)))
            fields.append(("token", .string(String(decoding: token, as: UTF8.self))))
            fields.append(("gave_up", .bool(f.gaveUp)))
            fields.append(("attempts", n(f.attempts)))
            if let at = f.unregisteredAt { fields.append(("unregistered_at", n(Int(at)))) }
            return .object(fields)
        case .plan(let records, let crc32, let incomplete):
            return .object([("t", .string("plan")), ("records", n(records)), ("crc32", crc32.map { .string($0) } ?? .null),
                            ("incomplete", .bool(incomplete))])
        case .counters(let resends, let risked, let reconnects, let kinds):
            return .object([("t", .string("counters")), ("resends", n(resends)), ("duplicates_risked", n(risked)),
                            ("reconnects", n(reconnects))]
                           + (kinds.isEmpty ? [] : [("resent_by_kind", .object(kinds.sorted { $0.key < $1.key }.map { ($0.key, n($0.value)) }))]))
        case .end(let outcome, let seconds):
            var fields: [(String, JSONValue)] = [("t", .string("end")), ("outcome", .string(outcome.rawValue))]
            if let seconds { fields.append(("seconds", .number(String(format: "%.3f", seconds)))) }
            return .object(fields)
        case .clock(let seconds):
            return .object([("t", .string("clock")), ("at", n(seconds))])
        case .skip(let k):
            var token: [UInt8] = []
            HexEncoding.append(k.token, to: &token)
            return .object([("t", .string("skip")), ("seq", .number(String(k.seq))), ("shard", n(k.shard)), ("ordinal", n(k.ordinal)),
                            ("token", .string(String(decoding: token, as: UTF8.self))), ("at", n(Int(k.moment))), ("skipped_at", n(Int(k.skippedAt)))]
                           + (k.rule.map { [("rule", .string($0))] } ?? []))
        case .wave(let moment, let seconds):
            return .object([("t", .string("wave")), ("moment", n(moment)), ("at", n(seconds))])
        case .wait(let until):
            return .object([("t", .string("wait")), ("until", n(until))])
        case .woke:
            return .object([("t", .string("woke"))])
        case .ids(let ids):
            return .object([("t", .string("ids")), ("seq", .number(String(ids.seq))), ("request_id", .string(ids.requestID))]
                           + (ids.uniqueID.map { [("unique_id", JSONValue.string($0))] } ?? []))
        case .variants(let list):
            return .object([("t", .string("variants")), ("counts", VariantCounts.json(list))])
        case .tick(let k):
            return .object([("t", .string("tick")), ("s", n(k.second)), ("accepted", n(k.accepted)), ("failed", n(k.failed)),
                            ("resent", n(k.resent)), ("connections", n(k.connections))]
                           + (k.open.map { [("open", n($0))] } ?? [])
                           + (k.roundTripMilliseconds.map { [("rtt_ms", .number(String(($0 * 10).rounded() / 10)))] } ?? [])
                           + (k.resentByKind.isEmpty ? [] : [("resent_by_kind", .object(k.resentByKind.sorted { $0.key < $1.key }.map { ($0.key, n($0.value)) }))]))
        }
    }

    /// Decodes a record; nil for a kind this version does not know (a newer
    /// journal's) or a malformed one.
    package init?(json v: JSONValue) {
        func int(_ k: String) -> Int { Int(v[k]?.integerValue ?? 0) }
        func ranges() -> [Range<Int>] {
            guard case .array(let items)? = v["ranges"] else { return [] }
            return items.compactMap { item in
                guard case .array(let pair) = item, pair.count == 2, let a = pair[0].integerValue, let b = pair[1].integerValue, a < b else { return nil }
                return Int(a)..<Int(b)
            }
        }
        switch v["t"]?.stringValue {
        case "start":
            guard let settings = v["settings"].flatMap(SendSettings.init(json:)) else { return nil }
            self = .start(settings: settings, planHeader: v["plan_header"] ?? .null)
        case "sent":
            var below: [Int: Int] = [:]
            if case .object(let members)? = v["below"] {
                for (k, value) in members { if let shard = Int(k), let n = value.integerValue { below[shard] = max(below[shard] ?? 0, Int(n)) } }
            }
            self = .sent(below: below)
        case "done": self = .done(shard: int("shard"), ranges: ranges())
        case "presumed": self = .presumed(shard: int("shard"), ranges: ranges())
        case "fail":
            self = .fail(SendFailure(seq: UInt64(clamping: int("seq")), shard: int("shard"), ordinal: int("ordinal"),
                                     status: int("status"), httpReason: v["http_reason"]?.stringValue,
                                     // Journals before `protocol` was recorded: nil, read from the status and reason.
                                     interface: v["protocol"]?.stringValue.flatMap(FailureCause.Interface.init(rawValue:)),
                                     token: v["token"]?.stringValue.flatMap { DeviceToken(hex: $0)?.bytes } ?? [],
                                     gaveUp: v["gave_up"] == .bool(true),
                                     // Journals before `attempts` was recorded: 1, or 3 for one given up then.
                                     attempts: v["attempts"]?.integerValue.map { Int($0) } ?? (v["gave_up"] == .bool(true) ? 3 : 1),
                                     unregisteredAt: v["unregistered_at"]?.integerValue.flatMap { UInt32(exactly: $0) }))
        case "plan":
            self = .plan(records: int("records"), crc32: v["crc32"]?.stringValue, incomplete: v["incomplete"] == .bool(true))
        case "counters":
            self = .counters(resends: int("resends"), duplicatesRisked: int("duplicates_risked"), reconnects: int("reconnects"),
                             resentByKind: Self.kinds(v["resent_by_kind"]))
        case "end":
            guard let outcome = v["outcome"]?.stringValue else { return nil }
            self = .end(outcome: SendOutcome(rawValue: outcome), seconds: v["seconds"]?.doubleValue)
        case "clock":
            guard let at = v["at"]?.integerValue else { return nil }
            self = .clock(unixSeconds: Int(at))
        case "wait":
            guard let until = v["until"]?.integerValue else { return nil }
            self = .wait(untilUnixSeconds: Int(until))
        case "woke":
            self = .woke
        case "ids":
            guard let seq = v["seq"]?.integerValue, let request = v["request_id"]?.stringValue else { return nil }
            self = .ids(AnswerIDs(seq: UInt64(clamping: seq), requestID: request, uniqueID: v["unique_id"]?.stringValue))
        case "skip":
            var skipped = SkippedNotification(seq: UInt64(clamping: int("seq")), shard: int("shard"), ordinal: int("ordinal"),
                                              token: v["token"]?.stringValue.flatMap { DeviceToken(hex: $0)?.bytes } ?? [],
                                              moment: Int64(int("at")), skippedAt: Int64(int("skipped_at")))
            skipped.rule = v["rule"]?.stringValue
            self = .skip(skipped)
        case "wave":
            self = .wave(moment: int("moment"), unixSeconds: int("at"))
        case "tick":
            self = .tick(Tick(second: int("s"), accepted: int("accepted"), failed: int("failed"), resent: int("resent"),
                              connections: int("connections"), open: v["open"]?.integerValue.map { Int($0) },
                              roundTripMilliseconds: v["rtt_ms"]?.doubleValue,
                              resentByKind: Self.kinds(v["resent_by_kind"])))
        case "variants":
            guard let list = VariantCounts.list(v["counts"]) else { return nil }
            self = .variants(list)
        default:
            return nil
        }
    }

    /// `{"429 TooManyRequests":n,…}`; empty when absent (older journals).
    private static func kinds(_ value: JSONValue?) -> [String: Int] {
        value?.objectMembers.map { members in
            Dictionary(members.compactMap { m in m.value.integerValue.map { (m.key, Int($0)) } }, uniquingKeysWith: max)
        } ?? [:]
    }
}
