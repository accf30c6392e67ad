#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignJSON
import LocalTime
import SendLedger
import ByteStreams

/// The first line of a plan: `{"header":{…}}`.
public struct PlanHeader: Equatable, Sendable {
    public static let currentVersion = 1

    public var version = PlanHeader.currentVersion
    public var campaign: String
    /// How the notifications travel (the header's `format`).
    public var wire: WireProtocol
    /// Absolute UNIX expiry for every notification; 0: do not store.
    public var expiry: UInt32
    /// Frames only.
    public var priority: NotificationPriority?
    public var maxPayload: Int
    public var shards: Int
    /// The longest `token` a record may hold: a channel id's longest in a broadcast plan, the format's otherwise.
    public var maxTokenBytes: Int { http2?.broadcast == true ? ChannelID.maxBytes : wire.maxTokenBytes }
    /// UNIX seconds when the plan was made.
    public var created: UInt32
    /// A random id of the planning run (16 hex digits): two plans of one job
    /// made in the same second differ by it, and so do their apns-ids, which
    /// are drawn from the header. Nil in plans made before it existed.
    public var run: String?
    /// Which part of a planning run this plan is (`plan --parts N`); nil for a whole plan.
    public var part: PlanPart?
    /// h2 plans: the request headers every notification shares.
    public var http2: HTTP2Fields?
    /// A scheduled campaign: each record carries its moment (`at`), and the
    /// send releases it then. `deliverAt`'s date is the one the plan chose.
    public var schedule: DeliverySchedule?
    /// A job with variants: every variant, in job order (see PlanFormat+Variants); empty without.
    public var variants: [PlanVariant] = []
    /// The job's `frequencyCap` (its scope names the campaign's in the send ledger; a scheduled send checks the cap again at release).
    public var frequencyCap: FrequencyCap?
    /// The job's `throttle.perMinute`: the campaign's rate over all its parts.
    public var throttlePerMinute: Int?

    /// What an h2 plan's requests carry besides the token and payload.
    public struct HTTP2Fields: Equatable, Sendable {
        /// `apns-topic`; nil: the certificate's (token authentication needs one).
        public var topic: String?
        public var pushType: String
        public var collapseId: String?
        /// When the job's collapseId is a template: its text; each record then carries its own `collapse_id`.
        public var collapseIdTemplate: String?
        /// A broadcast plan: each record's `token` holds a channel id's bytes
        /// (sent as base64 in `apns-channel-id`), and every request goes to
        /// `/4/broadcasts/apps/<topic>`, `topic` being the bare bundle id.
        public var broadcast: Bool
        public init(topic: String?, pushType: String, collapseId: String?, collapseIdTemplate: String? = nil, broadcast: Bool = false) {
            (self.topic, self.pushType, self.collapseId, self.collapseIdTemplate) = (topic, pushType, collapseId, collapseIdTemplate)
            self.broadcast = broadcast
        }
    }

    public init(campaign: String, wire: WireProtocol, expiry: UInt32, priority: NotificationPriority?,
                maxPayload: Int, shards: Int, created: UInt32, part: PlanPart? = nil) {
        self.campaign = campaign
        self.wire = wire
        self.expiry = expiry
        self.priority = priority
        self.maxPayload = maxPayload
        self.shards = shards
        self.created = created
        self.part = part
    }

    /// The expiry of a notification whose moment is `at` (a scheduled
    /// record's), sent at `sentAt`, or of any other: `expiry` counts
    /// `expiresIn` from plan time, but a scheduled notification goes at its
    /// moment, hours later, and must not leave already expired (or expire
    /// while its device is briefly offline): it counts from the moment, or
    /// from when it is sent if that is later (`late: send`), never earlier
    /// than from plan time. 0 stays 0 (do not store).
    @inline(__always)
    public func expiry(forMoment at: Int64?, sentAt: Int64) -> UInt32 {
        guard let at, expiry != 0 else { return expiry }
        let from = max(at, sentAt)
        guard from > Int64(created) else { return expiry }
        return UInt32(clamping: from + (Int64(expiry) - Int64(created)))
    }

    /// This header as part `index` of `part`'s run.
    public func forPart(_ index: Int, of count: Int, campaignHash: String) -> PlanHeader {
        var h = self
        h.part = PlanPart(index: index, count: count, campaignHash: campaignHash)
        return h
    }

