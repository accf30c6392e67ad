import APNSWire
import CampaignIO
import CampaignJSON
import ByteStreams

/// Reads a plan stream, checking as it goes that records come in order and,
/// at the trailer, that their count and checksum match. A plan without a
/// trailer reads to its end and reports itself incomplete.
public final class PlanReader {
    public let path: String
    public let header: PlanHeader
    /// Set once the trailer has been read and verified.
    public private(set) var trailer: PlanTrailer?
    public private(set) var recordsRead = 0
    private let lines: LineReader
    private var lineNumber = 1
    private var done = false

    public var isComplete: Bool { trailer != nil }

    public init(source: ByteSource, path: String) throws {
        self.path = path
        lines = LineReader(source: source, maxLineBytes: 1 << 16)
        guard case .text(let number)? = try lines.next() else { throw PlanError(path: path, line: 1, reason: .empty) }
        let value: JSONValue
        do {
            value = try lines.withCurrentLine { try JSONValue.parse($0) }
        } catch {
            throw PlanError(path: path, line: number, reason: .noHeader)
        }
        do { header = try PlanHeader(json: value) } catch { throw PlanError(path: path, line: number, reason: error) }
        maxTokenBytes = header.maxTokenBytes
        tokenScratch = [UInt8](repeating: 0, count: maxTokenBytes)
    }

    /// Called before every read from the plan's source, which may block (a
    /// pipe from `campaign plan`): the place to hand on batched work.
    public var beforeRead: (() -> Void)? {
        get { lines.beforeRead }
        set { lines.beforeRead = newValue }
    }

    /// Throws ``PlanError/Reason/noTrailer`` unless the plan file at `path`
    /// ends with a valid trailer line: `send` checks this before it sends
    /// anything, so a plan whose planner failed is refused whole rather than
    /// sent in part. A plain file's last line is read; a gzip plan is read
    /// through (count and checksum verified).
    /// Returns the record count the trailer gives.
    @discardableResult
    public static func checkComplete(path: String) throws -> Int {
        try completeTrailer(path: path)?.records ?? -1
    }

    /// ``checkComplete(path:)``'s trailer (nil for a pipe).
    public static func completeTrailer(path: String) throws -> PlanTrailer? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw IOError(path: path, reason: "cannot be opened: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }   // a pipe: checked as it is read
        let size = Int(info.st_size)
        var magic = [UInt8](repeating: 0, count: 2)
        if size >= 2, pread(fd, &magic, 2, 0) == 2, magic == [0x1F, 0x8B] {
            let reader = try PlanReader(path: path)
            while try reader.nextView({ _ in }) {}
            guard let trailer = reader.trailer else { throw PlanError(path: path, line: 0, reason: .noTrailer) }
            return trailer
        }
        let count = min(size, 1 << 16)
        var tail = [UInt8](repeating: 0, count: count)
        guard count > 0, pread(fd, &tail, count, off_t(size - count)) == count else {
            throw PlanError(path: path, line: 0, reason: .noTrailer)
        }
        var end = tail.count
        while end > 0, tail[end - 1] == 0x0A || tail[end - 1] == 0x0D || tail[end - 1] == 0x20 { end -= 1 }
        let start = tail[..<end].lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
        let value = try? tail[start..<end].withUnsafeBytes { try JSONValue.parse($0) }
        guard let trailer = PlanTrailer(trailer: value?["trailer"]) else {
            throw PlanError(path: path, line: 0, reason: .noTrailer)
        }
        return trailer
    }

    public convenience init(path: String) throws {
        try self.init(source: InputFile.open(path), path: path == "-" ? "standard input" : path)
    }

    /// One record, seen in place: the token is decoded into a scratch buffer
    /// and the payload is a slice of the line just read. Valid only inside
    /// ``nextView(_:)``'s closure: nothing is copied or allocated per record.
    public struct RecordView {
        public var seq: UInt64
        public var shard: Int
        public var token: UnsafeBufferPointer<UInt8>
        /// The message chosen (the text inside the JSON string).
        public var lang: UnsafeRawBufferPointer
        public var payload: UnsafeRawBufferPointer
        /// h2 with a collapseId template: this record's collapse id (decoded); nil otherwise.
        public var collapseId: UnsafeRawBufferPointer? = nil
        /// A scheduled campaign's: the moment the record may go (UNIX seconds).
        public var at: Int64? = nil
        /// Quiet hours: the device's zone (the text inside the JSON string).
        public var timeZone: UnsafeRawBufferPointer? = nil
        /// A plan with variants: the record's, by index into the header's `variants`; -1 without.
        public var variant = -1
    }

