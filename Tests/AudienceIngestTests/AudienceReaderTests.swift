import Foundation
import Testing
import CampaignIO
import CampaignTestSupport
@testable import AudienceIngest
import ByteStreams

/// Reads every record of a file: rows as [column: value], malformed rows as (line, reason).
func readAll(_ text: String, name: String = "audience.csv", gzip: Bool = false) throws -> (rows: [(Int, [String: String])], bad: [(Int, String, String?)], schema: [String]) {
    let dir = TemporaryDirectory()
    var bytes = Array(text.utf8)
    if gzip { bytes = GzipCompressor().compress(bytes, finish: true) }
    let path = dir.file(name)
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    let reader = try AudienceFile.open(path)
    var row = AudienceRow()
    var rows: [(Int, [String: String])] = []
    var bad: [(Int, String, String?)] = []
    while let record = try reader.next(into: &row) {
        switch record {
        case .row:
            var values: [String: String] = [:]
            for (i, name) in reader.schema.names.enumerated() { values[name] = row.string(i) }
            rows.append((row.line, values))
        case .malformed(let line, let reason, let token):
            bad.append((line, reason, token))
        }
    }
    return (rows, bad, reader.schema.names)
}

@Suite struct CSVAudienceReaderTests {
    @Test func quotedFieldsWithCommasQuotesAndLineBreaks() throws {
        let csv = "token,lang,first_name,note\r\n"
            + "aa,en,\"Smith, Jo\",\"said \"\"hi\"\"\"\r\n"
            + "bb,es,\"Ana\nMaría\",x\r\n"
            + "cc,pt-BR,Zé,\r\n"
        let result = try readAll(csv)
        #expect(result.schema == ["token", "lang", "first_name", "note"])
        #expect(result.bad.isEmpty)
        #expect(result.rows.map(\.0) == [2, 3, 5])
        #expect(result.rows[0].1["first_name"] == "Smith, Jo")
        #expect(result.rows[0].1["note"] == "said \"hi\"")
        #expect(result.rows[1].1["first_name"] == "Ana\nMaría")
        #expect(result.rows[2].1["note"] == nil)
    }

    @Test func byteOrderMarkAndMissingFinalNewline() throws {
        let result = try readAll("\u{FEFF}token,lang\naa,en\nbb,fr")
        #expect(result.schema == ["token", "lang"])
        #expect(result.rows.map { $0.1["token"] } == ["aa", "bb"])
    }

    @Test func aStrayQuoteThenAnOverlongLineLosesNoRowInBetween() throws {
        // Line 2 opens a quote that never closes; lines 3-102 are good; line
        // 103 is longer than the 1 MiB row limit; line 104 is good.
        var csv = "token,lang,n\n" + "t2,\"en,2\n"
        for line in 3...102 { csv += "t\(line),en,\(line)\n" }
        csv += "t103,en," + String(repeating: "x", count: 1_100_000) + "\n"
        csv += "t104,en,104\n"
        let result = try readAll(csv)
        #expect(result.rows.map(\.0) == Array(3...102) + [104])
        #expect(result.rows.first?.1["token"] == "t3")
        #expect(result.bad.map(\.0) == [2, 103])
        #expect(result.bad.first?.1.contains("still open at line 103") == true)
        #expect(result.bad.last?.1.contains("longer than 1024 KiB") == true)
    }

    @Test func rowsWithTheWrongFieldCountAreMalformedWithTheirLine() throws {
        let result = try readAll("token,lang\naa,en\nbb,en,extra\ncc\ndd,de\n")
        #expect(result.rows.map { $0.1["token"] } == ["aa", "dd"])
        #expect(result.bad.map(\.0) == [3, 4])
        #expect(result.bad[0].1 == "the row has 3 fields where the header has 2")
        #expect(result.bad[0].2 == "bb")
    }

    @Test func aStrayQuoteRejectsOnlyItsRow() throws {
        let result = try readAll("token,lang\naa,en\n\"bb\"x,en\ncc,en\n")
        #expect(result.rows.map { $0.1["token"] } == ["aa", "cc"])
        #expect(result.bad.map(\.0) == [3])
        #expect(result.bad[0].1 == "invalid CSV quoting")
    }

