#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignJSON
import ByteStreams

/// Reads an NDJSON audience: one JSON object per line. Blank lines are
/// skipped; a line that is not a JSON object is a malformed row.
public final class NDJSONAudienceReader: AudienceReader {
    public let schema = AudienceSchema()
    public let path: String
    private let lines: LineReader
    /// Known keys, as raw bytes, and their columns, for the fast path.
    private var keyBytes: [UInt8] = []
    private var keys: [(range: Range<Int>, column: Int)] = []
    /// Per column, the last row that set it (duplicate keys fall back).
    private var seenInRow: [Int] = []
    private var rowCounter = 0
    /// Off in tests, to compare the fast path with the full parser.
    var usesFastPath = true
    /// Lines the fast path read, for tests.
    private(set) var fastPathRows = 0

    /// - Parameter columns: where the token is (a job's `columns`).
    public init(source: ByteSource, path: String, maxRowBytes: Int = 1 << 20, columns: ColumnMapping = ColumnMapping()) {
        tokenNames = columns.tokenNames
        tokenDescription = columns.tokenDescription
        self.path = path
        lines = LineReader(source: source, maxLineBytes: maxRowBytes)
    }

    /// The token's accepted or mapped names, and how to say them.
    private let tokenNames: [String]
    private let tokenDescription: String
    /// A row has held a key the token may be under.
    private var tokenKeySeen = false
    private var rowsWithoutTokenKey = 0
    /// Rows read without any token key, after which the export is taken to
    /// name its token otherwise: every row would be rejected.
    public static let tokenSearchRows = 1000

    public func next(into row: inout AudienceRow) throws -> AudienceRecord? {
        let record = try nextRecord(into: &row)
        if !tokenKeySeen {
            if schema.column(anyOf: tokenNames) != nil {
                tokenKeySeen = true
            } else if case .row? = record {
                // Objects only: a malformed line says nothing of the export's keys.
                rowsWithoutTokenKey += 1
            }
            if !tokenKeySeen, rowsWithoutTokenKey > 0, record == nil || rowsWithoutTokenKey >= Self.tokenSearchRows {
                let keys = schema.names.prefix(40).joined(separator: ", ")
                throw AudienceError(path: path, reason: .noTokenKey(tokenKey: tokenDescription, rows: rowsWithoutTokenKey, keys: keys))
            }
        }
        return record
    }