    public var json: JSONValue {
        var members: [(key: String, value: JSONValue)] = [
            ("version", .number(String(version))),
            ("campaign", .string(campaign)),
            ("format", .string(wire.description)),
            ("expiry", .number(String(expiry))),
            ("priority", priority.map { .number(String($0.rawValue)) } ?? .null),
            ("maxPayload", .number(String(maxPayload))),
            ("shards", .number(String(shards))),
            ("created", .number(String(created))),
        ]
        if let run { members.append(("run", .string(run))) }
        if let p = part {
            members += [("part", .number(String(p.index))), ("parts", .number(String(p.count))), ("campaignHash", .string(p.campaignHash))]
        }
        if let h = http2 {
            members += [("topic", h.topic.map { .string($0) } ?? .null), ("pushType", .string(h.pushType)),
                        ("collapseId", h.collapseId.map { .string($0) } ?? .null)]
            if let t = h.collapseIdTemplate { members.append(("collapseIdTemplate", .string(t))) }
            if h.broadcast { members.append(("broadcast", .bool(true))) }
        }
        if let schedule { members.append(("schedule", Self.json(schedule))) }
        if !variants.isEmpty { members.append(("variants", PlanVariant.json(variants))) }
        if let t = throttlePerMinute { members.append(("throttle", .object([("perMinute", .number(String(t)))]))) }
        if let c = frequencyCap {
            members.append(("frequencyCap", .object([("max", .number(String(c.max))), ("per", .number(String(c.perSeconds))), ("scope", .string(c.scope))])))
        }
        return .object([("header", .object(members))])
    }

    /// Reads `{"header":{…}}`.
    public init(json: JSONValue) throws(PlanError.Reason) {
        guard let h = json["header"], h.objectMembers != nil else { throw .noHeader }
        guard let version = h["version"]?.integerValue else { throw .badHeader("no version") }
        guard version == Int64(Self.currentVersion) else { throw .unsupportedVersion(Int(version)) }
        guard let campaign = h["campaign"]?.stringValue,
              let wire = h["format"]?.stringValue.flatMap(WireProtocol.init(name:)),
              let expiry = h["expiry"]?.integerValue, (0...Int64(UInt32.max)).contains(expiry),
              let maxPayload = h["maxPayload"]?.integerValue, (1...Int64(wire.maxPayloadBytes)).contains(maxPayload),
              let shards = h["shards"]?.integerValue, (1...65_536).contains(shards),
              let created = h["created"]?.integerValue, (0...Int64(UInt32.max)).contains(created) else {
            throw .badHeader("a field is missing or out of range")
        }
        var priority: NotificationPriority? = nil
        if let p = h["priority"]?.integerValue { priority = NotificationPriority(rawValue: UInt8(clamping: p)) }
        var part: PlanPart? = nil
        if h["parts"] != nil || h["part"] != nil {
            guard let count = h["parts"]?.integerValue, (1...Int64(shards)).contains(count),
                  let index = h["part"]?.integerValue, (0..<count).contains(index),
                  let hash = h["campaignHash"]?.stringValue, !hash.isEmpty else {
                throw .badHeader("part, parts and campaignHash must come together, with 0 <= part < parts <= shards")
            }
            part = PlanPart(index: Int(index), count: Int(count), campaignHash: hash)
        }
        self.init(campaign: campaign, wire: wire, expiry: UInt32(expiry), priority: priority,
                  maxPayload: Int(maxPayload), shards: Int(shards), created: UInt32(created), part: part)
        run = h["run"]?.stringValue
        if wire.isHTTP2 {
            guard let pushType = h["pushType"]?.stringValue else { throw .badHeader("an h2 plan needs pushType") }
            http2 = HTTP2Fields(topic: h["topic"]?.stringValue, pushType: pushType, collapseId: h["collapseId"]?.stringValue,
                                collapseIdTemplate: h["collapseIdTemplate"]?.stringValue, broadcast: h["broadcast"] == .bool(true))
            if http2!.broadcast, http2!.topic == nil { throw .badHeader("a broadcast plan needs its topic (the bundle id the path names)") }
        }
        if let s = h["schedule"] {
            guard let schedule = Self.schedule(s) else { throw .badHeader("schedule must hold deliverAt (localTime, date, window, late, defaultTimeZone) or quietHours (from, to, defaultTimeZone)") }
            self.schedule = schedule
        }
        if let v = h["variants"] { variants = try PlanVariant.list(v) }
        if let t = h["throttle"] {
            guard let n = t["perMinute"]?.integerValue, n > 0 else { throw .badHeader("throttle must hold perMinute, a positive whole number") }
            throttlePerMinute = Int(n)
        }
        if let c = h["frequencyCap"] {
            guard let max = c["max"]?.integerValue, max > 0, let per = c["per"]?.integerValue, per > 0, let scope = c["scope"]?.stringValue else {
                throw .badHeader("frequencyCap must hold max, per (seconds) and scope")
            }
            frequencyCap = FrequencyCap(max: Int(max), perSeconds: Int(per), scope: scope)
        }
    }