    /// The header's, once: it is asked of every record.
    private let maxTokenBytes: Int
    /// Each record's token, decoded in place. Not lazy: a lazy array passed
    /// inout is read out and written back, a copy of it for every record.
    private var tokenScratch: [UInt8] = []

    /// Calls `body` with the next record, checked as ``next()`` checks it except
    /// that the payload is not parsed (the planner made it; the gateway checks it
    /// again and refuses a bad one with status 7). False after the trailer or at
    /// the end of an incomplete plan.
    public func nextView(_ body: (RecordView) throws -> Void) throws -> Bool {
        guard !done else { return false }
        while true {
            guard let line = try lines.next() else {
                done = true
                return false
            }
            guard case .text(let number) = line else {
                throw PlanError(path: path, line: lineNumber + 1, reason: .badRecord("the line is longer than 64 KiB"))
            }
            lineNumber = number
            let kind = lines.withCurrentLine { b -> Int in
                // A record starts with "{": only a line starting with white
                // space needs the whole-line scan for blankness.
                if b.isEmpty || b[0] == 0x0A || b[0] == 0x0D || b[0] == 0x20,
                   b.allSatisfy({ $0 == 0x0A || $0 == 0x0D || $0 == 0x20 }) { return 0 }
                let trailer: StaticString = #"{"trailer":"#
                return b.count >= trailer.utf8CodeUnitCount
                    && memcmp(b.baseAddress!, trailer.utf8Start, trailer.utf8CodeUnitCount) == 0 ? 1 : 2
            }
            if kind == 0 { continue }
            if trailer != nil { throw PlanError(path: path, line: number, reason: .afterTrailer) }
            if kind == 1 { try readTrailer(number); continue }
            lines.checksumCurrentLine()
            let handled = try lines.withCurrentLine { bytes throws -> Bool in
                guard let fast = Self.fastView(bytes, token: &tokenScratch) else { return false }
                try check(seq: fast.seq, shard: fast.shard, tokenCount: fast.tokenCount, payloadCount: fast.payload.count, line: number)
                try checkSchedule(at: fast.at, line: number)
                let variant = try checkVariant(fast.variant, line: number)
                try tokenScratch.withUnsafeBufferPointer { t in
                    try body(RecordView(seq: fast.seq, shard: fast.shard, token: UnsafeBufferPointer(rebasing: t[0..<fast.tokenCount]),
                                        lang: fast.lang, payload: fast.payload, collapseId: fast.collapseId, at: fast.at, timeZone: fast.timeZone,
                                        variant: variant))
                }
                return true
            }
            if !handled {
                // Not the layout PlanWriter writes: read it the general way.
                let record = try lines.withCurrentLine { try Self.genericRecord($0, path: path, line: number) }
                try check(seq: record.seq, shard: record.shard, tokenCount: record.token.count, payloadCount: record.payload.count, line: number)
                try checkSchedule(at: record.at, line: number)
                let variantName = Array((record.variant ?? "").utf8)
                let variant = try variantName.withUnsafeBytes { try checkVariant(record.variant == nil ? nil : $0, line: number) }
                var lang = Array(record.lang.utf8)
                let collapse = record.collapseId.map { Array($0.utf8) }
                let zone = record.timeZone.map { Array($0.utf8) } ?? []
                try record.token.withUnsafeBufferPointer { t in
                    try record.payload.withUnsafeBytes { p in
                        try lang.withUnsafeMutableBytes { l in
                            try zone.withUnsafeBytes { z in
                                let tz = record.timeZone == nil ? nil : z
                                if let collapse {
                                    try collapse.withUnsafeBytes { c in
                                        try body(RecordView(seq: record.seq, shard: record.shard, token: t, lang: UnsafeRawBufferPointer(l), payload: p,
                                                            collapseId: c, at: record.at, timeZone: tz, variant: variant))
                                    }
                                } else {
                                    try body(RecordView(seq: record.seq, shard: record.shard, token: t, lang: UnsafeRawBufferPointer(l), payload: p,
                                                        at: record.at, timeZone: tz, variant: variant))
                                }
                            }
                        }
                    }
                }
            }
            recordsRead += 1
            return true
        }
    }

