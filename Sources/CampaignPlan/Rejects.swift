import Glibc
import APNSWire
import CampaignIO
import CampaignJSON
import LocalTime
import ByteStreams

/// Why a row was not planned. The code is stable, for scripts; the reason is
/// the sentence for people.
public enum RejectCode: String, CaseIterable, Sendable {
    case malformedRow = "malformed_row"
    case missingToken = "missing_token"
    case invalidToken = "invalid_token"
    case duplicateToken = "duplicate_token"
    case suppressedByFeedback = "suppressed_by_feedback"
    case noMessage = "no_message"
    case missingVariable = "missing_variable"
    case invalidBadge = "invalid_badge"
    /// A `{name:number}` or `{name:int}` value is not a number (or not a whole one).
    case invalidNumber = "invalid_number"
    /// A `{name:bool}` value is not true/false, 1/0 or yes/no.
    case invalidBool = "invalid_bool"
    case cannotFit = "cannot_fit"
    /// h2: the rendered `collapseId` is empty or over 64 bytes.
    case invalidCollapseId = "invalid_collapse_id"
    /// A Live Activity's push-to-start: the row's `input-push-channel` value is not a channel id.
    case invalidChannelID = "invalid_channel_id"
    /// A scheduled job: the row's time zone is neither a zone name nor an offset.
    case invalidTimeZone = "invalid_timezone"
    /// A broadcast: the row has no channel id.
    case missingChannel = "missing_channel"
    /// A broadcast: the channel id is not canonical base64 (or over 100 bytes).
    case invalidChannel = "invalid_channel"
    /// A broadcast with a nonzero `expiresIn` to a channel whose `storage` column says it stores nothing: APNs would refuse it.
    case channelStoresNothing = "channel_stores_nothing"
    /// A campaign rule (`plan --ledger`): the device already had the job's `frequencyCap` of its scope within the window.
    case frequencyCapped = "frequency_capped"
    /// A campaign rule (`plan --ledger`): the ledger shows this campaign already reached the device (`--allow-repeat` sends again).
    case alreadySent = "already_sent"

    /// Dropped by a campaign rule: not a bad row, so not counted toward `--max-reject-rate`.
    public var isCampaignRule: Bool { self == .frequencyCapped || self == .alreadySent }
}

/// Writes the rejects file: NDJSON `{"line":N,"token":"hex","code":"…","reason":"…"}`
/// (a broadcast's: `"channel":"base64"` in the token's place), created 0600 (it holds tokens).
public final class RejectsWriter {
    private let file: BufferedFileWriter
    /// Where the file goes (written beside it, `….part`, and renamed there by
    /// ``commit()``: a planner that dies early, such as of the pipe a send
    /// already complete closes, leaves the last run's rejects as they were).
    public let path: String
    /// A broadcast plan's rejects name channels by their ids, as APNs issued them.
    var namesChannels = false

    public init(path: String) throws(IOError) {
        self.path = path
        file = try BufferedFileWriter(path: path == "-" ? path : "\(path).part")
    }

    /// Rejects written so far.
    public private(set) var written = 0
    /// Where they are until ``commit()``.
    public var pendingPath: String { path == "-" ? path : "\(path).part" }

    /// Removes the unfinished file (nothing in it): the last plan's rejects stay.
    public func abandon() { if path != "-" { unlink(pendingPath) } }

    /// Puts what was written in its place, at the end of a complete plan.
    public func commit() throws(IOError) {
        try file.flush()
        guard path != "-" else { return }
        guard rename("\(path).part", path) == 0 else { throw IOError(path: path, operation: "rename", errno: errno) }
    }