    static func json(_ schedule: DeliverySchedule) -> JSONValue {
        switch schedule {
        case .deliverAt(let d):
            return .object([("deliverAt", .object([
                ("localTime", .string(d.localTime.description)), ("date", d.date.map { .string($0.description) } ?? .null),
                ("window", .number(String(d.windowSeconds))), ("late", .string(d.late.rawValue)), ("defaultTimeZone", .string(d.defaultZone)),
            ]))])
        case .quietHours(let q):
            return .object([("quietHours", .object([
                ("from", .string(q.from.description)), ("to", .string(q.to.description)), ("defaultTimeZone", .string(q.defaultZone)),
            ]))])
        }
    }

    static func schedule(_ v: JSONValue) -> DeliverySchedule? {
        if let d = v["deliverAt"] {
            guard let time = d["localTime"]?.stringValue.flatMap(TimeOfDay.init(text:)),
                  let window = d["window"]?.integerValue, window >= 0,
                  let late = d["late"]?.stringValue.flatMap(LatePolicy.init(rawValue:)),
                  let zone = d["defaultTimeZone"]?.stringValue else { return nil }
            let date = d["date"]?.stringValue.flatMap(CivilDate.init(iso:))
            return .deliverAt(DeliverAt(localTime: time, date: date, windowSeconds: Int(window), defaultZone: zone, late: late))
        }
        if let q = v["quietHours"] {
            guard let from = q["from"]?.stringValue.flatMap(TimeOfDay.init(text:)), let to = q["to"]?.stringValue.flatMap(TimeOfDay.init(text:)),
                  let zone = q["defaultTimeZone"]?.stringValue else { return nil }
            return .quietHours(QuietHours(from: from, to: to, defaultZone: zone))
        }
        return nil
    }
}

/// One part of a plan split by `plan --parts N`: the shards `s` with
/// `s mod count == index`, so a device always lands in the same part.
public struct PlanPart: Equatable, Sendable {
    public var index: Int
    public var count: Int
    /// Names the planning run the parts came from (job, audience, options,
    /// time); every part of one run has the same, and a journal started with
    /// one part refuses a part of another run.
    public var campaignHash: String

    public init(index: Int, count: Int, campaignHash: String) {
        self.index = index
        self.count = count
        self.campaignHash = campaignHash
    }

    /// Whether a record of `shard` belongs to this part.
    @inline(__always)
    public func holds(shard: Int) -> Bool { shard % count == index }

    /// The part file's name in a parts directory: `part-007.plan` (three
    /// digits at least, more when there are more than 1000 parts).
    public static func fileName(index: Int, count: Int) -> String {
        let width = max(3, String(count - 1).count)
        let digits = String(index)
        return "part-" + String(repeating: "0", count: max(0, width - digits.count)) + digits + ".plan"
    }
}

/// The last line of a complete plan: `{"trailer":{"records":N,"crc32":"…",…}}`.
public struct PlanTrailer: Equatable, Sendable {
    public var records: Int
    /// CRC-32 of every record line's bytes, newline included, in order.
    public var crc32: String
    public var rowsRead: Int
    public var rejected: Int
    /// A plan with variants: its records of each of the header's variants, in
    /// the header's order (a holdout's: 0, it has none), so a send knows each
    /// variant's share of the plan before reading it all.
    public var variants: [Int]?

    public init(records: Int, crc32: String, rowsRead: Int, rejected: Int, variants: [Int]? = nil) {
        (self.records, self.crc32, self.rowsRead, self.rejected, self.variants) = (records, crc32, rowsRead, rejected, variants)
    }

    public var json: JSONValue {
        .object([("trailer", .object([
            ("records", .number(String(records))),
            ("crc32", .string(crc32)),
            ("rows", .number(String(rowsRead))),
            ("rejected", .number(String(rejected))),
        ] + (variants.map { [("variants", .array($0.map { .number(String($0)) }))] } ?? [])))])
    }

    /// Reads ``json``'s `"trailer"` member; nil when it lacks records or crc32.
    public init?(trailer t: JSONValue?) {
        guard let t, let records = t["records"]?.integerValue, let sum = t["crc32"]?.stringValue else { return nil }
        self.init(records: Int(records), crc32: sum, rowsRead: Int(t["rows"]?.integerValue ?? 0), rejected: Int(t["rejected"]?.integerValue ?? 0),
                  variants: { if case .array(let a)? = t["variants"] { a.map { Int($0.integerValue ?? 0) } } else { nil } }())
    }
}

