import Foundation
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import ByteStreams

/// Which columns (CSV) or keys (NDJSON) of an events export hold the device's
/// token, the event's name and its time (`--columns token=device_id,event=name,time=ts`).
public struct EventColumns: Equatable, Sendable {
    public var token = "token"
    public var event = "event"
    public var time = "time"

    public init() {}

    /// `token=device_id,event=name,time=ts`, any of the three; nil with a sentence for anything else.
    public init(parsing text: String) throws {
        for pair in text.split(separator: ",") {
            let kv = pair.split(separator: "=", maxSplits: 1).map { String($0).trimmingCharacters(in: .whitespaces) }
            guard kv.count == 2, !kv[1].isEmpty else {
                throw ResultsError(.unusable, "--columns takes token=NAME,event=NAME,time=NAME, not \"\(pair)\".")
            }
            switch kv[0] {
            case "token": token = kv[1]
            case "event": event = kv[1]
            case "time": time = kv[1]
            default: throw ResultsError(.unusable, "--columns names token, event and time, not \"\(kv[0])\".")
            }
        }
    }
}

/// What became of the events read: each one counted once, so the parts add
/// up to `read`.
public struct EventCounts: Equatable, Sendable {
    public var read = 0
    /// In a measured device's window: a conversion (a device converts once, however many it has).
    public var counted = 0
    /// Of a token the campaign never planned or held out.
    public var unknownDevice = 0
    /// Of a device in the campaign whose window is not measured (refused, skipped, not sent yet).
    public var notReached = 0
    /// Before the device's moment.
    public var beforeMoment = 0
    /// After the device's window closed.
    public var outsideWindow = 0
    /// Of another name than `--event`'s.
    public var otherEvent = 0
    /// Lines that could not be read (listed in the rejects file).
    public var rejected = 0

    public init() {}

    public var sumOfParts: Int { counted + unknownDevice + notReached + beforeMoment + outsideWindow + otherEvent + rejected }
}

/// Streams an app's event exports against an experiment's devices: each
/// event in a measured device's window after its moment converts the device.
public final class EventTally {
    public let devices: ExperimentDevices
    public let windowSeconds: Int64
    /// Only events of this name count (nil: any).
    public let event: String?
    public private(set) var counts = EventCounts()
    public let rejectsPath: String?

    /// `rejectsPath`: where unreadable lines are listed (created 0600 only
    /// when the first comes); nil: only counted.
    public init(devices: ExperimentDevices, windowSeconds: Int64, event: String?, rejectsPath: String?) {
        (self.devices, self.windowSeconds, self.event, self.rejectsPath) = (devices, windowSeconds, event, rejectsPath)
        pendingRejects = rejectsPath
    }

    private var pendingRejects: String?
    private var rejectsFile: BufferedFileWriter?

