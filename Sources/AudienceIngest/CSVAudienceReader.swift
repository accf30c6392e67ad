import CampaignIO
import ByteStreams

/// Reads a CSV audience with libcsv: a header row, quoted fields with embedded
/// commas, quotes and line breaks, CRLF, and a UTF-8 byte-order mark.
///
/// libcsv runs in strict mode and is fed one physical line at a time, so each
/// row knows the line it starts on. A row with a syntax error, or whose quoted
/// field is still open after ``maxRowBytes``, is reported as malformed, and the
/// lines after its first are parsed again: one stray quote cannot swallow the
/// good rows that follow it.
public final class CSVAudienceReader: AudienceReader {
    public let schema: AudienceSchema
    public let path: String
    public let maxRowBytes: Int
    /// Where the token column is, for the token of a malformed row.
    public private(set) var tokenColumn: Int

    private let lines: LineReader
    private let tokenizer: CSVTokenizer

    /// The row being assembled, in the tokenizer's buffer.
    private let fields: CSVRowBuffer
    private var rowStartLine = 0
    private var rowBytes = 0
    /// A line kept for parsing again: its copy, or, for a line too long to
    /// keep, only its number and length (it is reported again, in its place).
    private struct KeptLine {
        var number: Int
        var bytes: [UInt8]
        var overlong: Int? = nil
    }
    /// Copies of the lines of a row that spans lines, for replay after an error.
    private var rowLines: [KeptLine] = []
    private var replay: [KeptLine] = []
    private var replayIndex = 0
    private var finished = false

    /// - Parameter delimiter: the field separator (`,`; `;` and tab are common in exports).
    /// - Parameter columns: where the token column is (a job's `columns`).
    public init(source: ByteSource, path: String, maxRowBytes: Int = 1 << 20, delimiter: UInt8 = UInt8(ascii: ","),
                columns: ColumnMapping = ColumnMapping()) throws {
        self.path = path
        self.maxRowBytes = maxRowBytes
        tokenizer = CSVTokenizer(delimiter: delimiter)
        lines = LineReader(source: source, maxLineBytes: maxRowBytes)
        fields = tokenizer.row
        schema = AudienceSchema()
        tokenColumn = -1
        // The header: the first row of the file.
        var header = AudienceRow()
        var names: [String]? = nil
        while names == nil {
            guard let record = try readRow(into: &header, columns: 0, validateCount: false) else {
                throw AudienceError(path: path, reason: .empty)
            }
            switch record {
            case .row:
                names = (0..<(header.bounds.count / 2)).map { header.string($0) ?? "" }
            case .malformed(let line, let reason, _):
                throw AudienceError(path: path, reason: .malformedHeader(line: line, detail: reason))
            }
        }
        var seen = Set<String>()
        for (i, name) in names!.enumerated() {
            guard !name.isEmpty else { throw AudienceError(path: path, reason: .unnamedColumn(position: i + 1)) }
            guard seen.insert(name).inserted else {
                throw AudienceError(path: path, reason: .duplicateColumn(name: name))
            }
            schema.add(name)
        }
        guard let token = schema.column(anyOf: columns.tokenNames) else {
            // One column whose name holds another separator: the file is most
            // likely separated by it.
            var hint = ""
            let separators: [(character: Character, name: String, flag: String)] = [(";", "semicolons", ";"), ("\t", "tabs", "\\t"), ("|", "bars", "|")]
            if names!.count == 1, let other = separators.first(where: { names![0].contains($0.character) }) {
                hint = "; its header holds \(other.name): give --delimiter '\(other.flag)'"
            }
            if columns.tokenKind == .channel { hint += "; a broadcast audience has a channel per row, in a column named channel_id (or mapped by the job's \"columns\": {\"channel_id\": …})" }
            throw AudienceError(path: path, reason: .noTokenColumn(named: columns.sources[columns.tokenKind == .channel ? "channel_id" : "token"], columns: names!, hint: hint,
                                                                     channel: columns.tokenKind == .channel))
        }
        tokenColumn = token
    }

    public func next(into row: inout AudienceRow) throws -> AudienceRecord? {
        try readRow(into: &row, columns: schema.count, validateCount: true)
    }

    // MARK: - Rows from lines

