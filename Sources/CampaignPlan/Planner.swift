#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import FeedbackStore

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

    public init(now: UInt32) { self.now = now }
}

/// Turns audience rows into plan records or rejects: every row read ends as
/// exactly one of them.
public final class Planner {
    public let job: CampaignJob
    public let options: PlanOptions
    public let header: PlanHeader
    private let renderer: PayloadRenderer
    private let selector: MessageSelector
    private let messageTags: [[UInt8]]
    private var suppressed = TokenSet(values: true)
    private var hasSuppressed = false
    private var seen: TokenSet
    private var languageCache = LanguageCache()

    /// The stable shard of a token: FNV-1a (64-bit) of its bytes, modulo the shard count.
    public static func shard(of token: UnsafeBufferPointer<UInt8>, shards: Int) -> Int {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in token { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        return Int(h % UInt64(shards))
    }

    public init(job: CampaignJob, options: PlanOptions, feedback: FeedbackStore? = nil) throws(JobError) {
        self.job = job
        self.options = options
        let maxPayload = options.maxPayload ?? job.maxPayload
        guard (1...job.format.maxPayloadBytes).contains(maxPayload) else {
            throw JobError(path: "--max-payload", reason: "\(maxPayload) bytes is outside 1...\(job.format.maxPayloadBytes) for the \(job.format) format")
        }
        header = PlanHeader(
            campaign: job.campaign, format: job.format,
            expiry: job.expiresIn == 0 ? 0 : options.now &+ UInt32(job.expiresIn),
            priority: job.format == .frame ? job.priority : nil,
            maxPayload: maxPayload, shards: options.shards, created: options.now)
        renderer = PayloadRenderer(job: job)
        selector = job.selector
        seen = TokenSet(expectedCount: options.expectedRows)
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

    /// Reads every row, writes the plan (header, records, trailer) and the rejects.
    public func run(reader: AudienceReader, plan: PlanWriter, rejects: RejectsWriter?) throws -> PlanSummary {
        let started = monotonicSeconds()
        var summary = PlanSummary()
        try plan.writeHeader(header)
        var row = AudienceRow()
        var token = [UInt8](repeating: 0, count: 128)
        var payload: [UInt8] = []
        payload.reserveCapacity(4096)
        var columns: [Int] = []
        var schemaCount = -1
        var tokenColumn: Int? = nil, langColumn: Int? = nil, registeredColumn: Int? = nil
        let maxPayload = header.maxPayload
        let maxToken = job.format.maxTokenBytes
        let exactToken = job.format == .frame ? nil : 32
        var truncatedCounts = [Int](repeating: 0, count: job.messages.count)
        var plannedCounts = [Int](repeating: 0, count: job.messages.count)

        func reject(_ line: Int, _ tokenBytes: UnsafeBufferPointer<UInt8>?, _ code: RejectCode, _ reason: String) throws {
            summary.rejected[code, default: 0] += 1
            try rejects?.append(line: line, token: tokenBytes, code: code, reason: reason)
        }

        while let record = try reader.next(into: &row) {
            summary.rowsRead += 1
            if case .malformed(let line, let reason, let tokenText) = record {
                if let tokenText, let t = DeviceToken(hex: tokenText) {
                    try t.bytes.withUnsafeBufferPointer { try reject(line, $0, .malformedRow, "malformed row: \(reason)") }
                } else {
                    try reject(line, nil, .malformedRow, "malformed row: \(reason)")
                }
                continue
            }
            let line = row.line
            if reader.schema.count != schemaCount {
                schemaCount = reader.schema.count
                columns = renderer.variables.map { reader.schema.column(named: $0) ?? -1 }
                tokenColumn = reader.schema.column(anyOf: AudienceSchema.tokenAliases)
                langColumn = reader.schema.column(anyOf: AudienceSchema.languageAliases)
                registeredColumn = reader.schema.column(anyOf: AudienceSchema.registeredAliases)
            }
            let validUTF8 = row.storage.withUnsafeBufferPointer { PayloadInspector.isValidUTF8($0) }
            guard validUTF8 else {
                try reject(line, nil, .malformedRow, "malformed row: it is not valid UTF-8")
                continue
            }
            guard let tokenRange = row.range(of: tokenColumn) else {
                try reject(line, nil, .missingToken, "missing token")
                continue
            }
            let tokenCount = Self.parseHexToken(row.storage[tokenRange], into: &token)
            guard tokenCount > 0 else {
                try reject(line, nil, .invalidToken, "invalid token: \(tokenCount == -1 ? "not hex" : "longer than 100 bytes")")
                continue
            }
            let outcome = try token.withUnsafeBufferPointer { all throws -> Bool in
                let t = UnsafeBufferPointer(rebasing: all[0..<tokenCount])
                if let exact = exactToken, tokenCount != exact {
                    try reject(line, t, .invalidToken, "invalid token: \(tokenCount) bytes where the \(job.format) format takes \(exact)")
                    return false
                }
                if tokenCount > maxToken {
                    try reject(line, t, .invalidToken, "invalid token: \(tokenCount) bytes, more than \(maxToken)")
                    return false
                }
                if seen.contains(t) {
                    try reject(line, t, .duplicateToken, "duplicate token: an earlier row has it (the first wins)")
                    return false
                }
                if hasSuppressed, let unregistered = suppressed.value(for: t) {
                    let registeredText = row.string(registeredColumn)
                    let registered = registeredText.flatMap(Timestamp.parse)
                    if registered.map({ $0 <= Int64(unregistered) }) ?? true {
                        let detail: String
                        switch (registeredText, registered) {
                        case (nil, _): detail = "and the row has no registered_at"
                        case (let text?, nil): detail = "and registered_at \"\(text)\" is not a time"
                        case (_, let r?): detail = "and registered_at \(r) is not newer"
                        }
                        try reject(line, t, .suppressedByFeedback, "suppressed by feedback: unregistered at \(unregistered) \(detail)")
                        return false
                    }
                }
                let message = row.storage.withUnsafeBufferPointer { storage -> Int? in
                    guard let r = row.range(of: langColumn) else { return selector.select(nil) }
                    return languageCache.message(for: UnsafeBufferPointer(rebasing: storage[r]), selector: selector)
                }
                guard let message else {
                    try reject(line, t, .noMessage, "no message for language \"\(row.string(langColumn) ?? "")\" and none in the fallback chain")
                    return false
                }
                switch renderer.render(message: message, row: row, columns: columns, maxBytes: maxPayload, into: &payload) {
                case .fitted:
                    break
                case .truncated:
                    truncatedCounts[message] += 1
                case .missingVariable(let name):
                    try reject(line, t, .missingVariable, "missing variable \(name)")
                    return false
                case .invalidBadge(let value):
                    try reject(line, t, .invalidBadge, "badge \"\(value)\" is not a whole number of at least 0")
                    return false
                case .cannotFit(let minimum):
                    try reject(line, t, .cannotFit, "cannot fit: the payload needs \(minimum) bytes even with an empty alert, over the \(maxPayload)-byte limit")
                    return false
                }
                seen.insert(t)
                try plan.append(shard: Self.shard(of: t, shards: header.shards), token: t, lang: messageTags[message], payload: payload)
                plannedCounts[message] += 1
                return true
            }
            if outcome { summary.planned += 1 }
        }
        try plan.writeTrailer(rowsRead: summary.rowsRead, rejected: summary.rejectedTotal)
        try rejects?.flush()
        for (i, m) in job.messages.enumerated() {
            if plannedCounts[i] > 0 { summary.perLanguage[m.tag] = plannedCounts[i] }
            if truncatedCounts[i] > 0 { summary.truncated[m.tag] = truncatedCounts[i] }
        }
        summary.seconds = monotonicSeconds() - started
        return summary
    }

    /// Hex text to bytes, tolerating spaces and one pair of angle brackets.
    /// Returns the byte count, 0 when empty, -1 when not hex, -2 when over 100 bytes.
    @inline(__always)
    static func parseHexToken(_ text: ArraySlice<UInt8>, into out: inout [UInt8]) -> Int {
        var count = 0
        var high: UInt8 = 0
        var haveHigh = false
        var bytes = text
        if bytes.first == UInt8(ascii: "<") {
            guard bytes.last == UInt8(ascii: ">") else { return -1 }
            bytes = bytes.dropFirst().dropLast()
        }
        for c in bytes {
            if c == 0x20 || c == 0x09 {
                if haveHigh { return -1 }
                continue
            }
            guard let n = DeviceToken.nibbleValue(c) else { return -1 }
            if haveHigh {
                guard count < 100 else { return -2 }
                out[count] = high << 4 | n
                count += 1
                haveHigh = false
            } else {
                high = n
                haveHigh = true
            }
        }
        return haveHigh ? -1 : count
    }
}

/// Remembers which message each distinct language value selects; audiences
/// have few distinct values, so a short list compared byte for byte beats
/// hashing a new key per row.
struct LanguageCache {
    private var keys: [[UInt8]] = []
    private var results: [Int?] = []
    private var overflow: [String: Int?] = [:]

    mutating func message(for raw: UnsafeBufferPointer<UInt8>, selector: MessageSelector) -> Int? {
        for i in keys.indices where keys[i].count == raw.count && keys[i].elementsEqual(raw) { return results[i] }
        let text = String(decoding: raw, as: UTF8.self)
        if keys.count >= 256 {
            if let cached = overflow[text] { return cached }
            let result = selector.select(LanguageTag(text))
            // Bounded: an audience with a new language value on every row must
            // not grow memory with the audience.
            if overflow.count < 16_384 { overflow[text] = result }
            return result
        }
        let result = selector.select(LanguageTag(text))
        keys.append(Array(raw))
        results.append(result)
        return result
    }
}

/// Seconds on the monotonic clock, for durations.
func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}