    @Test func anUnbalancedQuoteAtTheEndDoesNotLoseEarlierRows() throws {
        let result = try readAll("token,lang\naa,en\nbb,\"en\ncc,en\n")
        #expect(result.rows.map { $0.1["token"] } == ["aa", "cc"])
        #expect(result.bad.map(\.0) == [3])
        #expect(result.bad[0].1.contains("unbalanced quote"))
    }

    @Test func anUnbalancedQuoteMidFileIsBoundedAndTheRowsAfterItSurvive() throws {
        var csv = "token,lang\n" + "aa,\"en\n"
        let good = (0..<3000).map { "t\($0)" }
        for t in good { csv += "\(t),\(String(repeating: "x", count: 400))\n" }
        let dir = TemporaryDirectory()
        try csv.write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        let reader = try CSVAudienceReader(source: try InputFile.open(dir.file("a.csv")), path: "a.csv", maxRowBytes: 64 << 10)
        var row = AudienceRow()
        var tokens: [String] = []
        var bad: [Int] = []
        while let record = try reader.next(into: &row) {
            switch record {
            case .row: tokens.append(row.string(0)!)
            case .malformed(let line, _, _): bad.append(line)
            }
        }
        #expect(bad == [2])
        #expect(tokens == good)
    }

    @Test func gzipInputIsDetectedByItsMagicBytes() throws {
        let result = try readAll("token,lang\naa,en\nbb,es\n", name: "audience.data", gzip: true)
        #expect(result.rows.map { $0.1["lang"] } == ["en", "es"])
    }

    @Test func unusableFilesSayWhy() throws {
        #expect { try readAll("") } throws: { ($0 as? AudienceError)?.reason == .empty }
        #expect { try readAll("name,lang\nx,en\n") } throws: {
            ($0 as? AudienceError)?.reason == .noTokenColumn(named: nil, columns: ["name", "lang"], hint: "")
        }
        #expect { try readAll("token,lang,token\n") } throws: {
            ($0 as? AudienceError)?.reason == .duplicateColumn(name: "token")
        }
        let headerOnly = try readAll("token,lang\n")
        #expect(headerOnly.rows.isEmpty && headerOnly.bad.isEmpty)
    }

    @Test func aTruncatedGzipFileIsAnError() throws {
        let dir = TemporaryDirectory()
        let bytes = GzipCompressor().compress(Array(String(repeating: "token,lang\naa,en\n", count: 1000).utf8), finish: true)
        try Data(bytes.prefix(bytes.count / 2)).write(to: URL(fileURLWithPath: dir.file("a.csv.gz")))
        let reader = try AudienceFile.open(dir.file("a.csv.gz"))
        var row = AudienceRow()
        #expect { while try reader.next(into: &row) != nil {} } throws: {
            ($0 as? IOError)?.reason == "ends in the middle of its gzip data (truncated?)"
        }
    }
}

@Suite struct NDJSONAudienceReaderTests {
    @Test func objectsBecomeRowsAndBadLinesAreMalformed() throws {
        let text = """
        {"token":"aa","lang":"es-MX","first_name":"Ana","discount":20,"vip":true,"extra":null}

        {"token":"bb","tags":["a","b"]}
        not json
        [1,2]
        {"token":"cc","first_name":"Zoë \\"Z\\""}
        """
        let result = try readAll(text, name: "a.ndjson")
        #expect(result.rows.map(\.0) == [1, 3, 6])
        #expect(result.rows[0].1["discount"] == "20")
        #expect(result.rows[0].1["vip"] == "true")
        #expect(result.rows[0].1["extra"] == nil)
        #expect(result.rows[1].1["tags"] == #"["a","b"]"#)
        #expect(result.rows[2].1["first_name"] == "Zoë \"Z\"")
        #expect(result.bad.map(\.0) == [4, 5])
        #expect(result.bad[1].1 == "the line is an array, not a JSON object")
    }