    /// Reads one export (CSV or NDJSON, gzip or not) to its end.
    public func read(path: String, columns: EventColumns, delimiter: UInt8 = UInt8(ascii: ",")) throws {
        let reader: AudienceReader
        do {
            reader = try AudienceFile.open(path, delimiter: delimiter, columns: ColumnMapping(["token": columns.token]))
        } catch let error as AudienceError {
            throw Self.unusable(error, columns: columns)
        } catch {
            throw ResultsError(.unreadable, "\(error)")
        }
        let schema = reader.schema
        let csv = reader is CSVAudienceReader
        var tokenColumn = schema.column(named: columns.token)
        var timeColumn = schema.column(named: columns.time)
        var eventColumn = schema.column(named: columns.event)
        if csv {
            guard timeColumn != nil else {
                throw ResultsError(.unusable, "\(path): no time column \"\(columns.time)\" (its columns are: \(schema.names.joined(separator: ", "))); name it with --columns time=NAME.")
            }
            if event != nil, eventColumn == nil {
                throw ResultsError(.unusable, "\(path): no event column \"\(columns.event)\" to pick --event \(event!) by (its columns are: \(schema.names.joined(separator: ", "))); name it with --columns event=NAME.")
            }
        }
        let wanted = event.map { Array($0.utf8) }
        let before = counts
        var timesRead = 0, timesUnreadable = 0
        var token = [UInt8](repeating: 0, count: 128)
        var row = AudienceRow()
        var rowsSeen = 0
        while true {
            let record: AudienceRecord?
            do { record = try reader.next(into: &row) } catch let error as IOError {
                throw ResultsError(.unreadable, "\(error)")
            } catch let error as AudienceError {
                throw Self.unusable(error, columns: columns)
            }
            guard let record else { break }
            counts.read += 1
            rowsSeen += 1
            guard case .row = record else {
                if case .malformed(let line, let reason, _) = record { try reject(path, line, reason) }
                continue
            }
            if !csv {
                // NDJSON keys are learnt as rows come: look until each is seen.
                if tokenColumn == nil { tokenColumn = schema.column(named: columns.token) }
                if timeColumn == nil { timeColumn = schema.column(named: columns.time) }
                if eventColumn == nil { eventColumn = schema.column(named: columns.event) }
                if rowsSeen == NDJSONAudienceReader.tokenSearchRows, timeColumn == nil {
                    throw ResultsError(.unusable, "\(path): no \"\(columns.time)\" key in its first \(rowsSeen) lines; name the time's with --columns time=NAME.")
                }
            }
            let outcome = row.storage.withUnsafeBufferPointer { storage -> Judgement in
                guard let tr = row.range(of: tokenColumn) else { return .reject("no token") }
                let parsed = token.withUnsafeMutableBufferPointer {
                    DeviceToken.parseHex(UnsafeBufferPointer(rebasing: storage[tr]), into: $0.baseAddress!, maxBytes: $0.count)
                }
                guard case .bytes(let n) = parsed else { return .reject("the token is not hex") }
                if let wanted {
                    guard let er = row.range(of: eventColumn), er.count == wanted.count,
                          wanted.withUnsafeBufferPointer({ memcmp($0.baseAddress!, storage.baseAddress! + er.lowerBound, er.count) == 0 }) else {
                        return .otherEvent
                    }
                }
                guard let timeRange = row.range(of: timeColumn) else { return .reject("no time") }
                guard let time = EventTime.parse(UnsafeBufferPointer(rebasing: storage[timeRange])) else {
                    timesUnreadable += 1
                    return .reject("the time is neither RFC 3339 nor UNIX seconds")
                }
                timesRead += 1
                let d = token.withUnsafeBufferPointer { devices.device(UnsafeBufferPointer(rebasing: $0[0..<n])) }
                guard let d else { return .unknownDevice }
                let moment = devices.moment[d]
                if moment == ExperimentDevices.unmeasured { return .notReached }
                if time < moment { return .beforeMoment }
                if time > moment + windowSeconds { return .outsideWindow }
                devices.markConverted(d)
                return .counted
            }
            switch outcome {
            case .counted: counts.counted += 1
            case .unknownDevice: counts.unknownDevice += 1
            case .notReached: counts.notReached += 1
            case .beforeMoment: counts.beforeMoment += 1
            case .outsideWindow: counts.outsideWindow += 1
            case .otherEvent: counts.otherEvent += 1
            case .reject(let why): try reject(path, row.line, why)
            }
        }
        if !csv, counts.read > before.read, timeColumn == nil {
            throw ResultsError(.unusable, "\(path): no \"\(columns.time)\" key in any line; name the time's with --columns time=NAME.")
        }
        // A time column none of whose values reads is no time column: the results would be all zeros.
        if timesRead == 0, timesUnreadable > 0 {
            throw ResultsError(.unusable, "\(path): none of the \(timesUnreadable) times in \"\(columns.time)\" is RFC 3339 (2026-11-28T09:15:02Z) or UNIX seconds; convert them, or name another column with --columns time=NAME.")
        }
    }

    /// An export the readers refuse, said as `results` is used (`--columns`, not a job's).
    static func unusable(_ error: AudienceError, columns: EventColumns) -> ResultsError {
        func shown(_ names: [String]) -> String {
            let printable = names.allSatisfy { $0.unicodeScalars.allSatisfy { !$0.properties.isWhitespace || $0 == " " } && $0.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7F && $0.value != 0xFFFD } }
            return printable ? names.joined(separator: ", ") : "unreadable: is it CSV or NDJSON?"
        }
        switch error.reason {
        case .noTokenColumn(_, let names, _, _):
            return ResultsError(.unusable, "\(error.path): no token column \"\(columns.token)\" (its columns: \(shown(names))); name it with --columns token=NAME.")
        case .noTokenKey(_, let rows, let keys):
            return ResultsError(.unusable, "\(error.path): no \"\(columns.token)\" key in its first \(rows) lines (its keys: \(keys)); name it with --columns token=KEY.")
        case .empty:
            return ResultsError(.unusable, "\(error.path): empty, not even a header row.")
        default:
            return ResultsError(.unusable, "\(error.path): \(error.reason.sentence).")
        }
    }

    private enum Judgement { case counted, unknownDevice, notReached, beforeMoment, outsideWindow, otherEvent, reject(String) }

    private func reject(_ path: String, _ line: Int, _ reason: String) throws {
        counts.rejected += 1
        guard let target = pendingRejects ?? rejectsFile?.name else { return }
        if rejectsFile == nil {
            do { rejectsFile = try BufferedFileWriter(path: target) } catch { throw ResultsError(.unreadable, "\(error)") }
            pendingRejects = nil
        }
        let json = JSONValue.object([("file", .string(path)), ("line", .number(String(line))), ("reason", .string(reason))])
        rejectsFile!.buffer.append(contentsOf: json.serialized())
        rejectsFile!.buffer.append(0x0A)
        do { try rejectsFile!.flushIfFull() } catch { throw ResultsError(.unreadable, "\(error)") }
    }

    /// Writes out the rejects listed; their file, when there were any.
    public func finish() throws -> String? {
        guard let rejectsFile else { return nil }
        do { try rejectsFile.flush() } catch { throw ResultsError(.unreadable, "\(error)") }
        return rejectsFile.name
    }
}

