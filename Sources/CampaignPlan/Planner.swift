#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import PlanStream
import FeedbackStore
import LocalTime
import ByteStreams

/// Settings of one planning run beyond the job.
public struct PlanOptions: Sendable {
    /// Shards notifications are spread over, by a hash of the token.
    public var shards = 64
    /// Overrides the job's maxPayload.
    public var maxPayload: Int? = nil
    /// Plan time, UNIX seconds; expiry is counted from it.
    public var now: UInt32
    /// About how many rows the audience has, to size the de-duplication set once.
    public var expectedRows = 0
    /// Plans to split the records into (`plan --parts`), by shard: part `k`
    /// holds the shards `s` with `s mod parts = k`. 1: one plan.
    public var parts = 1
    /// Names this planning run in every part's header (see ``PlanPart``).
    public var campaignHash = ""
    /// The planning run's random id in the header (``PlanHeader/run``); nil draws one.
    public var run: String? = nil
    /// `plan --column`: mappings that override the job's `columns`.
    public var columns = ColumnMapping()
    /// `plan --ledger`: the campaign rules and what the send ledger says (see LedgerRules).
    public var rules: LedgerRules? = nil

    public init(now: UInt32) { self.now = now }
}

/// Turns audience rows into plan records or rejects: every row read ends as
/// exactly one of them.
public final class Planner {
    public let job: CampaignJob
    public let options: PlanOptions
    /// The plan's header; with parts, each part's is ``header(ofPart:)``.
    public private(set) var header: PlanHeader
    /// Where the audience's columns are: the job's `columns`, then `--column`.
    public let columns: ColumnMapping
    private let renderer: PayloadRenderer
    private let selector: MessageSelector
    private let messageTags: [[UInt8]]
    private var suppressed = TokenSet(values: true)
    private var hasSuppressed = false
    private(set) var seen: TokenSet
    /// A scheduled job's zones (the default first).
    private let zones: ZoneTable?
    /// A job with variants: each device's variant, and its messages.
    private let variants: PlanVariants?