/// One planned notification.
public struct PlanRecord: Equatable, Sendable {
    public var seq: UInt64
    public var shard: Int
    public var token: [UInt8]
    /// The message chosen, as the job names it.
    public var lang: String
    /// The payload's bytes exactly as they will be sent.
    public var payload: [UInt8]
    /// h2, with a collapseId template: this record's `apns-collapse-id`.
    public var collapseId: String?
    /// A scheduled campaign's: the moment it may go (UNIX seconds).
    public var at: Int64?
    /// Quiet hours: the device's zone, checked again when the record is released.
    public var timeZone: String?
    /// A job with variants: the record's variant's name.
    public var variant: String?

    public init(seq: UInt64, shard: Int, token: [UInt8], lang: String, payload: [UInt8], collapseId: String? = nil,
                at: Int64? = nil, timeZone: String? = nil) {
        self.at = at
        self.timeZone = timeZone
        self.seq = seq
        self.shard = shard
        self.token = token
        self.lang = lang
        self.payload = payload
        self.collapseId = collapseId
    }

    // A record's line, `{"seq":…[,"at":…[,"tz":"…"]],"shard":…,"token":"…","lang":"…"[,"collapse_id":"…"][,"variant":"…"],"payload":{…}}\n`,
    // in parts, so the planner can render the payload in place and number
    // the record later, on another thread (see SeqText). The payload comes
    // last so a reader can take its bytes without parsing them.
    @inline(__always)
    package static func appendFieldsBeforePayload(shard: Int, token: UnsafeBufferPointer<UInt8>, lang: UnsafeBufferPointer<UInt8>,
                                                  collapseId: [UInt8]? = nil, variant: UnsafeBufferPointer<UInt8>? = nil, to out: ByteArena) {
        out.append(#","shard":"#)
        out.append(upTo: 20) { p in
            // Shards are below 65,536.
            var digits = 0, v = shard, divisor = 1
            while v >= divisor * 10 { divisor *= 10 }
            while divisor > 0 {
                p[digits] = UInt8(ascii: "0") + UInt8(v / divisor)
                v %= divisor
                divisor /= 10
                digits += 1
            }
            return digits
        }
        out.append(#","token":""#)
        out.append(upTo: token.count * 2) { p in
            HexEncoding.write(token, to: p)
            return token.count * 2
        }
        out.append(#"","lang":"#)
        out.append(lang)
        if let collapseId {
            out.append(#","collapse_id":"#)
            var quoted: [UInt8] = []
            JSONText.appendString(collapseId, to: &quoted)
            quoted.withUnsafeBufferPointer { out.append($0) }
        }
        if let variant {
            // The name is quoted already (letters, digits, '.', '_', '-': nothing to escape).
            out.append(#","variant":"#)
            out.append(variant)
        }
        out.append(#","payload":"#)
    }

    @inline(__always)
    package static func appendEnd(to out: ByteArena) {
        out.append("}\n")
    }
}

/// A plan that cannot be read, naming the file and line.
public struct PlanError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Reason: Error, Equatable, Sendable {
        case empty
        case noHeader
        case badHeader(String)
        case unsupportedVersion(Int)
        case badRecord(String)
        case outOfOrder(expected: UInt64, found: UInt64)
        case afterTrailer
        case countMismatch(trailer: Int, read: Int)
        case checksumMismatch(trailer: String, computed: String)
        /// A plan file that does not end with its trailer: cut short.
        case noTrailer
    }

    public var path: String
    public var line: Int
    public var reason: Reason

    public var description: String {
        let what: String
        switch reason {
        case .empty: what = "the plan is empty"
        case .noHeader: what = "the first line is not a plan header ({\"header\":…})"
        case .badHeader(let s): what = "the plan header is invalid: \(s)"
        case .unsupportedVersion(let v): what = "plan format version \(v) is not supported (this campaign reads version \(PlanHeader.currentVersion))"
        case .badRecord(let s): what = "invalid plan record: \(s)"
        case .outOfOrder(let e, let f): what = "record seq \(f) where \(e) was expected (records reordered or lost)"
        case .afterTrailer: what = "text after the trailer"
        case .countMismatch(let t, let r): what = "the trailer counts \(t) records but the plan holds \(r)"
        case .checksumMismatch(let t, let c): what = "the trailer's checksum \(t) does not match the records' \(c) (the plan was altered)"
        case .noTrailer:
            return "\(path): the plan has no trailer, so it is incomplete (its planner failed or was killed, or it is still being written); nothing was sent. Plan it again."
        }
        return "\(path), line \(line): \(what)."
    }
}
