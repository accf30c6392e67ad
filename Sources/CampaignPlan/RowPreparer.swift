#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import PlanStream

/// Reads audience rows into batches, on the reading thread: the first stage.
final class RowReader: @unchecked Sendable {
    private let reader: AudienceReader
    private var schemaCount = -1

    init(reader: AudienceReader) { self.reader = reader }

    /// Fills `batch` with the next rows; false when they were the last.
    func fill(_ batch: PreparedBatch) -> Bool {
        batch.failure = nil
        // Through buffer pointers: an element of the batch's arrays passed
        // inout checked the array's uniqueness for every row.
        var count = 0
        batch.rows.withUnsafeMutableBufferPointer { rows in
            batch.records.withUnsafeMutableBufferPointer { records in
                do {
                    while count < rows.count {
                        guard let record = try reader.next(into: &rows[count]) else {
                            batch.ended = true
                            break
                        }
                        records[count] = record
                        count += 1
                    }
                } catch {
                    batch.failure = error
                    batch.ended = true
                }
            }
        }
        batch.count = count
        // The schema changes on this thread (NDJSON keys): the preparing
        // stage gets a copy of the names with the batch.
        if reader.schema.count != schemaCount {
            schemaCount = reader.schema.count
            batch.schemaNames = reader.schema.names
        } else {
            batch.schemaNames = []
        }
        return !batch.ended
    }
}

/// Prepares the rows of a batch read, on the preparing thread: UTF-8 and
/// token checks, the message for the row's language, the payload rendered
/// and fitted, and the record line around it.
final class RowPreparer: @unchecked Sendable {
    /// The reader's columns, as of the batch being prepared.
    private let schema = AudienceSchema()
    private let renderer: PayloadRenderer
    private let selector: MessageSelector
    /// Every message's tag, quoted, one after another (one borrow per row).
    // Scratch and constant bytes behind pointers allocated once: an Array
    // property used inside a row's closures was retained and released for
    // every row (callgrind: 3 pairs a row here).
    private let messageTags: UnsafeMutableBufferPointer<UInt8>
    private let messageTagRanges: [Range<Int>]
    private let wire: WireProtocol
    /// Where the token, language, registration and variables' columns are.
    private let mapping: ColumnMapping
    private let maxPayload: Int
    private let shards: Int
    private let parts: Int
    /// h2: a collapseId template with variables, rendered per row; its columns.
    private let collapse: Template?
    private var collapseColumns: [Int] = []
    private var languageCache = LanguageCache()
    private var schemaCount = -1
    private var columns: [Int] = []
    private var tokenColumn: Int? = nil, registeredColumn: Int? = nil
    /// A broadcast: its job's `expiresIn` is not 0, and the audience's `storage` column (when it has one).
    private let broadcastExpires: Bool?
    private var storageColumn: Int? = nil
    /// `lang`, `language`, `locale`, as present: a row's language is the first
    /// of them that is not empty (an export may fill only `locale`).
    private var langColumns: [Int] = []
    private let token = UnsafeMutablePointer<UInt8>.allocate(capacity: max(128, ChannelID.maxBytes))
    /// A scheduled job: the zones met so far, and the zone column.
    private let zones: ZoneTable?
    private var zoneColumn: Int? = nil
    private var zoneCache = ZoneCache()
    /// A job with variants: the variants, and a language cache per variant.
    private let variants: PlanVariants?
    private var variantLanguageCaches: [LanguageCache] = []

    init(renderer: PayloadRenderer, selector: MessageSelector, messageTags: [[UInt8]],
         wire: WireProtocol, maxPayload: Int, shards: Int, parts: Int = 1, collapse: Template? = nil,
         columns mapping: ColumnMapping = ColumnMapping(), zones: ZoneTable? = nil, broadcastExpires: Bool? = nil,
         variants: PlanVariants? = nil) {
        self.variants = variants
        variantLanguageCaches = Array(repeating: LanguageCache(), count: variants?.names.count ?? 0)
        self.mapping = mapping
        self.broadcastExpires = broadcastExpires
        self.zones = zones
        self.renderer = renderer
        self.selector = selector
        let tags = messageTags.flatMap { $0 }
        self.messageTags = .allocate(capacity: tags.count)
        _ = self.messageTags.initialize(from: tags)
        var ranges: [Range<Int>] = [], start = 0
        for tag in messageTags { ranges.append(start..<(start + tag.count)); start += tag.count }
        messageTagRanges = ranges
        self.wire = wire
        self.maxPayload = maxPayload
        self.shards = shards
        self.parts = parts
        self.collapse = collapse.flatMap { $0.isLiteral ? nil : $0 }
    }

    deinit {
        token.deallocate()
        messageTags.deallocate()
    }

