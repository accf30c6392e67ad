import Foundation
import Testing
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignTestSupport
@testable import CampaignPlan
@testable import PlanStream
import ByteStreams

/// Inputs built to hurt (Tests/Corpus/hostile/, and a few too big to keep
/// there, made here). Each must end in a clear error naming the file, or in
/// rows planned and rejected with reasons: never a crash, a hang, or a row
/// that is neither.
@Suite struct HostileInputTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Corpus/hostile")

    static let job = try! CampaignJob(json: JSONValue.parse(#"{"campaign":"hostile","fallback":["en"],"messages":{"en":{"alert":"Hello {name}"}}}"#), path: "job.json")

    enum Expected {
        case error(String)
        case rows(read: Int, planned: Int)
    }

    static let audiences: [String: Expected] = [
        "binary-garbage.csv": .error("has no token column"),
        "bom-crlf.csv": .rows(read: 2, planned: 2),
        "deep-nesting.ndjson": .rows(read: 2, planned: 0),   // the second row has no name
        "duplicate-keys.ndjson": .rows(read: 1, planned: 0),
        "empty.csv": .error("is empty"),
        "header-only.csv": .rows(read: 0, planned: 0),
        "huge-number.ndjson": .rows(read: 1, planned: 0),
        "invalid-utf8.csv": .rows(read: 3, planned: 1),
        "invalid-utf8.ndjson": .rows(read: 2, planned: 1),
        "lone-surrogate.ndjson": .rows(read: 2, planned: 0),
        "no-token-column.csv": .error("has no token column (its columns are: device, lang)"),
        "not-objects.ndjson": .rows(read: 5, planned: 0),
        "nul-bytes.csv": .rows(read: 3, planned: 2),
        "nul-escape.ndjson": .rows(read: 2, planned: 1),
        "only-newlines.csv": .error("is empty"),
        "ragged-rows.csv": .rows(read: 3, planned: 0),
        "truncated.csv.gz": .error("ends in the middle of its gzip data"),
        "unbalanced-quote-at-eof.csv": .rows(read: 2, planned: 1),
    ]

    struct Refusal: Error { var sentence: String }

    /// Plans `path`; returns the summary, or the error's sentence.
    static func plan(_ path: String, in dir: TemporaryDirectory) -> Result<PlanSummary, Refusal> {
        do {
            let summary = try Planner(job: job, options: PlanOptions(now: 1_700_000_000))
                .run(reader: AudienceFile.open(path), plan: PlanWriter(path: dir.file("plan")), rejects: RejectsWriter(path: dir.file("rejects")))
            return .success(summary)
        } catch {
            return .failure(Refusal(sentence: "\(error)"))
        }
    }

    @Test func everyHostileAudienceEndsInAnErrorOrInRowsAccountedFor() throws {
        let folder = Self.corpus.appendingPathComponent("audience")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(Set(names) == Set(Self.audiences.keys), "every corpus file has an expectation")
        for name in names {
            let dir = TemporaryDirectory("hostile")
            let path = folder.appendingPathComponent(name).path
            switch (Self.plan(path, in: dir), Self.audiences[name]!) {
            case (.failure(let refusal), .error(let expected)):
                let message = refusal.sentence
                #expect(message.contains(expected) && message.contains(path), "\(name): \(message)")
            case (.success(let s), .rows(let read, let planned)):
                #expect(s.rowsRead == read && s.planned == planned, "\(name): \(s.text)")
                #expect(s.planned + s.rejectedTotal == s.rowsRead, "\(name): a row is neither planned nor rejected")
                let rejects = (try? String(contentsOfFile: dir.file("rejects"), encoding: .utf8)) ?? ""
                let lines = rejects.split(separator: "\n")
                #expect(lines.count == s.rejectedTotal, "\(name)")
                for line in lines {
                    let value = try JSONValue.parse(String(line))
                    #expect(value["line"]?.integerValue != nil && value["reason"]?.stringValue?.isEmpty == false, "\(name): \(line)")
                }
            case (let got, let expected):
                Issue.record("\(name): expected \(expected), got \(got)")
            }
        }
    }

    /// A truncated gzip audience: on a stream, the rows before the cut are
    /// planned (with no trailer); a plan file is not left behind at all.
    @Test func aTruncatedGzipAudienceKeepsTheRowsBeforeTheCutOnAStreamAndNoPlanFile() throws {
        let dir = TemporaryDirectory("hostile")
        let path = Self.corpus.appendingPathComponent("audience/truncated.csv.gz").path
        #expect(throws: (any Error).self) {
            try Planner(job: Self.job, options: PlanOptions(now: 1)).run(
                reader: AudienceFile.open(path), plan: PlanWriter(path: dir.file("stream"), inPlace: true), rejects: nil)
        }
        let reader = try PlanReader(path: dir.file("stream"))
        var records = 0
        while try reader.next() != nil { records += 1 }
        #expect(records > 1000 && !reader.isComplete, "\(records) records kept")

        #expect(throws: (any Error).self) {
            try Planner(job: Self.job, options: PlanOptions(now: 1)).run(
                reader: AudienceFile.open(path), plan: PlanWriter(path: dir.file("plan")), rejects: nil)
        }
        #expect(!FileManager.default.fileExists(atPath: dir.file("plan")))
        #expect(!FileManager.default.fileExists(atPath: dir.file("plan.partial")))
    }

    @Test(.timeLimit(.minutes(5)), arguments: ["csv", "ndjson"])
    func aTenMegabyteFieldIsOneRejectedRowInBoundedMemory(format: String) throws {
        let dir = TemporaryDirectory("hostile")
        let token = String(repeating: "ab", count: 32), other = String(repeating: "cd", count: 32)
        let huge = String(repeating: "x", count: 10 << 20)
        let text = format == "csv"
            ? "token,name\n\(token),\(huge)\n\(other),fine\n"
            : "{\"token\":\"\(token)\",\"name\":\"\(huge)\"}\n{\"token\":\"\(other)\",\"name\":\"fine\"}\n"
        try text.write(toFile: dir.file("big.\(format)"), atomically: true, encoding: .utf8)
        guard case .success(let s) = Self.plan(dir.file("big.\(format)"), in: dir) else {
            Issue.record("the audience was refused as a whole")
            return
        }
        #expect(s.rowsRead == 2 && s.planned == 1 && s.rejected[RejectCode.malformedRow] == 1, "\(s.text)")
        let rejects = try String(contentsOfFile: dir.file("rejects"), encoding: .utf8)
        #expect(rejects.contains("longer than"), "\(rejects)")
        #expect(rejects.utf8.count < 4096, "the reject does not copy the field")
    }

    @Test(.timeLimit(.minutes(5))) func fiveThousandColumnsAreReadAndTheUnusedIgnored() throws {
        let dir = TemporaryDirectory("hostile")
        let header = ["token", "name"] + (0..<5000).map { "c\($0)" }
        let row = [String(repeating: "ef", count: 32), "Wide"] + (0..<5000).map { "\($0)" }
        try (header.joined(separator: ",") + "\n" + row.joined(separator: ",") + "\n").write(toFile: dir.file("wide.csv"), atomically: true, encoding: .utf8)
        guard case .success(let s) = Self.plan(dir.file("wide.csv"), in: dir) else {
            Issue.record("refused")
            return
        }
        #expect(s.rowsRead == 1 && s.planned == 1)
    }

    @Test func everyHostileJobIsRefusedWithASentenceNamingTheFile() throws {
        let folder = Self.corpus.appendingPathComponent("job")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(names.count >= 10)
        for name in names {
            let path = folder.appendingPathComponent(name).path
            do {
                _ = try CampaignJob.load(path: path)
                Issue.record("\(name) was accepted")
            } catch {
                let sentence = error.description
                #expect(sentence.hasPrefix(path + ":") && sentence.hasSuffix(".") && !sentence.contains("\n"), "\(name): \(sentence)")
            }
        }
    }

    /// A good plan, then the same plan damaged each way a file can be.
    @Test func damagedPlansAreRefusedWithTheirLine() throws {
        let dir = TemporaryDirectory("hostile")
        try "token,name\n\((0..<50).map { String(format: "%064x", $0 + 1) + ",n\($0)" }.joined(separator: "\n"))\n"
            .write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        _ = try Planner(job: Self.job, options: PlanOptions(now: 1_700_000_000))
            .run(reader: AudienceFile.open(dir.file("a.csv")), plan: PlanWriter(path: dir.file("good.plan")), rejects: nil)
        let good = try String(contentsOfFile: dir.file("good.plan"), encoding: .utf8)
        var lines = good.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        lines.removeLast()   // the empty string after the last newline

        func read(_ text: String) -> String {
            do {
                try text.write(toFile: dir.file("bad.plan"), atomically: true, encoding: .utf8)
                let reader = try PlanReader(path: dir.file("bad.plan"))
                while try reader.next() != nil {}
                return reader.isComplete ? "complete" : "incomplete"
            } catch {
                return "\(error)"
            }
        }
        #expect(read(good) == "complete")
        #expect(read(String(good.dropLast(40))).contains("incomplete") || read(String(good.dropLast(40))).contains("line 52"))
        #expect(read(lines.prefix(30).joined(separator: "\n") + "\n") == "incomplete")
        var swapped = lines
        swapped.swapAt(10, 11)
        #expect(read(swapped.joined(separator: "\n") + "\n").contains("line 11: record seq 11 where 10 was expected"))
        var forged = lines
        forged[20] = forged[20].replacingOccurrences(of: "Hello", with: "Howdy")
        #expect(read(forged.joined(separator: "\n") + "\n").contains("does not match the records'"))
        var forgedTrailer = lines
        let trailerIndex = forgedTrailer.count - 1
        forgedTrailer[trailerIndex] = forgedTrailer[trailerIndex].replacingOccurrences(
            of: #"("crc32":")[0-9a-f]{8}"#, with: "$1deadbeef", options: .regularExpression)
        #expect(forgedTrailer[trailerIndex].contains("deadbeef"))
        #expect(read(forgedTrailer.joined(separator: "\n") + "\n").contains("the trailer's checksum deadbeef does not match"))
        var future = lines
        future[0] = future[0].replacingOccurrences(of: #""version":1"#, with: #""version":2"#)
        #expect(read(future.joined(separator: "\n") + "\n").contains("plan format version 2 is not supported"))
        #expect(read("").contains("the plan is empty"))
        #expect(read("{\"seq\":1}\n").contains("line 1: the first line is not a plan header"))
        var extra = lines
        extra.append(lines[5])
        #expect(read(extra.joined(separator: "\n") + "\n").contains("text after the trailer"))
    }
}

/// The checksum is taken over long runs now; it must still be the CRC-32 of
/// the record lines, byte for byte, as docs/plan-format.md defines it.
@Suite struct PlanChecksumTests {
    @Test func theTrailerHoldsTheCRC32OfTheRecordLinesComputedLineByLine() throws {
        let dir = TemporaryDirectory("checksum")
        // Enough rows to span several writer flushes and reader refills.
        try "token,name\n\((0..<6000).map { String(format: "%064x", $0 + 1) + ",name \($0) " + String(repeating: "é", count: $0 % 40) }.joined(separator: "\n"))\n"
            .write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        _ = try Planner(job: HostileInputTests.job, options: PlanOptions(now: 1_700_000_000))
            .run(reader: AudienceFile.open(dir.file("a.csv")), plan: PlanWriter(path: dir.file("p.plan")), rejects: nil)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir.file("p.plan"))))
        var lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false)
        lines.removeLast()                      // after the final LF
        let trailer = try JSONValue.parse(Array(lines.removeLast()))
        lines.removeFirst()                     // the header
        var crc = CRC32()
        for line in lines { crc.update(Array(line) + [0x0A]) }
        #expect(lines.count == 6000)
        #expect(trailer["trailer"]?["crc32"]?.stringValue == crc.hex)
        let reader = try PlanReader(path: dir.file("p.plan"))
        while try reader.next() != nil {}
        #expect(reader.trailer?.crc32 == crc.hex)
    }
}
