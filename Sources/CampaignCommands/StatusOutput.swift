import ArgumentParser
import Foundation
import APNSWire
import CampaignJSON
import CampaignSend
import LocalTime
import SendJournal

/// What `status` prints besides its views: the journals a `--journals`
/// pattern names, and `--failures`' NDJSON lines.
enum StatusOutput {
    /// The directories a pattern names that hold a journal, sorted.
    static func journals(matching pattern: String) throws -> [String] {
        var g = glob_t()
        defer { globfree(&g) }
        let rc = glob(pattern, 0, nil, &g)
        guard rc == 0 || rc == GLOB_NOMATCH else { throw ValidationError("--journals \(pattern) cannot be expanded.") }
        var out: [String] = []
        for i in 0..<Int(g.gl_pathc) {
            guard let p = g.gl_pathv[i] else { continue }
            let path = String(cString: p)
            if access("\(path)/\(Journal.logName)", F_OK) == 0 { out.append(path) }
        }
        return out.sorted()
    }

    /// The directories a pattern names that hold only `campaign cancel`'s record: parts cancelled before they started.
    static func cancelledBeforeStart(matching pattern: String) -> [String] {
        var g = glob_t()
        defer { globfree(&g) }
        guard glob(pattern, 0, nil, &g) == 0 else { return [] }
        return (0..<Int(g.gl_pathc)).compactMap { g.gl_pathv[$0].map { String(cString: $0) } }
            .filter { access("\($0)/\(Journal.logName)", F_OK) != 0 && JournalCancel.exists(directory: $0) }.sorted()
    }

    /// `status DIR` of a directory holding only a cancel record: one line (text or JSON); nil for any other.
    static func cancelledBeforeStart(directory: String, json: Bool) -> String? {
        guard access("\(directory)/\(Journal.logName)", F_OK) != 0, let c = JournalCancel.read(directory: directory) else { return nil }
        guard json else { return "journal: \(directory)\n  outcome: \(c.sentence) before its send started: nothing is sent" }
        return String(decoding: JSONValue.object([
            ("outcome", .string("cancelled")), ("phase", .string("cancelled")), ("cancelled_by", .string(c.by)),
            ("cancelled_at", .string(utcText(Int64(c.at)))), ("cancel_reason", c.reason.map { .string($0) } ?? .null), ("runs", .number("0")),
        ]).serialized(), as: UTF8.self)
    }

    /// A broadcast journal's failures name channels by their base64 ids, as `channels list` and the plan's rejects do.
    static func failureLine(_ f: SendFailure, part: Int? = nil, journal: String? = nil, channels: Bool = false) -> String {
        line(token: f.token, part: part, journal: journal, channels: channels, [
            ("seq", .number(String(f.seq))), ("status", .number(String(f.status))), ("reason", .string(f.reason)),
            ("attempts", .number(String(f.attempts))),
        ])
    }

    static func skippedLine(_ k: SkippedNotification, part: Int? = nil, journal: String? = nil, channels: Bool = false) -> String {
        line(token: k.token, part: part, journal: journal, channels: channels, [
            ("seq", .number(String(k.seq))), ("outcome", .string("skipped")), ("code", .string(k.code)), ("moment", .string(utcText(k.moment))),
            ("reason", .string(k.reason)),
        ])
    }

    /// One `--failures` line: part and journal (over parts), seq, token, then `members`.
    private static func line(token bytes: [UInt8], part: Int?, journal: String?, channels: Bool, _ members: [(key: String, value: JSONValue)]) -> String {
        var token: [UInt8] = []
        HexEncoding.append(bytes, to: &token)
        var all: [(key: String, value: JSONValue)] = []
        if let part { all.append(("part", .number(String(part)))) }
        if let journal { all.append(("journal", .string(journal))) }
        all.append(members[0])
        all.append(channels ? ("channel", .string(ChannelID(bytes: bytes).base64)) : ("token", .string(String(decoding: token, as: UTF8.self))))
        all += members.dropFirst()
        return String(decoding: JSONValue.object(all).serialized(), as: UTF8.self)
    }

    /// "12" at 10 ms and over, "4.2" under.
    static func milliseconds(_ ms: Double) -> String { ms >= 10 ? String(Int(ms.rounded())) : String((ms * 10).rounded() / 10) }
}