    /// Prepares every row of `batch`, in place.
    func prepare(_ batch: PreparedBatch) {
        batch.rejections.removeAll(keepingCapacity: true)
        batch.arena.removeAll()
        for name in batch.schemaNames { schema.add(name) }
        // The schema changes only between batches (the reader sends new names with one).
        if schema.count != schemaCount {
            schemaCount = schema.count
            columns = renderer.variables.map { schema.column(named: mapping.source(of: $0)) ?? -1 }
            collapseColumns = collapse?.variables.map { schema.column(named: mapping.source(of: $0)) ?? -1 } ?? []
            tokenColumn = schema.column(anyOf: mapping.tokenNames)
            langColumns = schema.columns(anyOf: mapping.languageNames)
            registeredColumn = schema.column(anyOf: mapping.registeredNames)
            zoneColumn = schema.column(anyOf: mapping.timeZoneNames)
            storageColumn = broadcastExpires == nil ? nil : schema.column(anyOf: mapping.storageNames)
        }
        // Passed down rather than read from the property at each row (a retain and a release).
        let columns = self.columns
        // Each row is swapped into a local while it is prepared: a row used
        // from the batch's array would be retained per use.
        var row = AudienceRow()
        for i in 0..<batch.count {
            swap(&row, &batch.rows[i])
            let record = batch.records[i]!
            var p = prepare(record, row: row, in: batch, columns: columns)
            if case .malformed(let line, _, _) = record { p.line = line } else { p.line = row.line }
            batch.prepared[i] = p
            swap(&row, &batch.rows[i])
        }
    }

    /// The row's zone in `table` (0 with `defaulted` for an empty or unknown
    /// one), nil for an invalid one: its bytes trimmed of ASCII blanks, looked
    /// up in this thread's cache first, so no String is made per row.
    private func zoneNumber(_ row: AudienceRow, table: ZoneTable, defaulted: inout Bool) -> Int32? {
        guard let range = row.range(of: zoneColumn) else {
            defaulted = true
            return 0
        }
        var lower = range.lowerBound, upper = range.upperBound
        var wasDefaulted = false
        var number: Int32? = 0
        row.storage.withUnsafeBufferPointer { (storage: UnsafeBufferPointer<UInt8>) -> Void in
            while lower < upper, storage[lower] == 0x20 || storage[lower] == 0x09 { lower += 1 }
            while upper > lower, storage[upper - 1] == 0x20 || storage[upper - 1] == 0x09 { upper -= 1 }
            guard lower < upper else {
                wasDefaulted = true
                return
            }
            number = zoneCache.number(of: UnsafeBufferPointer(rebasing: storage[lower..<upper]), table: table, defaulted: &wasDefaulted)
        }
        defaulted = wasDefaulted
        return number
    }

    private func rejected(_ kind: PreparedRow.Kind, _ code: RejectCode, _ reason: String, token: PreparedRow? = nil,
                          given: String? = nil, in batch: PreparedBatch) -> PreparedRow {
        var p = token ?? PreparedRow()
        p.kind = kind
        p.rejection = Int32(batch.rejections.count)
        batch.rejections.append(Rejection(code: code, reason: reason, given: given))
        return p
    }

    private func prepare(_ record: AudienceRecord, row: AudienceRow, in batch: PreparedBatch, columns: [Int]) -> PreparedRow {
        if case .malformed(_, let reason, let tokenText) = record {
            var p = PreparedRow()
            if let tokenText, let t = DeviceToken(hex: tokenText) {
                p.tokenStart = Int32(batch.arena.count)
                p.tokenCount = Int32(t.bytes.count)
                batch.arena.append(t.bytes)
            }
            return rejected(.rejectedOutright, .malformedRow, "malformed row: \(reason)", token: p, in: batch)
        }
        guard row.storage.withUnsafeBufferPointer({ PayloadInspector.isValidUTF8($0) }) else {
            return rejected(.rejectedOutright, .malformedRow, "malformed row: it is not valid UTF-8", in: batch)
        }
        guard let tokenRange = row.range(of: tokenColumn) else {
            if broadcastExpires != nil { return rejected(.rejectedOutright, .missingChannel, "missing channel id", in: batch) }
            return rejected(.rejectedOutright, .missingToken, "missing token", in: batch)
        }
        if broadcastExpires != nil { return prepareChannel(row: row, tokenRange: tokenRange, in: batch, columns: columns) }
        let parsed = row.storage.withUnsafeBufferPointer { storage in
            DeviceToken.parseHex(UnsafeBufferPointer(rebasing: storage[tokenRange]), into: token, maxBytes: 100)
        }
        let tokenCount: Int
        switch parsed {
        case .bytes(let n): tokenCount = n
        case .empty: return rejected(.rejectedOutright, .missingToken, "missing token", in: batch)
        case .notHex: return rejected(.rejectedOutright, .invalidToken, "invalid token: not hex", in: batch)
        case .tooLong: return rejected(.rejectedOutright, .invalidToken, "invalid token: longer than 100 bytes", in: batch)
        }
        var p = PreparedRow()
        p.tokenStart = Int32(batch.arena.count)
        p.tokenCount = Int32(tokenCount)
        p.registeredColumn = Int32(registeredColumn ?? -1)
        let t = UnsafeBufferPointer(start: token, count: tokenCount)
        batch.arena.append(t)
        // Every row with a usable token needs its hash, rejected later or
        // not: the planning thread looks each one up as a duplicate first.
        p.tokenHash = TokenSet.hash(t)
        // Commands 0 and 1 (and APNs over HTTP/2) have 32-byte tokens; frames (command 2) take any length up to the maximum.
        if wire != .binary(.frame), tokenCount != 32 {
            return rejected(.rejectedOutright, .invalidToken, "invalid token: \(tokenCount) bytes where the \(wire) format takes 32", token: p, in: batch)
        }
        if tokenCount > wire.maxTokenBytes {
            return rejected(.rejectedOutright, .invalidToken, "invalid token: \(tokenCount) bytes, more than \(wire.maxTokenBytes)", token: p, in: batch)
        }
        return prepareMessage(row: row, p, token: t, in: batch, columns: columns)
    }