    private func readRow(into row: inout AudienceRow, columns: Int, validateCount: Bool) throws -> AudienceRecord? {
        while true {
            guard let (number, overlong) = try nextLine() else {
                if finished { return nil }
                finished = true
                do {
                    try tokenizer.finish()
                } catch {
                    let line = rowStartLine
                    abandonRow(replayFrom: line)
                    finished = replayIndex >= replay.count
                    return .malformed(line: line, reason: "a quoted field is still open at the end of the file (unbalanced quote)", token: tokenGuess())
                }
                if fields.ended { return deliver(into: &row, columns: columns, validateCount: validateCount) }
                return nil
            }
            if let overlong {
                guard rowLines.isEmpty else {
                    // A quoted field opened on an earlier line is still open:
                    // that row is malformed, but the lines after its first are
                    // parsed again, and this one is reported in its place after
                    // them (before, every row in between was silently lost).
                    let line = rowStartLine
                    abandonRow(replayFrom: line, then: KeptLine(number: number, bytes: [], overlong: overlong))
                    return .malformed(line: line, reason: "a quoted field is still open at line \(number), which is longer than \(maxRowBytes >> 10) KiB (\(overlong) bytes; unbalanced quote?)", token: tokenGuess())
                }
                // Too long to be a row: drop it.
                abandonRow(replayFrom: nil)
                return .malformed(line: number, reason: "the row is longer than \(maxRowBytes >> 10) KiB (\(overlong) bytes)", token: nil)
            }
            if fields.boundsCount == 0 && rowLines.isEmpty && !fields.ended {
                rowStartLine = number
                rowBytes = 0
            }
            let lineBytes = currentLineCount
            rowBytes += lineBytes
            var syntaxError = false
            withCurrentLine { bytes in
                var bytes = bytes
                if number == 1, bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF {
                    bytes = UnsafeRawBufferPointer(rebasing: bytes[3...])
                }
                do { try tokenizer.parse(bytes) } catch { syntaxError = true }
            }
            if syntaxError {
                let line = rowStartLine
                let spanned = !rowLines.isEmpty
                if spanned { rowLines.append(KeptLine(number: number, bytes: copyOfCurrentLine())) }
                // The header, quoted and separated by something else: say which.
                let hint = line == 1 && !validateCount ? Self.quotedSeparatorHint(copyOfCurrentLine(), delimiter: tokenizer.delimiter) : ""
                abandonRow(replayFrom: spanned ? line : nil)
                return .malformed(line: line, reason: "invalid CSV quoting\(hint)", token: tokenGuess())
            }
            if fields.ended {
                return deliver(into: &row, columns: columns, validateCount: validateCount)
            }
            // The row goes on past this line: keep a copy for replay.
            rowLines.append(KeptLine(number: number, bytes: copyOfCurrentLine()))
            if rowBytes > maxRowBytes {
                let line = rowStartLine
                abandonRow(replayFrom: line)
                return .malformed(line: line, reason: "a quoted field runs on for more than \(maxRowBytes >> 10) KiB (unbalanced quote?)", token: tokenGuess())
            }
        }
    }

    private var pendingToken: String?

    private func tokenGuess() -> String? {
        defer { pendingToken = nil }
        return pendingToken
    }

    /// Forgets the row in progress; with `replayFrom`, parses again the lines
    /// after that one, then `then`.
    private func abandonRow(replayFrom startLine: Int?, then next: KeptLine? = nil) {
        if tokenColumn >= 0, fields.boundsCount > tokenColumn * 2 + 1 {
            pendingToken = String(decoding: fields.field(tokenColumn), as: UTF8.self)
        }
        tokenizer.reset()
        if let startLine {
            var again = rowLines.filter { $0.number > startLine }
            if let next { again.append(next) }
            replay = again + replay[replayIndex...]
            replayIndex = 0
        }
        rowLines.removeAll()
    }

    private func deliver(into row: inout AudienceRow, columns: Int, validateCount: Bool) -> AudienceRecord {
        defer {
            fields.clear()
            if !rowLines.isEmpty { rowLines.removeAll() }
        }
        let count = fields.fieldCount
        if validateCount && count != columns {
            if tokenColumn >= 0, count > tokenColumn {
                pendingToken = String(decoding: fields.field(tokenColumn), as: UTF8.self)
            }
            return .malformed(line: rowStartLine, reason: "the row has \(count) fields where the header has \(columns)", token: tokenGuess())
        }
        // One copy each, in place when the row's buffers fit (they nearly
        // always do: rows have the same columns and similar lengths).
        row.line = rowStartLine
        row.storage.removeAll(keepingCapacity: true)
        row.storage.append(contentsOf: fields.fields.all)
        let bounds = fields.bounds
        if row.bounds.count == bounds.count {
            row.bounds.withUnsafeMutableBufferPointer { _ = $0.update(fromContentsOf: bounds) }
        } else {
            row.bounds = Array(bounds)
        }
        return .row
    }

    // MARK: - Line source: replayed lines first, then the file

    private var replayCurrent: [UInt8]? = nil

    private func nextLine() throws -> (Int, Int?)? {
        if replayIndex < replay.count {
            let line = replay[replayIndex]
            replayIndex += 1
            if replayIndex == replay.count {
                replay.removeAll()
                replayIndex = 0
            }
            replayCurrent = line.bytes
            return (line.number, line.overlong)
        }
        replayCurrent = nil
        switch try lines.next() {
        case nil: return nil
        case .text(let number): return (number, nil)
        case .overlong(let number, let count): return (number, count)
        }
    }

    private var currentLineCount: Int {
        replayCurrent?.count ?? lines.current.count
    }

    private func withCurrentLine(_ body: (UnsafeRawBufferPointer) -> Void) {
        if let replayCurrent {
            replayCurrent.withUnsafeBytes(body)
        } else {
            lines.withCurrentLine(body)
        }
    }

    /// "; its header holds semicolons between quoted names: give --delimiter ';'"
    /// when `line` holds `";"` (or a tab or bar between quotes) and that is not the delimiter.
    static func quotedSeparatorHint(_ line: [UInt8], delimiter: UInt8) -> String {
        let quote = UInt8(ascii: "\"")
        let separators: [(byte: UInt8, name: String, flag: String)] = [(UInt8(ascii: ";"), "semicolons", ";"), (9, "tabs", "\\t"), (UInt8(ascii: "|"), "bars", "|")]
        for s in separators where s.byte != delimiter && line.count >= 3 {
            for i in 1..<(line.count - 1) where line[i] == s.byte && line[i - 1] == quote && line[i + 1] == quote {
                return "; its header holds \(s.name) between quoted names: give --delimiter '\(s.flag)'"
            }
        }
        return ""
    }

    private func copyOfCurrentLine() -> [UInt8] {
        if let replayCurrent { return replayCurrent }
        return lines.withCurrentLine { Array($0) }
    }
}