    /// The stable shard of a token: FNV-1a (64-bit) of its bytes, modulo the shard count.
    public static func shard(of token: UnsafeBufferPointer<UInt8>, shards: Int) -> Int {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in token { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        return Int(h % UInt64(shards))
    }

    public init(job: CampaignJob, options: PlanOptions, feedback: FeedbackStore? = nil) throws(JobError) {
        self.job = job
        self.options = options
        try job.check(options.columns, origin: "--column")
        columns = job.columns.overridden(by: options.columns)
        let maxPayload = options.maxPayload ?? job.maxPayload
        guard (1...job.wire.maxPayloadBytes).contains(maxPayload) else {
            throw JobError(path: "--max-payload", reason: .maxPayloadOutOfRange(bytes: maxPayload, wire: job.wire))
        }
        guard (1...options.shards).contains(options.parts) else {
            throw JobError(path: "--parts", reason: .partsOutOfRange(parts: options.parts, shards: options.shards))
        }
        header = PlanHeader(
            campaign: job.campaign, wire: job.wire,
            expiry: job.expiresIn == 0 ? 0 : options.now &+ UInt32(job.expiresIn),
            priority: job.wire.carriesPriority ? job.priority : nil,
            maxPayload: maxPayload, shards: options.shards, created: options.now)
        header.run = options.run ?? {
            let hex = String(UInt64.random(in: 1...UInt64.max), radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }()
        if job.wire.isHTTP2 {
            let literal = job.collapseTemplate?.isLiteral ?? true
            header.http2 = PlanHeader.HTTP2Fields(topic: job.topic, pushType: job.pushType, collapseId: literal ? job.collapseId : nil,
                                                  collapseIdTemplate: literal ? nil : job.collapseId, broadcast: job.broadcast)
        }
        if let schedule = job.schedule {
            let database = ZoneDatabase()
            guard case .zone(let defaultZone) = database.zone(named: schedule.defaultZone) else {
                throw JobError(path: "defaultTimeZone", reason: .unknownTimeZone(schedule.defaultZone, database: database.directory))
            }
            zones = ZoneTable(database: database, defaultZone: defaultZone)
            header.schedule = schedule
        } else {
            zones = nil
        }
        variants = PlanVariants(job: job)
        header.variants = PlanVariants.header(job)
        header.frequencyCap = job.frequencyCap
        header.throttlePerMinute = job.throttlePerMinute
        renderer = PayloadRenderer(job: job, now: options.now, nowAtMoment: job.schedule != nil)
        selector = job.selector
        // An eighth over the estimate: it comes from the file's first lines and
        // can be a little low, and growing near the end would hold two tables
        // at once (a 1M-row NDJSON audience estimated at 999,129 rows peaked
        // at 133 MB instead of 78).
        seen = TokenSet(expectedCount: options.expectedRows + options.expectedRows / 8)
        messageTags = job.messages.map { m in
            var quoted: [UInt8] = []
            JSONText.appendString(Array(m.tag.utf8), to: &quoted)
            return quoted
        }
        if let feedback {
            for (token, ts) in feedback.entries {
                suppressed.insert(token, value: ts)
                hasSuppressed = true
            }
        }
    }

    /// The header of part `index` of ``PlanOptions/parts``.
    public func header(ofPart index: Int) -> PlanHeader {
        options.parts == 1 ? header : header.forPart(index, of: options.parts, campaignHash: options.campaignHash)
    }

    /// Reads every row, writes the plan (header, records, trailer) and the rejects.
    public func run(reader: AudienceReader, plan: PlanWriter, rejects: RejectsWriter?, holdout: HoldoutWriter? = nil) throws -> PlanSummary {
        try run(reader: reader, plans: [plan], rejects: rejects, holdout: holdout)
    }

    /// Reads every row and writes one plan per part (`plans[k]` is part `k`:
    /// header, the records of its shards, trailer) and the rejects.
    ///
    /// Three stages on three threads, in batches: a reading thread takes rows
    /// from `reader` (tokenizing); a preparing thread does what each row needs
    /// on its own (checks, language, payload, record line); this thread takes
    /// them in order and does what depends on the rows before
    /// (de-duplication, feedback, numbering, writing). Everything comes out
    /// as if one thread did it all.
    /// A job with a holdout variant: its devices go to `holdout`, neither planned nor rejected.
    public func run(reader: AudienceReader, plans: [PlanWriter], rejects: RejectsWriter?, holdout: HoldoutWriter? = nil) throws -> PlanSummary {
        precondition(plans.count == options.parts, "one writer per part")
        rejects?.namesChannels = job.broadcast
        // A CSV header is the whole schema: a variable it cannot supply would
        // reject every row that uses it, so say so before reading a row.
        if let csv = reader as? CSVAudienceReader {
            // (A variable with a default everywhere it is used needs no column.)
            let collapseNeeds = job.collapseTemplate?.parts.compactMap { part -> String? in
                if case .variable(let v) = part, v.defaultValue == nil { v.name } else { nil }
            } ?? []
            let needed = renderer.requiredVariables + collapseNeeds.filter { !renderer.requiredVariables.contains($0) }
            let missing = needed.filter { csv.schema.column(named: columns.source(of: $0)) == nil }
            if !missing.isEmpty {
                throw AudienceError(path: csv.path, reason: .noColumnForVariables(missing, columns: csv.schema.names))
            }
        }
        let started = monotonicSeconds()
        var summary = PlanSummary()
        // A scheduled plan is written once every row is read: its records
        // go in order of moment, and deliverAt's date depends on every zone.
        let spill = try zones.map { _ throws(IOError) in try ScheduleSpill(directory: Self.temporaryDirectory, parts: plans.count) }
        var defaultedZones = 0
        if spill == nil {
            for (k, plan) in plans.enumerated() { try plan.writeHeader(header(ofPart: k)) }
        }
        let parted = plans.count > 1
        let plan = plans[0]
        let rowReader = RowReader(reader: reader)
        let preparer = RowPreparer(renderer: renderer, selector: selector, messageTags: messageTags,
                                   wire: job.wire, maxPayload: header.maxPayload, shards: header.shards, parts: options.parts,
                                   collapse: job.collapseTemplate, columns: columns, zones: zones,
                                   broadcastExpires: job.broadcast ? job.expiresIn != 0 : nil, variants: variants)
        let reading = BatchPipeline(batches: (0..<8).map { _ in PreparedBatch(size: 1024) }) { rowReader.fill($0) }
        let pipeline = BatchPipeline(after: reading) { preparer.prepare($0) }
        defer { pipeline.stop() }
        var truncatedCounts = [Int](repeating: 0, count: job.messages.count)
        var plannedCounts = [Int](repeating: 0, count: job.messages.count)
        var defaultedCounts = [Int](repeating: 0, count: min(64, renderer.variables.count))
        var variantCounts = [Int](repeating: 0, count: job.variants.count)
        // Per part (one without parts): its records of each variant, for its trailer.
        var partVariantCounts = [[Int]](repeating: [Int](repeating: 0, count: job.variants.count), count: max(1, plans.count))

        func reject(_ batch: PreparedBatch, _ i: Int, _ code: RejectCode, _ reason: String, given: String? = nil) throws {
            summary.rejected[code, default: 0] += 1
            guard let rejects else { return }
            try batch.withToken(of: i) { try rejects.append(line: batch.prepared[i].line, token: $0, given: given, code: code, reason: reason) }
        }
        let duplicate = job.broadcast ? "duplicate channel: an earlier row has it (the first wins)" : "duplicate token: an earlier row has it (the first wins)"

        let lookahead = 8
        let rules = options.rules   // read once: through `options`, each row would retain its tables
        // The table is used from a local for the run: through the class's
        // property, every lookup retained and released its storage.
        var seen = TokenSet()
        swap(&seen, &self.seen)
        defer { swap(&seen, &self.seen) }
        while let batch = pipeline.next() {
            // The batch's rows are read through a pointer taken once per
            // batch, for the same reason.
            let count = batch.count
            let arena = batch.arena.all
            try batch.prepared.withUnsafeBufferPointer { prepared in
                for i in 0..<min(lookahead, count) where prepared[i].tokenCount > 0 {
                    seen.prefetch(width: Int(prepared[i].tokenCount), hash: prepared[i].tokenHash)
                }
                for i in 0..<count {
                    if i + lookahead < count, prepared[i + lookahead].kind != .rejectedOutright {
                        let ahead = prepared[i + lookahead]
                        seen.prefetch(width: Int(ahead.tokenCount), hash: ahead.tokenHash)
                        rules?.prefetch(UnsafeBufferPointer(rebasing: arena[Int(ahead.tokenStart)..<Int(ahead.tokenStart + ahead.tokenCount)]))
                    }
                    let p = prepared[i]
                    if p.kind == .rejectedOutright {
                        let r = batch.rejections[Int(p.rejection)]
                        try reject(batch, i, r.code, r.reason, given: r.given)
                        continue
                    }
                    let t = UnsafeBufferPointer(rebasing: arena[Int(p.tokenStart)..<Int(p.tokenStart + p.tokenCount)])
                    if seen.contains(t, hash: p.tokenHash) {
                        try reject(batch, i, .duplicateToken, duplicate)
                        continue
                    }
                    if hasSuppressed, let unregistered = suppressed.value(for: t) {
                        let registeredText = batch.rows[i].string(Int(p.registeredColumn))
                        let registered = registeredText.flatMap(Timestamp.parse)
                        if registered.map({ $0 <= Int64(unregistered) }) ?? true {
                            let detail: String
                            switch (registeredText, registered) {
                            case (nil, _): detail = "and the row has no registered_at"
                            case (let text?, nil): detail = "and registered_at \"\(text)\" is not a time"
                            case (_, let r?): detail = "and registered_at \(r) is not newer"
                            }
                            try reject(batch, i, .suppressedByFeedback, "suppressed by feedback: unregistered at \(unregistered) \(detail)")
                            continue
                        }
                    }
                    if p.kind == .heldOut, let variants {
                        seen.insert(t, hash: p.tokenHash)
                        // The rules first: a control group of devices the campaign
                        // could not have reached anyway would skew the comparison.
                        if let rules, let (code, reason) = rules.verdict(t) {
                            try reject(batch, i, code, reason)
                            continue
                        }
                        variantCounts[Int(p.variant)] += 1
                        try variants.quotedNames.withUnsafeBufferPointer { names in
                            try holdout?.append(line: p.line, token: t, variant: UnsafeBufferPointer(rebasing: names[variants.nameRanges[Int(p.variant)]]),
                                                timeZone: zones?.name(of: p.zone),
                                                row: UnsafeBufferPointer(rebasing: arena[Int(p.lineStart)..<Int(p.lineEnd)]))
                        }
                        continue
                    }
                    if p.kind == .rejectedUnlessDuplicate {
                        let r = batch.rejections[Int(p.rejection)]
                        try reject(batch, i, r.code, r.reason, given: r.given)
                        continue
                    }
                    seen.insert(t, hash: p.tokenHash)
                    if let rules, let (code, reason) = rules.verdict(t) {
                        try reject(batch, i, code, reason)
                        continue
                    }
                    let line = UnsafeBufferPointer(rebasing: arena[Int(p.lineStart)..<Int(p.lineEnd)])
                    if let spill {
                        try spill.append(key: spill.key(zone: p.zone, part: p.part), line: line)
                        if p.zoneDefaulted { defaultedZones += 1 }
                    } else {
                        try (parted ? plans[Int(p.part)] : plan).append(lineAfterSeq: line)
                    }
                    summary.planned += 1
                    if p.variant >= 0 {
                        variantCounts[Int(p.variant)] += 1
                        partVariantCounts[parted ? Int(p.part) : 0][Int(p.variant)] += 1
                    }
                    plannedCounts[Int(p.message)] += 1
                    if p.kind == .truncated { truncatedCounts[Int(p.message)] += 1 }
                    if p.defaulted != 0 {
                        for v in defaultedCounts.indices where p.defaulted & (1 << UInt64(v)) != 0 { defaultedCounts[v] += 1 }
                    }
                }
            }
            summary.rowsRead += count
            // An error comes after every row read before it, as the reader gave them.
            if let failure = batch.failure { throw failure }
            pipeline.recycle(batch)
        }
        if let spill, let zones { summary.schedule = try writeScheduled(spill, zones: zones, plans: plans, defaultedZones: defaultedZones) }
        // Each part's trailer counts its own records; rows and rejects are the whole audience's.
        for (k, plan) in plans.enumerated() {
            try plan.finish(rowsRead: summary.rowsRead, rejected: summary.rejectedTotal,
                            variants: job.variants.isEmpty ? nil : partVariantCounts[min(k, partVariantCounts.count - 1)])
        }
        for plan in plans { try plan.commit(syncingDirectory: !parted) }
        if parted { try SecureFile.syncDirectory(of: plan.path) }
        try rejects?.commit()
        // The plan is complete: its holdout takes the place of any earlier one.
        try holdout?.commit()
        // Variants may share tags: their counts add up.
        for (i, m) in job.messages.enumerated() {
            if plannedCounts[i] > 0 { summary.perLanguage[m.tag, default: 0] += plannedCounts[i] }
            if truncatedCounts[i] > 0 { summary.truncated[m.tag, default: 0] += truncatedCounts[i] }
        }
        summary.perVariant = job.variants.enumerated().map { VariantPlanCount(name: $1.name, holdout: $1.holdout, count: variantCounts[$0]) }
        for (v, n) in defaultedCounts.enumerated() where n > 0 { summary.defaulted[renderer.variables[v]] = n }
        summary.seconds = monotonicSeconds() - started
        return summary
    }
}

extension Planner {
    /// Where scheduled records wait while the audience is read: `$TMPDIR`, else /tmp.
    static var temporaryDirectory: String {
        if let t = getenv("TMPDIR"), t.pointee != 0 { return String(cString: t) }
        return "/tmp"
    }

    /// Gives every zone its moment, then writes the headers (with
    /// deliverAt's date) and the records, in order of moment.
    func writeScheduled(_ spill: ScheduleSpill, zones table: ZoneTable, plans: [PlanWriter], defaultedZones: Int) throws -> ScheduleSummary {
        let zones = table.all
        let counts = spill.counts
        let used = Set(counts.keys.map(spill.zone(of:)))
        let now = Int64(options.now)
        var moments = [Int64](repeating: now, count: zones.count)
        var summary = ScheduleSummary()
        summary.defaultedTimeZone = defaultedZones
        switch header.schedule {
        case .deliverAt(var d)?:
            let date = d.date ?? d.defaultDate(zones: used.sorted().map { zones[$0] }, now: now)
            d.date = date
            header.schedule = .deliverAt(d)
            summary.date = date.description
            for z in used { moments[z] = d.moment(in: zones[z], on: date) }
            if d.late == .skip, !counts.isEmpty, counts.keys.allSatisfy({ moments[spill.zone(of: $0)] + Int64(d.windowSeconds) < now }) {
                // A plan that would only be skipped is a mistake (a date past), not a campaign.
                throw ScheduleRefusal(reason: "every one of the \(counts.values.reduce(0, +)) devices' moments (\(d.localTime) on \(date)) is more than the window (\(d.windowSeconds) s) past, so late: skip would skip them all: give a date still to come, or late: send")
            }
        case .quietHours(let q)?:
            for z in used { moments[z] = q.nextAllowed(in: zones[z], atOrAfter: now) }
        case nil:
            break
        }
        let quiet = if case .quietHours? = header.schedule { true } else { false }
        for (k, plan) in plans.enumerated() { try plan.writeHeader(header(ofPart: k)) }
        // In order of moment; zones of one moment in the order met.
        let keys = counts.keys.sorted { a, b in
            let (ma, mb) = (moments[spill.zone(of: a)], moments[spill.zone(of: b)])
            return ma != mb ? ma < mb : a < b
        }
        for key in keys {
            let zone = spill.zone(of: key), part = spill.part(of: key)
            let fields = PlanWriter.scheduleFields(at: moments[zone], timeZone: quiet ? zones[zone].name : nil)
            let n = counts[key] ?? 0
            summary.perHour[moments[zone] - ((moments[zone] % 3600) + 3600) % 3600, default: 0] += n
            if moments[zone] < now { summary.pastAtPlanTime += n }
            let plan = plans[part]
            // A moment already past at plan time goes at once: its `{now}` is the plan time.
            let moment = max(moments[zone], now)
            try fields.withUnsafeBufferPointer { fields in
                try spill.forEachLine(key: key) { line in
                    guard renderer.usesNow else { return try plan.append(lineAfterSeq: line, fieldsAfterSeq: fields) }
                    // `{now}` is the record's moment, known only now.
                    var patched = Array(line)
                    PayloadRenderer.writeMoment(moment, into: &patched)
                    try patched.withUnsafeBufferPointer { try plan.append(lineAfterSeq: $0, fieldsAfterSeq: fields) }
                }
            }
        }
        return summary
    }
}

/// Seconds on the monotonic clock, for durations (the plan's own time is `PlanOptions.now`).
func monotonicSeconds() -> Double { Double(Deadline.now().nanoseconds) / 1e9 }

/// A scheduled job that cannot make a campaign as given (every record would
/// be skipped as late): the planner writes no plan.
public struct ScheduleRefusal: Error, Equatable, Sendable, CustomStringConvertible {
    public var reason: String
    public var description: String { "\(reason)." }
}