    @Test func formatIsChosenByExtensionThenContent() {
        #expect(AudienceFormat.detect(path: "a.csv.gz", firstBytes: Array("{".utf8)) == .csv)
        #expect(AudienceFormat.detect(path: "a.jsonl", firstBytes: []) == .ndjson)
        #expect(AudienceFormat.detect(path: "-", firstBytes: Array("\u{FEFF}  {\"token\":1}".utf8)) == .ndjson)
        #expect(AudienceFormat.detect(path: "-", firstBytes: Array("token,lang".utf8)) == .csv)
    }
}

/// The NDJSON reader reads common lines with a scanner of its own and gives
/// the rest to the JSON parser: both must give the same rows and errors.
@Suite struct NDJSONFastPathTests {
    static func lines(seed: UInt64, count: Int) -> [UInt8] {
        var rng = SplitMix64(seed: seed)
        let keys = ["token", "lang", "first_name", "discount", "badge", "registered_at"]
        let strings = ["Ana", "", "José", "Zoë \\\"Z\\\"", "tab\\there", "\\u00e9t\\u00e9", "日本", "a/b", "\\ud83d\\udc4b", "x\\ud800y"]
        let others = ["20", "-1", "0", "01", "1.5", "1.", "2e10", "-0.5E-3", "true", "false", "null", "nul", "[1,2]", "{\"a\":1}", "tru", "-", "+1"]
        var out: [UInt8] = []
        for i in 0..<count {
            var members: [String] = []
            var names = keys.shuffled(using: &rng).prefix(Int.random(in: 1...6, using: &rng))
            if i % 3 == 0 { names = keys[...] }  // the usual order, often
            for name in names {
                let value = Bool.random(using: &rng)
                    ? "\"\(strings.randomElement(using: &rng)!)\"" : others.randomElement(using: &rng)!
                let space = Int.random(in: 0..<8, using: &rng) == 0 ? " " : ""
                members.append("\"\(name)\"\(space):\(space)\(value)")
            }
            if Int.random(in: 0..<25, using: &rng) == 0 { members.append(members.first!) }          // duplicate key
            if Int.random(in: 0..<40, using: &rng) == 0 { members.append("\"new_\(i % 4)\":1") }    // a key first seen later
            var line = Array("{\(members.joined(separator: ","))}".utf8)
            switch Int.random(in: 0..<30, using: &rng) {
            case 0: line += Array(" x".utf8)                        // text after the object
            case 1: line = Array("  ".utf8)                         // blank
            case 2: line.removeLast()                              // cut short
            case 3: line.insert(0xFF, at: line.count / 2)          // invalid UTF-8
            case 4: line += [0x0D]                                  // CRLF
            default: break
            }
            out += line + [0x0A]
        }
        return out
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func fastAndFullParsingAgree(seed: UInt64) throws {
        let text = Self.lines(seed: seed, count: 3_000)
        var fastRows = 0
        func read(fast: Bool) throws -> (records: [String], schema: [String]) {
            let reader = NDJSONAudienceReader(source: MemorySource(text), path: "a.ndjson")
            reader.usesFastPath = fast
            var row = AudienceRow()
            var records: [String] = []
            while let record = try reader.next(into: &row) {
                switch record {
                case .row:
                    let values = (0..<reader.schema.count).map { row.value($0).map { Array($0) }?.description ?? "-" }
                    records.append("\(row.line) \(values)")
                case .malformed(let line, let reason, _):
                    records.append("\(line) malformed: \(reason)")
                }
            }
            if fast { fastRows = reader.fastPathRows }
            return (records, reader.schema.names)
        }
        let fast = try read(fast: true), full = try read(fast: false)
        #expect(fast.schema == full.schema)
        #expect(fast.records.count == full.records.count)
        let firstDifference = zip(fast.records, full.records).first { $0 != $1 }
        #expect(firstDifference == nil, "\(String(describing: firstDifference))")
        // The sample has both kinds of line.
        #expect(full.records.filter { $0.contains("malformed") }.count > 100)
        #expect(full.records.filter { !$0.contains("malformed") }.count > 800)
        #expect(fastRows > 200, "the fast path read \(fastRows) rows")
    }
}