/// An event's time: RFC 3339 (`2026-11-28T09:15:02Z`, `…+01:00`, a fraction
/// allowed) or UNIX seconds (a fraction allowed), to the second below.
public enum EventTime {
    public static func parse(_ text: UnsafeBufferPointer<UInt8>) -> Int64? {
        var lo = 0, hi = text.count
        while lo < hi, text[lo] == 0x20 || text[lo] == 0x09 { lo += 1 }
        while hi > lo, text[hi - 1] == 0x20 || text[hi - 1] == 0x09 || text[hi - 1] == 0x0D { hi -= 1 }
        let b = UnsafeBufferPointer(rebasing: text[lo..<hi])
        guard !b.isEmpty else { return nil }
        if b.count >= 19, b[4] == UInt8(ascii: "-") { return rfc3339(b) }
        var seconds: Int64 = 0
        var i = 0
        while i < b.count, isDigit(b[i]) {
            guard i < 12 else { return nil }
            seconds = seconds * 10 + Int64(b[i] - 0x30)
            i += 1
        }
        guard i > 0 else { return nil }
        if i < b.count {
            guard b[i] == UInt8(ascii: "."), i + 1 < b.count else { return nil }
            i += 1
            while i < b.count { guard isDigit(b[i]) else { return nil }; i += 1 }
        }
        return seconds
    }

    @inline(__always) private static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }

    private static func number(_ b: UnsafeBufferPointer<UInt8>, _ at: Int, _ count: Int) -> Int? {
        var v = 0
        for i in at..<(at + count) {
            guard isDigit(b[i]) else { return nil }
            v = v * 10 + Int(b[i] - 0x30)
        }
        return v
    }

    /// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`; `t`, `z` and a space for the `T` as RFC 3339 allows.
    private static func rfc3339(_ b: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard let y = number(b, 0, 4), b[4] == 0x2D, let mo = number(b, 5, 2), b[7] == 0x2D, let d = number(b, 8, 2),
              b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: "t") || b[10] == 0x20,
              let h = number(b, 11, 2), b[13] == 0x3A, let mi = number(b, 14, 2), b[16] == 0x3A, let s = number(b, 17, 2),
              (1...12).contains(mo), d >= 1, d <= daysIn(month: mo, year: y), h < 24, mi < 60, s <= 60 else { return nil }
        var i = 19
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            let start = i
            while i < b.count, isDigit(b[i]) { i += 1 }
            guard i > start else { return nil }
        }
        guard i < b.count else { return nil }
        var offset = 0
        switch b[i] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            i += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard b.count - i == 6, let oh = number(b, i + 1, 2), b[i + 3] == 0x3A, let om = number(b, i + 4, 2), oh < 24, om < 60 else { return nil }
            offset = (oh * 3600 + om * 60) * (b[i] == UInt8(ascii: "-") ? -1 : 1)
            i += 6
        default:
            return nil
        }
        guard i == b.count else { return nil }
        return Int64(daysFromCivil(y, mo, d)) * 86_400 + Int64(h * 3600 + mi * 60 + min(s, 59)) - Int64(offset)
    }

    private static func daysIn(month m: Int, year y: Int) -> Int {
        switch m {
        case 2: (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Howard Hinnant's `days_from_civil`.
    private static func daysFromCivil(_ year: Int, _ month: Int, _ day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        return era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
    }
}