    private func nextRecord(into row: inout AudienceRow) throws -> AudienceRecord? {
        while let line = try lines.next() {
            switch line {
            case .overlong(let number, let count):
                return .malformed(line: number, reason: "the row is longer than \(lines.maxLineBytes >> 10) KiB (\(count) bytes)", token: nil)
            case .text(let number):
                let outcome: LineOutcome = lines.withCurrentLine { raw in
                    var bytes = UnsafeRawBufferPointer(raw)
                    if number == 1, bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF {
                        bytes = UnsafeRawBufferPointer(rebasing: bytes[3...])
                    }
                    if usesFastPath && readFlatObject(bytes, line: number, into: &row) { return .read }
                    if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return .blank }
                    return .parsed(Result { () throws(JSONParseError) in try JSONValue.parse(bytes) })
                }
                let parsed: Result<JSONValue, JSONParseError>
                switch outcome {
                case .read:
                    fastPathRows += 1
                    return .row
                case .blank:
                    continue
                case .parsed(let result):
                    parsed = result
                }
                switch parsed {
                case .failure(let error):
                    return .malformed(line: number, reason: "invalid JSON: \(error)", token: nil)
                case .success(let value):
                    guard let members = value.objectMembers else {
                        return .malformed(line: number, reason: "the line is \(value.typeName), not a JSON object", token: nil)
                    }
                    row.reset(line: number, columns: schema.count)
                    set(members, prefix: "", depth: 0, into: &row)
                    return .row
                }
            }
        }
        return nil
    }

    /// Sets each member's column; a nested object's members also go in
    /// columns named by their path (`user.first_name`), a few levels deep,
    /// so that a job's `columns` can name them.
    private func set(_ members: [(key: String, value: JSONValue)], prefix: String, depth: Int, into row: inout AudienceRow) {
        for (key, value) in members {
            let column = schema.add(prefix + key)
            switch value {
            case .null: continue
            case .string(let s): if !s.isEmpty { row.set(column: column, Array(s.utf8)) }
            case .number(let text): row.set(column: column, Array(text.utf8))
            case .bool(let b): row.set(column: column, Array((b ? "true" : "false").utf8))
            case .array: row.set(column: column, value.serialized())
            case .object(let inner):
                row.set(column: column, value.serialized())
                if depth < Self.nestedDepth { set(inner, prefix: prefix + key + ".", depth: depth + 1, into: &row) }
            }
        }
    }

    /// How deep nested objects are read into dotted columns.
    static let nestedDepth = 4

    /// What became of a line.
    private enum LineOutcome {
        /// The fast path read it into the row.
        case read
        case blank
        /// The full parser's result.
        case parsed(Result<JSONValue, JSONParseError>)
    }

    // MARK: - Fast path

    /// Reads the common line (one flat object of known keys with strings
    /// without escapes, numbers, booleans and nulls) straight into `row`.
    /// False for anything else (escapes, nested values, new or repeated keys,
    /// errors): the full parser then reads the line, so rows and errors are
    /// exactly what it gives. Parsing every line into a JSONValue tree cost
    /// 8 us a row.
    private func readFlatObject(_ b: UnsafeRawBufferPointer, line: Int, into row: inout AudienceRow) -> Bool {
        var p = 0
        let n = b.count
        @inline(__always) func skipSpace() {
            while p < n, b[p] == 0x20 || b[p] == 0x09 || b[p] == 0x0D || b[p] == 0x0A { p += 1 }
        }
        skipSpace()
        guard p < n, b[p] == UInt8(ascii: "{") else { return false }
        p += 1
        rowCounter += 1
        if seenInRow.count < schema.count { seenInRow += Array(repeating: 0, count: schema.count - seenInRow.count) }
        row.reset(line: line, columns: schema.count)
        skipSpace()
        if p < n, b[p] == UInt8(ascii: "}") {
            p += 1
            skipSpace()
            return p == n
        }
        var keyIndex = 0
        while true {
            skipSpace()
            guard p < n, b[p] == UInt8(ascii: "\"") else { return false }
            p += 1
            let keyStart = p
            while p < n, b[p] != UInt8(ascii: "\""), b[p] != UInt8(ascii: "\\"), b[p] >= 0x20, b[p] < 0x80 { p += 1 }
            guard p < n, b[p] == UInt8(ascii: "\"") else { return false }
            guard let column = column(forKey: UnsafeRawBufferPointer(rebasing: b[keyStart..<p]), guess: keyIndex),
                  seenInRow[column] != rowCounter else { return false }
            seenInRow[column] = rowCounter
            keyIndex += 1
            p += 1
            skipSpace()
            guard p < n, b[p] == UInt8(ascii: ":") else { return false }
            p += 1
            skipSpace()
            guard p < n else { return false }
            switch b[p] {
            case UInt8(ascii: "\""):
                p += 1
                let start = p
                var ascii = true
                while p < n, b[p] != UInt8(ascii: "\""), b[p] != UInt8(ascii: "\\"), b[p] >= 0x20 {
                    if b[p] >= 0x80 { ascii = false }
                    p += 1
                }
                guard p < n, b[p] == UInt8(ascii: "\"") else { return false }
                let value = UnsafeRawBufferPointer(rebasing: b[start..<p])
                if !ascii, !PayloadInspector.isValidUTF8(value.assumingMemoryBound(to: UInt8.self)) { return false }
                if !value.isEmpty { row.set(column: column, value) }
                p += 1
            case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
                let word: StaticString = b[p] == UInt8(ascii: "t") ? "true" : b[p] == UInt8(ascii: "f") ? "false" : "null"
                let count = word.utf8CodeUnitCount
                guard n - p >= count, memcmp(b.baseAddress! + p, word.utf8Start, count) == 0 else { return false }
                if b[p] != UInt8(ascii: "n") { row.set(column: column, UnsafeRawBufferPointer(rebasing: b[p..<(p + count)])) }
                p += count
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                let start = p
                guard Self.scanNumber(b, &p) else { return false }
                row.set(column: column, UnsafeRawBufferPointer(rebasing: b[start..<p]))
            default:
                return false
            }
            skipSpace()
            guard p < n else { return false }
            if b[p] == UInt8(ascii: ",") { p += 1; continue }
            guard b[p] == UInt8(ascii: "}") else { return false }
            p += 1
            skipSpace()
            return p == n
        }
    }

    /// The column of a key the schema already has; keys usually come in the
    /// same order on every line, so the one at the same place is tried first.
    private func column(forKey key: UnsafeRawBufferPointer, guess: Int) -> Int? {
        func matches(_ i: Int) -> Bool {
            let r = keys[i].range
            return r.count == key.count && keyBytes.withUnsafeBytes { memcmp($0.baseAddress! + r.lowerBound, key.baseAddress!, key.count) == 0 }
        }
        if guess < keys.count, matches(guess) { return keys[guess].column }
        for i in keys.indices where matches(i) { return keys[i].column }
        guard let column = schema.column(named: String(decoding: key, as: UTF8.self)) else { return nil }
        let start = keyBytes.count
        keyBytes.append(contentsOf: key)
        keys.append((start..<keyBytes.count, column))
        return column
    }

    /// A JSON number at `p`, by the grammar the full parser uses.
    private static func scanNumber(_ b: UnsafeRawBufferPointer, _ p: inout Int) -> Bool {
        let n = b.count
        @inline(__always) func digit(_ i: Int) -> Bool { i < n && b[i] >= 0x30 && b[i] <= 0x39 }
        if b[p] == UInt8(ascii: "-") { p += 1 }
        guard digit(p) else { return false }
        if b[p] == 0x30 { p += 1 } else { while digit(p) { p += 1 } }
        if p < n, b[p] == UInt8(ascii: ".") {
            p += 1
            guard digit(p) else { return false }
            while digit(p) { p += 1 }
        }
        if p < n, b[p] == UInt8(ascii: "e") || b[p] == UInt8(ascii: "E") {
            p += 1
            if p < n, b[p] == UInt8(ascii: "+") || b[p] == UInt8(ascii: "-") { p += 1 }
            guard digit(p) else { return false }
            while digit(p) { p += 1 }
        }
        return true
    }
}

