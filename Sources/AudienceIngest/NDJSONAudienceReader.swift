#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignJSON

/// Reads an NDJSON audience: one JSON object per line. Blank lines are
/// skipped; a line that is not a JSON object is a malformed row.
public final class NDJSONAudienceReader: AudienceReader {
    public let schema = AudienceSchema()
    public let path: String
    private let lines: LineReader

    public init(source: ByteSource, path: String, maxRowBytes: Int = 1 << 20) {
        self.path = path
        lines = LineReader(source: source, maxLineBytes: maxRowBytes)
    }

    public func next(into row: inout AudienceRow) throws -> AudienceRecord? {
        while let line = try lines.next() {
            switch line {
            case .overlong(let number, let count):
                return .malformed(line: number, reason: "the row is longer than \(lines.maxLineBytes >> 10) KiB (\(count) bytes)", token: nil)
            case .text(let number):
                let parsed: Result<JSONValue, JSONParseError>? = lines.withCurrentLine { raw in
                    var bytes = UnsafeRawBufferPointer(raw)
                    if number == 1, bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF {
                        bytes = UnsafeRawBufferPointer(rebasing: bytes[3...])
                    }
                    if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return nil }
                    return Result { () throws(JSONParseError) in try JSONValue.parse(bytes) }
                }
                guard let parsed else { continue }
                switch parsed {
                case .failure(let error):
                    return .malformed(line: number, reason: "invalid JSON: \(error)", token: nil)
                case .success(let value):
                    guard let members = value.objectMembers else {
                        return .malformed(line: number, reason: "the line is \(value.typeName), not a JSON object", token: nil)
                    }
                    row.reset(line: number, columns: schema.count)
                    for (key, value) in members {
                        let column = schema.add(key)
                        switch value {
                        case .null: continue
                        case .string(let s): if !s.isEmpty { row.set(column: column, Array(s.utf8)) }
                        case .number(let text): row.set(column: column, Array(text.utf8))
                        case .bool(let b): row.set(column: column, Array((b ? "true" : "false").utf8))
                        case .array, .object: row.set(column: column, value.serialized())
                        }
                    }
                    return .row
                }
            }
        }
        return nil
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

    public static func open(_ path: String, format: AudienceFormat? = nil) throws -> AudienceReader {
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
        case .csv: return try CSVAudienceReader(source: rest, path: name)
        case .ndjson: return NDJSONAudienceReader(source: rest, path: name)
        }
    }
}