    /// A broadcast's row: its channel id, decoded from base64 into the
    /// token's place (so de-duplication, shards and the dead-channel store
    /// work as for devices), and what its `storage` column allows.
    private func prepareChannel(row: AudienceRow, tokenRange: Range<Int>, in batch: PreparedBatch, columns: [Int]) -> PreparedRow {
        let text = row.storage.withUnsafeBufferPointer { String(decoding: $0[tokenRange], as: UTF8.self) }
        guard let channel = ChannelID(base64: text) else {
            return rejected(.rejectedOutright, .invalidChannel,
                            "invalid channel id: \(ChannelID.problem(with: text)?.description ?? "not base64")", given: text, in: batch)
        }
        var p = PreparedRow()
        p.tokenStart = Int32(batch.arena.count)
        p.tokenCount = Int32(channel.bytes.count)
        p.registeredColumn = -1
        batch.arena.append(channel.bytes)
        for (i, b) in channel.bytes.enumerated() { token[i] = b }
        let t = UnsafeBufferPointer(start: token, count: channel.bytes.count)
        p.tokenHash = TokenSet.hash(t)
        if broadcastExpires == true, let policy = row.string(storageColumn).map({ String($0.trimmingWhitespace()) }),
           Broadcast.StoragePolicy(name: policy) == .noneStored {
            return rejected(.rejectedUnlessDuplicate, .channelStoresNothing,
                            "channel stores no messages (storage \(policy)): APNs refuses a nonzero apns-expiration there; give the job \"expiresIn\": 0", token: p, in: batch)
        }
        return prepareMessage(row: row, p, token: t, in: batch, columns: columns)
    }