    /// `given`: the field as the row had it, when it is no token (a broadcast's reject names it;
    /// a channel missing altogether is `"channel":null`).
    func append(line: Int, token: UnsafeBufferPointer<UInt8>?, given: String? = nil, code: RejectCode, reason: String) throws(IOError) {
        written += 1
        file.buffer.append(contentsOf: #"{"line":"#.utf8)
        JSONText.appendDecimal(line, to: &file.buffer)
        if let token, namesChannels {
            file.buffer.append(contentsOf: #","channel":""#.utf8)
            file.buffer.append(contentsOf: Base64.encode(token))
            file.buffer.append(UInt8(ascii: "\""))
        } else if namesChannels {
            file.buffer.append(contentsOf: #","channel":"#.utf8)
            if let given { JSONText.appendString(Array(String(given.unicodeScalars.prefix(Self.maxGivenScalars)).utf8), to: &file.buffer) }
            else { file.buffer.append(contentsOf: "null".utf8) }
        } else if let token {
            file.buffer.append(contentsOf: #","token":""#.utf8)
            HexEncoding.append(token, to: &file.buffer)
            file.buffer.append(UInt8(ascii: "\""))
        }
        file.buffer.append(contentsOf: #","code":""#.utf8)
        file.buffer.append(contentsOf: code.rawValue.utf8)
        file.buffer.append(contentsOf: #"","reason":"#.utf8)
        JSONText.appendString(Array(reason.utf8), to: &file.buffer)
        file.buffer.append(contentsOf: "}\n".utf8)
        try file.flushIfFull()
    }

    public func flush() throws(IOError) { try file.flush() }

    /// How much of an unreadable field a reject repeats.
    static let maxGivenScalars = 256
}

/// Counts of a planning run.
public struct PlanSummary: Sendable, Equatable {
    public var rowsRead = 0
    public var planned = 0
    public var rejected: [RejectCode: Int] = [:]
    /// Planned notifications per message chosen.
    public var perLanguage: [String: Int] = [:]
    /// Shortened texts per message chosen.
    public var truncated: [String: Int] = [:]
    /// Planned notifications that wrote a variable's default (no value in the row), per variable.
    public var defaulted: [String: Int] = [:]
    /// A scheduled job's: its date, the zones defaulted, records per hour.
    public var schedule: ScheduleSummary?
    /// A job with variants: each variant's planned (or, a holdout, held out) devices, in job order.
    public var perVariant: [VariantPlanCount] = []
    public var seconds = 0.0

    public var rejectedTotal: Int { rejected.values.reduce(0, +) }
    /// Rows dropped by campaign rules (``RejectCode/isCampaignRule``), part of ``rejectedTotal``.
    public var droppedByRules: Int { rejected.filter { $0.key.isCampaignRule }.values.reduce(0, +) }

    public var json: JSONValue {
        func counts(_ d: [String: Int]) -> JSONValue {
            .object(d.sorted { $0.key < $1.key }.map { ($0.key, .number(String($0.value))) })
        }
        return .object([
            ("rows", .number(String(rowsRead))),
            ("planned", .number(String(planned))),
            ("rejected", .number(String(rejectedTotal))),
            ("rejected_by_reason", counts(Dictionary(uniqueKeysWithValues: rejected.map { ($0.key.rawValue, $0.value) }))),
            ("per_language", counts(perLanguage)),
            ("truncated", counts(truncated)),
            ("defaulted", counts(defaulted)),
        ] + variantsJSON + (schedule.map { s in [
            ("schedule", JSONValue.object([
                ("date", s.date.map { .string($0) } ?? .null),
                ("defaulted_timezone", .number(String(s.defaultedTimeZone))),
                ("past_at_plan_time", .number(String(s.pastAtPlanTime))),
                ("per_hour", .object(s.perHour.sorted { $0.key < $1.key }.map { (utcText($0.key), .number(String($0.value))) })),
            ])),
        ] } ?? []) + [
            ("seconds", .number(String(format3(seconds)))),
        ])
    }

    /// Lines for standard error.
    public var text: String {
        var lines = ["plan: \(rowsRead) rows read, \(planned) planned, \(rejectedTotal) rejected\(perVariant.isEmpty ? "" : ", \(heldOut) held out") in \(format3(seconds)) s"]
        if !rejected.isEmpty {
            if droppedByRules > 0 {
                lines.append("  campaign rules (not bad rows, not counted toward --max-reject-rate): " + rejected.filter { $0.key.isCampaignRule }
                    .sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue) \($0.value)" }.joined(separator: ", "))
            }
            lines.append("  rejected: " + rejected.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue) \($0.value)" }.joined(separator: ", "))
        }
        if !perLanguage.isEmpty {
            lines.append("  languages: " + perLanguage.sorted { $0.key < $1.key }.map { lang, n in
                let t = truncated[lang].map { " (\($0) truncated)" } ?? ""
                return "\(lang) \(n)\(t)"
            }.joined(separator: ", "))
        }
        lines += variantsText
        if !defaulted.isEmpty {
            lines.append("  defaults used: " + defaulted.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        if let s = schedule {
            lines.append("  scheduled" + (s.date.map { " for \($0)" } ?? "") + ": \(s.perHour.count) hour\(s.perHour.count == 1 ? "" : "s") of UTC"
                         + (s.defaultedTimeZone > 0 ? ", \(s.defaultedTimeZone) row\(s.defaultedTimeZone == 1 ? "" : "s") given the default time zone" : "")
                         + (s.pastAtPlanTime > 0 ? ", \(s.pastAtPlanTime) already past their moment" : ""))
            for (hour, n) in s.perHour.sorted(by: { $0.key < $1.key }) { lines.append("    \(utcText(hour).prefix(16)) \(n)") }
        }
        return lines.joined(separator: "\n")
    }
}

func format3(_ x: Double) -> String {
    let scaled = (x * 1000).rounded()
    let whole = Int(scaled) / 1000, frac = Int(scaled) % 1000
    return "\(whole).\(String(repeating: "0", count: 3 - String(frac).count))\(frac)"
}