    /// A plan with variants: each record names one of its header's, not a holdout; others name none.
    private func checkVariant(_ name: UnsafeRawBufferPointer?, line number: Int) throws -> Int {
        guard let name else {
            if !header.variants.isEmpty { throw PlanError(path: path, line: number, reason: .badRecord("no \"variant\" in a plan with variants")) }
            return -1
        }
        guard let i = header.variantIndex(name) else {
            throw PlanError(path: path, line: number, reason: .badRecord("variant \"\(String(decoding: name, as: UTF8.self))\" is not one of the header's variants"))
        }
        guard !header.variants[i].holdout else {
            throw PlanError(path: path, line: number, reason: .badRecord("variant \"\(header.variants[i].name)\" is a holdout: its devices are never sent"))
        }
        return i
    }

    /// A scheduled plan's records each carry their moment, in order of moment; others carry none.
    private var lastMoment: Int64 = .min
    private func checkSchedule(at: Int64?, line number: Int) throws {
        guard header.schedule != nil else {
            if at != nil { throw PlanError(path: path, line: number, reason: .badRecord("\"at\" in a plan that is not scheduled (its header has no schedule)")) }
            return
        }
        guard let at else { throw PlanError(path: path, line: number, reason: .badRecord("a scheduled plan's record needs \"at\", its moment")) }
        guard at >= lastMoment else {
            throw PlanError(path: path, line: number, reason: .badRecord("moment \(at) comes before the previous record's \(lastMoment): a scheduled plan is in order of moment"))
        }
        lastMoment = at
    }

    private func check(seq: UInt64, shard: Int, tokenCount: Int, payloadCount: Int, line number: Int) throws {
        let expected = UInt64(recordsRead + 1)
        guard seq == expected else {
            throw PlanError(path: path, line: number, reason: .outOfOrder(expected: expected, found: seq))
        }
        guard shard >= 0, shard < header.shards else {
            throw PlanError(path: path, line: number, reason: .badRecord("shard \(shard) is outside 0..<\(header.shards)"))
        }
        if let part = header.part, !part.holds(shard: shard) {
            throw PlanError(path: path, line: number, reason: .badRecord("shard \(shard) does not belong to part \(part.index) of \(part.count) (its shards are those with shard mod \(part.count) = \(part.index))"))
        }
        guard tokenCount > 0, tokenCount <= maxTokenBytes else {
            throw PlanError(path: path, line: number, reason: .badRecord(header.http2?.broadcast == true
                ? "a \(tokenCount)-byte channel id is more than the \(header.maxTokenBytes) bytes campaign takes"
                : "a \(tokenCount)-byte token does not fit the \(header.wire) format"))
        }
        guard payloadCount > 1, payloadCount <= header.maxPayload else {
            throw PlanError(path: path, line: number, reason: .badRecord("a \(payloadCount)-byte payload is over the plan's \(header.maxPayload)-byte limit"))
        }
    }

    /// The next record as a value, its payload also checked to be a JSON object
    /// with an `aps` dictionary; nil after the trailer or at the end of an
    /// incomplete plan. (The sender uses ``nextView(_:)``, which copies nothing.)
    public func next() throws -> PlanRecord? {
        var record: PlanRecord? = nil
        let number = lineNumber
        _ = try nextView { v in
            record = PlanRecord(seq: v.seq, shard: v.shard, token: Array(v.token),
                                lang: String(decoding: v.lang, as: UTF8.self), payload: Array(v.payload),
                                collapseId: v.collapseId.map { String(decoding: $0, as: UTF8.self) },
                                at: v.at, timeZone: v.timeZone.map { String(decoding: $0, as: UTF8.self) })
            if v.variant >= 0 { record?.variant = header.variants[v.variant].name }
        }
        if let record, PayloadInspector.problem(in: record.payload) != nil {
            throw PlanError(path: path, line: max(number + 1, lineNumber), reason: .badRecord("the payload is not a JSON object with an aps dictionary"))
        }
        return record
    }