/// The two audience formats.
public enum AudienceFormat: String, Sendable {
    case csv
    case ndjson

    /// By extension (`.csv`, `.ndjson`, `.jsonl`, `.json`, each optionally `.gz`),
    /// else by content: a first non-blank character `{` means NDJSON.
    public static func detect(path: String, firstBytes: [UInt8]) -> AudienceFormat {
        var name = path.lowercased()
        if name.hasSuffix(".gz") { name.removeLast(3) }
        if name.hasSuffix(".csv") { return .csv }
        if name.hasSuffix(".ndjson") || name.hasSuffix(".jsonl") || name.hasSuffix(".json") { return .ndjson }
        var bytes = firstBytes[...]
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        let first = bytes.first { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }
        return first == UInt8(ascii: "{") ? .ndjson : .csv
    }
}

/// Opens an audience file (or "-"), gzip or not, CSV or NDJSON.
public enum AudienceFile {
    /// About how many rows an uncompressed audience file holds: its size over
    /// the mean length of its first lines. Nil for standard input and gzip.
    public static func estimatedRows(_ path: String) -> Int? {
        guard path != "-", let source = try? FileSource(path: path) else { return nil }
        var head = [UInt8](repeating: 0, count: 1 << 16)
        guard let n = try? source.read(into: &head), n > 2, !(head[0] == 0x1F && head[1] == 0x8B) else { return nil }
        let lines = head[0..<n].reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }
        var info = stat()
        guard lines >= 2, stat(path, &info) == 0 else { return nil }
        return Int(info.st_size) / max(1, n / lines)
    }

    /// - Parameter delimiter: a CSV audience's field separator.
    public static func open(_ path: String, format: AudienceFormat? = nil, delimiter: UInt8 = UInt8(ascii: ","),
                            columns: ColumnMapping = ColumnMapping()) throws -> AudienceReader {
        let source = try InputFile.open(path)
        var head = [UInt8](repeating: 0, count: 512)
        var count = 0
        while count < head.count {
            let n = try source.read(into: &head, from: count)
            if n == 0 { break }
            count += n
        }
        let sniffed = Array(head[0..<count])
        let resolved = format ?? AudienceFormat.detect(path: path, firstBytes: sniffed)
        let name = path == "-" ? "standard input" : path
        let rest = PrefixedByteSource(prefix: sniffed, rest: source)
        switch resolved {
        case .csv: return try CSVAudienceReader(source: rest, path: name, delimiter: delimiter, columns: columns)
        case .ndjson: return NDJSONAudienceReader(source: rest, path: name, columns: columns)
        }
    }
}