    /// The rest of a row whose token (or channel) is usable: its zone, message, collapse id and payload.
    private func prepareMessage(row: AudienceRow, _ p: PreparedRow, token t: UnsafeBufferPointer<UInt8>, in batch: PreparedBatch, columns: [Int]) -> PreparedRow {
        var p = p
        if let variants { p.variant = Int32(variants.assigner.variant(of: t)) }
        if let zones {
            // The zone's bytes, trimmed of ASCII blanks; a table of those met
            // (a few hundred at most) answers without making a String.
            let number = zoneNumber(row, table: zones, defaulted: &p.zoneDefaulted)
            guard let number else {
                let text = row.string(zoneColumn).map { String($0.trimmingWhitespace()) } ?? ""
                return rejected(.rejectedUnlessDuplicate, .invalidTimeZone,
                                "invalid time zone \"\(text)\": not a zone name (such as Europe/Berlin) or an offset (such as +05:30)", token: p, in: batch)
            }
            p.zone = number
        }
        // A holdout's device gets nothing: its row (and zone, for the moment it
        // would have had) is kept for the holdout file. Its zone is checked
        // first, as a sent device's is: the control group holds only devices
        // the campaign could have reached.
        if let variants, variants.holdout[Int(p.variant)] { return variants.heldOut(row: row, p, schema: schema, in: batch) }
        var langColumn = langColumns.first
        if langColumns.count > 1 { langColumn = langColumns.first { row.range(of: $0) != nil } ?? langColumn }
        let message = row.storage.withUnsafeBufferPointer { storage -> Int? in
            if let variants {
                let v = Int(p.variant), selector = variants.selectors[v]
                guard let r = row.range(of: langColumn) else { return selector.select(nil).map { $0 + variants.firstMessage[v] } }
                return variantLanguageCaches[v].message(for: UnsafeBufferPointer(rebasing: storage[r]), selector: selector).map { $0 + variants.firstMessage[v] }
            }
            guard let r = row.range(of: langColumn) else { return selector.select(nil) }
            return languageCache.message(for: UnsafeBufferPointer(rebasing: storage[r]), selector: selector)
        }
        guard let message else {
            return rejected(.rejectedUnlessDuplicate, .noMessage,
                            "no message for language \"\(row.string(langColumn) ?? "")\" and none in the fallback chain", token: p, in: batch)
        }
        p.message = Int32(message)
        p.lineStart = Int32(batch.arena.count)
        let tagRange = messageTagRanges[message]
        var collapseId: [UInt8]? = nil
        if let collapse {
            var rendered: [UInt8] = []
            for part in collapse.parts {
                switch part {
                case .literal(let bytes): rendered += bytes
                case .variable(let v):
                    let column = collapseColumns[collapse.variables.firstIndex(of: v.name)!]
                    guard let r = row.range(of: column), !r.isEmpty else {
                        guard let text = v.defaultValue else {
                            return rejected(.rejectedUnlessDuplicate, .missingVariable, "missing variable {\(v.name)} (used by collapseId)", token: p, in: batch)
                        }
                        rendered += Array(text.utf8)
                        continue
                    }
                    row.storage.withUnsafeBufferPointer { rendered += $0[r] }
                }
            }
            guard !rendered.isEmpty, rendered.count <= 64 else {
                return rejected(.rejectedUnlessDuplicate, .invalidCollapseId,
                                "invalid collapse id: \(rendered.count) bytes after rendering, where APNs takes 1 to 64", token: p, in: batch)
            }
            guard !rendered.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                return rejected(.rejectedUnlessDuplicate, .invalidCollapseId,
                                "invalid collapse id: it holds a control character, which a header cannot carry", token: p, in: batch)
            }
            collapseId = rendered
        }
        let shard = Planner.shard(of: t, shards: shards)
        if parts > 1 { p.part = Int32(shard % parts) }
        if let variants {
            variants.quotedNames.withUnsafeBufferPointer { names in
                PlanRecord.appendFieldsBeforePayload(shard: shard, token: t, lang: UnsafeBufferPointer(rebasing: messageTags[tagRange]), collapseId: collapseId,
                                                     variant: UnsafeBufferPointer(rebasing: names[variants.nameRanges[Int(p.variant)]]), to: batch.arena)
            }
        } else {
            PlanRecord.appendFieldsBeforePayload(shard: shard, token: t, lang: UnsafeBufferPointer(rebasing: messageTags[tagRange]),
                                                 collapseId: collapseId, to: batch.arena)
        }
        let outcome = renderer.render(message: message, row: row, columns: columns, maxBytes: maxPayload, appendingTo: batch.arena,
                                      defaulted: &p.defaulted)
        let failure: Rejection?
        switch outcome {
        case .fitted:
            p.kind = .ready
            failure = nil
        case .truncated:
            p.kind = .truncated
            failure = nil
        case .missingVariable(let name):
            failure = Rejection(code: .missingVariable, reason: "missing variable \(name)")
        case .invalidBadge(let value):
            failure = Rejection(code: .invalidBadge, reason: "badge \"\(value)\" is not a whole number of at least 0")
        case .invalidValue(let name, let type, let value):
            failure = type == .bool
                ? Rejection(code: .invalidBool, reason: "{\(name):bool} \"\(value)\" is not true or false")
                : Rejection(code: .invalidNumber, reason: "{\(name):\(type.rawValue)} \"\(value)\" is not \(type == .int ? "a whole number" : "a number")")
        case .invalidChannelID(let name, let value):
            failure = Rejection(code: .invalidChannelID, reason: "{\(name)} \"\(value)\" is not a channel id (canonical base64) for input-push-channel")
        case .cannotFit(let minimum):
            failure = Rejection(code: .cannotFit, reason: broadcastExpires == nil
                ? "cannot fit: the payload needs \(minimum) bytes even with an empty alert, over the \(maxPayload)-byte limit"
                : "cannot fit: the payload is \(minimum) bytes, over a broadcast's \(maxPayload)-byte limit (a broadcast has no alert to shorten)")
        }
        if let failure {
            batch.arena.truncate(to: Int(p.lineStart))
            return rejected(.rejectedUnlessDuplicate, failure.code, failure.reason, token: p, in: batch)
        }
        PlanRecord.appendEnd(to: batch.arena)
        p.lineEnd = Int32(batch.arena.count)
        return p
    }
}