    private func readTrailer(_ number: Int) throws {
        let value = try? lines.withCurrentLine { try JSONValue.parse($0) }
        guard let t = value?["trailer"], let records = t["records"]?.integerValue, let sum = t["crc32"]?.stringValue else {
            throw PlanError(path: path, line: number, reason: .badRecord("invalid trailer"))
        }
        guard Int(records) == recordsRead else {
            throw PlanError(path: path, line: number, reason: .countMismatch(trailer: Int(records), read: recordsRead))
        }
        lines.flushChecksum()
        let computed = lines.checksum.hex
        guard sum == computed else {
            throw PlanError(path: path, line: number, reason: .checksumMismatch(trailer: sum, computed: computed))
        }
        trailer = PlanTrailer(trailer: t)
    }

    /// The layout `PlanWriter` writes, read in place: the token decoded into
    /// `token`, the payload a slice of `b`.
    static func fastView(_ b: UnsafeRawBufferPointer, token: inout [UInt8])
        -> (seq: UInt64, shard: Int, tokenCount: Int, lang: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, collapseId: UnsafeRawBufferPointer?,
            at: Int64?, timeZone: UnsafeRawBufferPointer?, variant: UnsafeRawBufferPointer?)? {
        var p = 0
        func expect(_ text: StaticString) -> Bool {
            let n = text.utf8CodeUnitCount
            guard b.count - p >= n, memcmp(b.baseAddress! + p, text.utf8Start, n) == 0 else { return false }
            p += n
            return true
        }
        func number() -> UInt64? {
            var v: UInt64 = 0
            let start = p
            while p < b.count, b[p] >= 0x30, b[p] <= 0x39, p - start < 19 { v = v &* 10 &+ UInt64(b[p] &- 0x30); p += 1 }
            return p > start ? v : nil
        }
        guard expect(#"{"seq":"#), let seq = number() else { return nil }
        var at: Int64? = nil, timeZone: UnsafeRawBufferPointer? = nil
        if expect(#","at":"#) {
            guard let n = number() else { return nil }
            at = Int64(n)
            if expect(#","tz":""#) {
                let start = p
                while p < b.count, b[p] != UInt8(ascii: "\""), b[p] != UInt8(ascii: "\\") { p += 1 }
                guard p < b.count, b[p] == UInt8(ascii: "\"") else { return nil }
                timeZone = UnsafeRawBufferPointer(rebasing: b[start..<p])
                p += 1
            }
        }
        guard expect(#","shard":"#), let shard = number(),
              expect(#","token":""#) else { return nil }
        // A table lookup per digit: the branchy decoder was a tenth of send's CPU.
        let count = HexEncoding.digitValues.withUnsafeBufferPointer { table in
            token.withUnsafeMutableBufferPointer { out -> Int in
                var count = 0
                while p + 1 < b.count, b[p] != UInt8(ascii: "\""), count < out.count {
                    let h = table[Int(b[p])], l = table[Int(b[p + 1])]
                    if (h | l) & 0xF0 != 0 { return -1 }
                    out[count] = h << 4 | l
                    count += 1
                    p += 2
                }
                return count
            }
        }
        guard count >= 0, expect(#"","lang":""#) else { return nil }
        let langStart = p
        while p < b.count, b[p] != UInt8(ascii: "\""), b[p] != UInt8(ascii: "\\") { p += 1 }
        guard p < b.count, b[p] == UInt8(ascii: "\"") else { return nil }
        let lang = UnsafeRawBufferPointer(rebasing: b[langStart..<p])
        p += 1
        var collapseId: UnsafeRawBufferPointer? = nil
        if expect(#","collapse_id":""#) {
            // Without escapes the JSON text is the value; with one, the general reader decodes it.
            let start = p
            while p < b.count, b[p] != UInt8(ascii: "\""), b[p] != UInt8(ascii: "\\") { p += 1 }
            guard p < b.count, b[p] == UInt8(ascii: "\"") else { return nil }
            collapseId = UnsafeRawBufferPointer(rebasing: b[start..<p])
            // Anything but a plain valid value is left to the general reader, which says what is wrong.
            guard collapseProblem(collapseId!) == nil,
                  PayloadInspector.isValidUTF8(UnsafeBufferPointer(start: collapseId!.baseAddress?.assumingMemoryBound(to: UInt8.self), count: collapseId!.count)) else { return nil }
            p += 1
        }
        var variant: UnsafeRawBufferPointer? = nil
        if expect(#","variant":""#) {
            let start = p
            while p < b.count, b[p] != UInt8(ascii: "\""), b[p] != UInt8(ascii: "\\") { p += 1 }
            guard p < b.count, b[p] == UInt8(ascii: "\"") else { return nil }
            variant = UnsafeRawBufferPointer(rebasing: b[start..<p])
            p += 1
        }
        guard expect(#","payload":"#) else { return nil }
        var end = b.count
        while end > p, b[end - 1] == 0x0A || b[end - 1] == 0x0D { end -= 1 }
        guard end > p, b[end - 1] == UInt8(ascii: "}"), b[p] == UInt8(ascii: "{") else { return nil }
        end -= 1
        return (seq, Int(shard), count, lang, UnsafeRawBufferPointer(rebasing: b[p..<end]), collapseId, at, timeZone, variant)
    }

    /// Why a collapse id cannot be sent as `apns-collapse-id`: 1 to 64 bytes,
    /// no control characters (a header value cannot hold them), and no
    /// U+FFFD (what invalid UTF-8 in the plan was read as).
    static func collapseProblem(_ bytes: some Collection<UInt8>) -> String? {
        guard (1...64).contains(bytes.count) else { return "collapse_id is \(bytes.count) bytes, where APNs takes 1 to 64" }
        if bytes.contains(where: { $0 < 0x20 || $0 == 0x7F }) { return "collapse_id holds a control character" }
        if Array(bytes).firstRange(of: [0xEF, 0xBF, 0xBD]) != nil { return "collapse_id is not valid UTF-8" }
        return nil
    }

    static func genericRecord(_ b: UnsafeRawBufferPointer, path: String, line: Int) throws -> PlanRecord {
        let value: JSONValue
        do { value = try JSONValue.parse(b) } catch {
            throw PlanError(path: path, line: line, reason: .badRecord("not JSON: \(error)"))
        }
        guard let seq = value["seq"]?.integerValue, seq > 0, let shard = value["shard"]?.integerValue,
              let hex = value["token"]?.stringValue, let token = DeviceToken(hex: hex),
              let lang = value["lang"]?.stringValue, let payload = value["payload"], payload.objectMembers != nil else {
            throw PlanError(path: path, line: line, reason: .badRecord("seq, shard, token, lang and payload are required"))
        }
        var collapseId: String? = nil
        if let c = value["collapse_id"] {
            guard let text = c.stringValue else { throw PlanError(path: path, line: line, reason: .badRecord("collapse_id must be a string")) }
            if let problem = collapseProblem(Array(text.utf8)) { throw PlanError(path: path, line: line, reason: .badRecord(problem)) }
            collapseId = text
        }
        var at: Int64? = nil
        if let a = value["at"] {
            guard let n = a.integerValue, n >= 0 else { throw PlanError(path: path, line: line, reason: .badRecord("at must be UNIX seconds")) }
            at = n
        }
        var timeZone: String? = nil
        if let z = value["tz"] {
            guard let text = z.stringValue else { throw PlanError(path: path, line: line, reason: .badRecord("tz must be a string")) }
            timeZone = text
        }
        var variant: String? = nil
        if let v = value["variant"] {
            guard let text = v.stringValue else { throw PlanError(path: path, line: line, reason: .badRecord("variant must be a string")) }
            variant = text
        }
        var record = PlanRecord(seq: UInt64(seq), shard: Int(shard), token: token.bytes, lang: lang, payload: payload.serialized(),
                                collapseId: collapseId, at: at, timeZone: timeZone)
        record.variant = variant
        return record
    }
}

#if canImport(Glibc)
import Glibc
#endif
