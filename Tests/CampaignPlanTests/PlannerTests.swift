import Foundation
import Testing
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignTestSupport
import FeedbackStore
@testable import CampaignPlan
@testable import PlanStream
import ByteStreams

let springJob = """
{
  "campaign": "spring-sale", "format": "enhanced", "maxPayload": 256, "expiresIn": 86400, "priority": 10,
  "fallback": ["en"],
  "messages": {
    "en": { "alert": "Hi {first_name}, {discount}% off until Sunday", "sound": "default", "badge": "{badge}" },
    "es": { "alert": "¡Hola {first_name}! {discount}% de descuento hasta el domingo" },
    "pt-BR": { "alert": "Olá {first_name}, {discount}% de desconto até domingo" }
  },
  "custom": { "campaign": "spring" }
}
"""

func tokenHex(_ n: Int) -> String {
    (0..<32).map { String(format: "%02x", (n * 31 + $0 * 7) % 256) }.joined()
}

struct PlanRun {
    let dir = TemporaryDirectory("plan")
    var summary = PlanSummary()
    var records: [PlanRecord] = []
    var rejects: [JSONValue] = []
    var reader: PlanReader!

    init(job: String = springJob, audience: String, name: String = "audience.csv", store: FeedbackStore? = nil, shards: Int = 8,
         columns: ColumnMapping = ColumnMapping(), now: UInt32 = 1_700_000_000, parts: Int = 1) throws {
        let jobFile = try CampaignJob(json: JSONValue.parse(job), path: "job.json")
        try Data(audience.utf8).write(to: URL(fileURLWithPath: dir.file(name)))
        var options = PlanOptions(now: now)
        options.parts = parts
        options.campaignHash = "test"
        options.shards = shards
        options.columns = columns
        let planner = try Planner(job: jobFile, options: options, feedback: store)
        let writers = try (0..<parts).map { k in try PlanWriter(path: dir.file(parts == 1 ? "plan.ndjson" : "part-\(k).plan")) }
        let rejectsWriter = try RejectsWriter(path: dir.file("rejects.ndjson"))
        summary = try planner.run(reader: AudienceFile.open(dir.file(name), columns: planner.columns), plans: writers, rejects: rejectsWriter)
        try rejectsWriter.flush()
        for k in 0..<parts {
            reader = try PlanReader(path: dir.file(parts == 1 ? "plan.ndjson" : "part-\(k).plan"))
            while let r = try reader.next() { records.append(r) }
        }
        let rejectText = try String(contentsOfFile: dir.file("rejects.ndjson"), encoding: .utf8)
        rejects = try rejectText.split(separator: "\n").map { try JSONValue.parse(String($0)) }
    }

    func reject(line: Int) -> (code: String?, reason: String?) {
        let r = rejects.first { $0["line"]?.integerValue == Int64(line) }
        return (r?["code"]?.stringValue, r?["reason"]?.stringValue)
    }
}

@Suite struct PlannerTests {
    /// Two plans of one job made in the same second are two planning runs:
    /// their headers differ by the run's id, and so do the apns-ids drawn from them.
    @Test func twoPlansOfOneJobInOneSecondHaveTheirOwnIDs() throws {
        let audience = "token,lang,first_name,discount,badge\n\(String(repeating: "ab", count: 32)),en,Ann,10,1\n"
        let a = try PlanRun(audience: audience), b = try PlanRun(audience: audience)
        #expect(a.reader.header.created == b.reader.header.created)
        let (runA, runB) = (try #require(a.reader.header.run), try #require(b.reader.header.run))
        #expect(runA != runB && runA.count == 16)
        func id(_ run: PlanRun) -> String { NotificationID.uuid(planChecksum: String(decoding: run.reader.header.json.serialized(), as: UTF8.self), seq: 1) }
        #expect(id(a) != id(b), "equal apns-ids for two campaigns")
        // The header reads back with its run, and a header without one (an older plan) still reads.
        #expect(try PlanHeader(json: a.reader.header.json).run == runA)
        var old = a.reader.header
        old.run = nil
        #expect(try PlanHeader(json: old.json).run == nil)
    }

    @Test func everyRowEndsPlannedOrRejectedWithItsLineAndReason() throws {
        var store = FeedbackStore()
        store.record(token: DeviceToken(hex: tokenHex(20))!.bytes, timestamp: 1_690_000_000)
        store.record(token: DeviceToken(hex: tokenHex(21))!.bytes, timestamp: 1_690_000_000)
        store.record(token: DeviceToken(hex: tokenHex(22))!.bytes, timestamp: 1_690_000_000)
        let rows = [
            "token,lang,first_name,discount,badge,registered_at",                         // 1
            "\(tokenHex(1)),en,Ana,20,3,",                                                // 2 planned en
            "\(tokenHex(2).uppercased()),es_MX.UTF-8,José,15,,",                          // 3 planned es (no badge var in es)
            "<\(tokenHex(3))>,pt-PT,\"João \"\"JJ\"\"\",10,,",                          // 4 planned pt-BR
            "\(tokenHex(4)),de-DE,Hans,5,1,",                                             // 5 fallback en
            "\(tokenHex(1)),en,Ana again,20,3,",                                          // 6 duplicate
            "abc,en,Bad,1,1,",                                                            // 7 invalid token (not hex)
            "\(tokenHex(5).dropLast(2)),en,Short,1,1,",                                  // 8 invalid token (31 bytes)
            ",en,NoToken,1,1,",                                                           // 9 missing token
            "\(tokenHex(6)),en,NoDiscount,,1,",                                           // 10 missing variable
            "\(tokenHex(7)),en,Badge,1,lots,",                                            // 11 invalid badge
            "\(tokenHex(8)),en,Extra,1,1,,surplus",                                       // 12 malformed: 7 fields
            "\(tokenHex(20)),en,Gone,1,1,",                                               // 13 suppressed: no registered_at
            "\(tokenHex(21)),en,Old,1,1,1680000000",                                      // 14 suppressed: older
            "\(tokenHex(22)),en,Back,1,1,2024-01-01T00:00:00Z",                           // 15 planned: registered again
            "\(tokenHex(9)),es,\(String(repeating: "Nombre muy largo ", count: 20)),50,,", // 16 planned, truncated
        ]
        let run = try PlanRun(audience: rows.joined(separator: "\r\n") + "\r\n", store: store)
        #expect(run.summary.rowsRead == 15)
        #expect(run.summary.planned == 6)
        #expect(run.summary.rejectedTotal == 9)
        #expect(run.summary.planned + run.summary.rejectedTotal == run.summary.rowsRead)
        #expect(run.reader.isComplete)
        #expect(run.records.map(\.lang) == ["en", "es", "pt-BR", "en", "en", "es"])
        #expect(run.records.map(\.seq) == [1, 2, 3, 4, 5, 6])
        #expect(run.summary.truncated == ["es": 1])
        #expect(run.summary.perLanguage == ["en": 3, "es": 2, "pt-BR": 1])

        let expected: [(Int, String, String)] = [
            (6, "duplicate_token", "duplicate token: an earlier row has it (the first wins)"),
            (7, "invalid_token", "invalid token: not hex"),
            (8, "invalid_token", "invalid token: 31 bytes where the enhanced format takes 32"),
            (9, "missing_token", "missing token"),
            (10, "missing_variable", "missing variable discount"),
            (11, "invalid_badge", "badge \"lots\" is not a whole number of at least 0"),
            (12, "malformed_row", "malformed row: the row has 7 fields where the header has 6"),
            (13, "suppressed_by_feedback", "suppressed by feedback: unregistered at 1690000000 and the row has no registered_at"),
            (14, "suppressed_by_feedback", "suppressed by feedback: unregistered at 1690000000 and registered_at 1680000000 is not newer"),
        ]
        for (line, code, reason) in expected {
            let r = run.reject(line: line)
            #expect(r.code == code, "line \(line)")
            #expect(r.reason == reason, "line \(line)")
        }
        #expect(run.rejects.first { $0["line"] == .number("6") }?["token"]?.stringValue == tokenHex(1))
        #expect(run.rejects.first { $0["line"] == .number("7") }?["token"] == nil)

        for record in run.records {
            #expect(record.payload.count <= 256)
            let payload = try JSONValue.parse(record.payload)
            #expect(payload["aps"]?.objectMembers != nil)
            #expect(record.shard == Planner.shard(of: record.token.withUnsafeBufferPointer { $0 }, shards: 8))
        }
        let first = try JSONValue.parse(run.records[0].payload)
        #expect(first == (try JSONValue.parse(#"{"aps":{"alert":"Hi Ana, 20% off until Sunday","sound":"default","badge":3},"campaign":"spring"}"#)))
        #expect(try JSONValue.parse(run.records[2].payload)["aps"]?["alert"]?.stringValue == "Olá João \"JJ\", 10% de desconto até domingo")
        #expect(run.records[5].payload.count <= 256)
        #expect((try JSONValue.parse(run.records[5].payload))["aps"]?["alert"]?.stringValue?.hasSuffix("…") == true)
        #expect(run.reader.header.expiry == 1_700_086_400)
        #expect(run.reader.header.priority == nil)
    }

    @Test func anEmptyLangFallsToLocaleAndMillisecondRegistrationsAreNotAlwaysNewer() throws {
        let job = #"{"campaign":"l","fallback":["en"],"messages":{"en":{"alert":"Hi"},"es":{"alert":"Hola"},"en-GB":{"alert":"Hello"}}}"#
        var store = FeedbackStore()
        store.record(token: DeviceToken(hex: tokenHex(3))!.bytes, timestamp: 1_700_000_000)
        store.record(token: DeviceToken(hex: tokenHex(4))!.bytes, timestamp: 1_700_000_000)
        let audience = [
            "token,lang,locale,registered_at",
            "\(tokenHex(1)),,es_MX,",                 // 2: lang empty: locale decides
            "\(tokenHex(2)),en-Latn-GB,es_ES,",       // 3: lang set: it wins; lookup finds en-GB
            "\(tokenHex(3)),en,,1690000000000",      // 4: unregistered later than it registered (ms): suppressed
            "\(tokenHex(4)),en,,1710000000000",      // 5: registered again since (ms): planned
        ].joined(separator: "\n") + "\n"
        let run = try PlanRun(job: job, audience: audience, store: store)
        let byToken = Dictionary(uniqueKeysWithValues: run.records.map { (DeviceToken(bytes: $0.token).hex, $0.lang) })
        #expect(byToken[tokenHex(1)] == "es")
        #expect(byToken[tokenHex(2)] == "en-GB")
        #expect(byToken[tokenHex(3)] == nil)
        #expect(run.reject(line: 4).code == "suppressed_by_feedback")
        #expect(byToken[tokenHex(4)] == "en")
    }

    @Test func theTokenFormsDeviceTokenAcceptsThePlannerAcceptsToo() throws {
        // NSData's description with spaces around it, as logs and spreadsheets give it.
        let hex = tokenHex(40)
        let grouped = stride(from: 0, to: 64, by: 8).map { i in
            String(hex[hex.index(hex.startIndex, offsetBy: i)..<hex.index(hex.startIndex, offsetBy: i + 8)])
        }.joined(separator: " ")
        let forms = ["  <\(grouped)> ", "<\(grouped)>", "\t\(hex.uppercased()) ", " \(grouped)"]
        var audience = "token,lang,first_name,discount\n"
        for form in forms { audience += "\"\(form)\",en,Ann,\(forms.firstIndex(of: form)!)\n" }
        audience += "\"  <\(grouped) > x\",en,Bob,9\n"
        let run = try PlanRun(job: #"{"campaign":"forms","messages":{"en":{"alert":"Hi {first_name}"}}}"#, audience: audience)
        for form in forms { #expect(DeviceToken(hex: form)?.hex == hex, "\(form)") }
        #expect(run.records.count == 1, "the first form is planned, the other forms of the same token are duplicates")
        #expect(run.records.first.map { DeviceToken(bytes: $0.token).hex } == hex)
        #expect(run.summary.rejected[.duplicateToken] == 3, "\(run.rejects)")
        #expect(run.reject(line: 6).reason == "invalid token: not hex")
        #expect(DeviceToken(hex: "  <\(grouped) > x") == nil)
    }

    @Test func ndjsonAudienceAndInvalidUTF8() throws {
        var text = "{\"token\":\"\(tokenHex(1))\",\"language\":\"es\",\"first_name\":\"Ana\",\"discount\":20}\n"
        text += "{\"token\":\"\(tokenHex(2))\",\"locale\":\"fr_FR\",\"first_name\":\"Zoé\",\"discount\":5,\"badge\":2}\n"
        text += "{broken\n"
        let run = try PlanRun(audience: text, name: "a.ndjson")
        #expect(run.records.map(\.lang) == ["es", "en"])
        #expect(run.reject(line: 3).code == "malformed_row")

        let dir = TemporaryDirectory()
        var bytes = Array("token,lang,first_name,discount,badge\n".utf8)
        bytes += Array("\(tokenHex(1)),en,A".utf8) + [0xFF, 0xFE] + Array(",1,1\n".utf8)
        bytes += Array("\(tokenHex(2)),en,B,1,1\n".utf8)
        try Data(bytes).write(to: URL(fileURLWithPath: dir.file("a.csv")))
        let job = try CampaignJob(json: JSONValue.parse(springJob), path: "job.json")
        let planner = try Planner(job: job, options: PlanOptions(now: 1), feedback: nil)
        let rejects = try RejectsWriter(path: dir.file("rejects"))
        let summary = try planner.run(reader: AudienceFile.open(dir.file("a.csv")), plan: PlanWriter(path: dir.file("plan")), rejects: rejects)
        try rejects.flush()
        #expect(summary.planned == 1)
        #expect(summary.rejected == [.malformedRow: 1])
        #expect(try String(contentsOfFile: dir.file("rejects"), encoding: .utf8).contains(#""line":2,"code":"malformed_row","reason":"malformed row: it is not valid UTF-8""#))
    }

    @Test func shardsAreStableAcrossRuns() {
        // FNV-1a-64 of the bytes 0...31 is 0xe6cb594c1a148ac5, computed independently (Python).
        let token = Array(UInt8(0)...UInt8(31))
        #expect(token.withUnsafeBufferPointer { Planner.shard(of: $0, shards: 64) } == 5)
        #expect(token.withUnsafeBufferPointer { Planner.shard(of: $0, shards: 1000) } == 869)
    }
}

@Suite struct PlanStreamTests {
    static func plan() throws -> (TemporaryDirectory, [String]) {
        let rows = ["token,lang,first_name,discount,badge"] + (1...20).map { "\(tokenHex($0)),en,N\($0),1,1" }
        let run = try PlanRun(audience: rows.joined(separator: "\n"))
        let lines = try String(contentsOfFile: run.dir.file("plan.ndjson"), encoding: .utf8).split(separator: "\n").map(String.init)
        return (run.dir, lines)
    }

    static func read(_ lines: [String], in dir: TemporaryDirectory) throws -> PlanReader {
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir.file("edited.ndjson"), atomically: true, encoding: .utf8)
        let reader = try PlanReader(path: dir.file("edited.ndjson"))
        while try reader.next() != nil {}
        return reader
    }

    @Test func roundTripsThroughTheReader() throws {
        let (dir, lines) = try Self.plan()
        #expect(lines.count == 22)
        #expect(lines[0].hasPrefix(#"{"header":{"version":1,"campaign":"spring-sale","format":"enhanced""#))
        #expect(lines[1].hasPrefix(#"{"seq":1,"shard":"#))
        #expect(lines[21].hasPrefix(#"{"trailer":{"records":20,"crc32":""#))
        let reader = try Self.read(lines, in: dir)
        #expect(reader.isComplete && reader.recordsRead == 20)
        // The generic path reads the same records as the fast one.
        var scratch = [UInt8](repeating: 0, count: 128)
        for line in lines[1...20] {
            let bytes = Array(line.utf8)
            let fast = try #require(bytes.withUnsafeBytes { raw in
                PlanReader.fastView(raw, token: &scratch).map { v in
                    PlanRecord(seq: v.seq, shard: v.shard, token: Array(scratch[0..<v.tokenCount]),
                               lang: String(decoding: v.lang, as: UTF8.self), payload: Array(v.payload))
                }
            })
            let generic = try bytes.withUnsafeBytes { try PlanReader.genericRecord($0, path: "p", line: 1) }
            #expect(fast == generic)
        }
    }

    @Test func aTruncatedPlanIsIncomplete() throws {
        let (dir, lines) = try Self.plan()
        let reader = try Self.read(Array(lines.prefix(11)), in: dir)
        #expect(!reader.isComplete)
        #expect(reader.recordsRead == 10)
    }

    @Test func tamperingIsDetected() throws {
        let (dir, lines) = try Self.plan()
        var forged = lines
        forged[5] = forged[5].replacingOccurrences(of: "N5", with: "N9")
        #expect { try Self.read(forged, in: dir) } throws: {
            guard let e = $0 as? PlanError, case .checksumMismatch = e.reason else { return false }
            return e.line == 22
        }
        var reordered = lines
        reordered.swapAt(3, 4)
        #expect { try Self.read(reordered, in: dir) } throws: {
            ($0 as? PlanError)?.reason == .outOfOrder(expected: 3, found: 4)
        }
        var counted = lines
        counted.remove(at: 20)
        #expect { try Self.read(counted, in: dir) } throws: {
            ($0 as? PlanError)?.reason == .countMismatch(trailer: 20, read: 19)
        }
        var future = lines
        future[0] = future[0].replacingOccurrences(of: #""version":1"#, with: #""version":2"#)
        #expect { try Self.read(future, in: dir) } throws: {
            ($0 as? PlanError)?.description.hasSuffix("line 1: plan format version 2 is not supported (this campaign reads version 1).") == true
        }
        #expect { try Self.read(lines + [lines[1]], in: dir) } throws: { ($0 as? PlanError)?.reason == .afterTrailer }
    }
}

@Suite struct TokenSetTests {
    @Test func holdsManyTokensCompactly() {
        var set = TokenSet()
        var rng = SystemRandomNumberGenerator()
        var tokens: [[UInt8]] = []
        for _ in 0..<200_000 {
            let t = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
            tokens.append(t)
            set.insert(t)
        }
        #expect(set.count == 200_000)
        #expect(tokens.allSatisfy { set.contains($0) })
        var other = tokens[0]
        other[31] ^= 1
        #expect(!set.contains(other))
        let perToken = Double(set.allocatedBytes) / 200_000
        #expect(perToken < 64, "\(perToken) bytes per token")
    }

    @Test func sequentialAndMixedWidthTokens() {
        var set = TokenSet(values: true)
        for i in 0..<50_000 {
            var t = [UInt8](repeating: 0, count: 32)
            t[28] = UInt8(i >> 24 & 0xFF); t[29] = UInt8(i >> 16 & 0xFF); t[30] = UInt8(i >> 8 & 0xFF); t[31] = UInt8(i & 0xFF)
            set.insert(t, value: UInt32(i))
        }
        set.insert([1, 2, 3], value: 7)
        #expect(set.count == 50_001)
        #expect(set.value(for: [1, 2, 3]) == 7)
        var probe = [UInt8](repeating: 0, count: 32)
        probe[31] = 200
        #expect(set.value(for: probe) == 200)
        #expect(set.value(for: [1, 2]) == nil)
    }

    /// The slots live in a mapping shared by copies until one changes: a copy
    /// keeps its own tokens and values, before and after growth, and through
    /// a table big enough to ask for huge pages.
    @Test func aCopyIsIndependentOfTheOriginal() {
        var original = TokenSet(values: true, expectedCount: 200_000)
        // Distinct by their first 8 bytes (the index), the rest varied.
        func token(_ i: Int) -> [UInt8] { (0..<32).map { $0 < 8 ? UInt8(truncatingIfNeeded: i >> ($0 * 8)) : UInt8(truncatingIfNeeded: i &* 31 &+ $0) } }
        for i in 0..<1000 { original.insert(token(i), value: UInt32(i)) }
        var copy = original
        copy.insert(token(1000), value: 1000)
        copy.insert(token(5), value: 55)
        #expect(original.count == 1000 && copy.count == 1001)
        #expect(!original.contains(token(1000)) && copy.contains(token(1000)))
        #expect(original.value(for: token(5)) == 5 && copy.value(for: token(5)) == 55)
        // Growth in the copy (the first table is sized for 200,000) leaves the original alone.
        var small = TokenSet(values: true)
        for i in 0..<2000 { small.insert(token(i), value: UInt32(i)) }
        let before = small
        for i in 2000..<20_000 { small.insert(token(i), value: UInt32(i)) }
        #expect(before.count == 2000 && small.count == 20_000)
        #expect((0..<2000).allSatisfy { before.value(for: token($0)) == UInt32($0) && small.value(for: token($0)) == UInt32($0) })
        #expect(!before.contains(token(2000)))
        #expect(original.allocatedBytes >= 4 << 20)
    }
}

@Suite struct TimestampTests {
    @Test(arguments: [
        ("1700000000", Int64(1_700_000_000)), ("1700000000.75", 1_700_000_000),
        ("2023-11-14T22:13:20Z", 1_700_000_000), ("2023-11-15T00:13:20+02:00", 1_700_000_000),
        ("2023-11-14 22:13:20", 1_700_000_000), ("2023-11-14T22:13:20.5Z", 1_700_000_000),
        ("1970-01-01", 0), ("2000-03-01", 951_868_800),
        ("1700000000000", 1_700_000_000), ("1700000000750", 1_700_000_000),   // milliseconds (13 digits)
        ("1700000000000.5", 1_700_000_000), ("99999999999", 99_999_999_999),  // 10^11 and below: seconds
    ])
    func parses(text: String, expected: Int64) {
        #expect(Timestamp.parse(text) == expected)
    }

    @Test(arguments: ["yesterday", "2023-13-01", "2023-11-14T25:00:00Z", "2023-11-14T22:13:20 UTC", "",
                      "99999999999999999999999999.5"])
    func refuses(text: String) {
        #expect(Timestamp.parse(text) == nil)
    }
}

@Suite struct RemainingRejectTests {
    @Test func noMessageAndCannotFit() throws {
        let job = """
        {"campaign":"x","messages":{"en":{"alert":"Hi {name}","sound":"{sound}"}}}
        """
        let rows = [
            "token,lang,name,sound",
            "\(tokenHex(1)),de,Hans,default",                                   // 2: no message, no fallback
            "\(tokenHex(2)),en,Ann,\(String(repeating: "s", count: 300))",     // 3: cannot fit
            "\(tokenHex(3)),en,Bo,default",                                     // 4: planned
        ]
        let run = try PlanRun(job: job, audience: (rows + [
            "\(tokenHex(3)),de,Bo,default",                                     // 5: duplicate first, though it has no message either
            "\(tokenHex(3)),en,Bo,\(String(repeating: "s", count: 300))",      // 6: duplicate first, though it cannot fit either
        ]).joined(separator: "\n"))
        #expect(run.reject(line: 5).code == "duplicate_token")
        #expect(run.reject(line: 6).code == "duplicate_token")
        #expect(run.reject(line: 2).code == "no_message")
        #expect(run.reject(line: 2).reason == "no message for language \"de\" and none in the fallback chain")
        #expect(run.reject(line: 3).code == "cannot_fit")
        #expect(run.reject(line: 3).reason == "cannot fit: the payload needs 331 bytes even with an empty alert, over the 256-byte limit")
        #expect(run.records.count == 1)
    }

    @Test func gzipAudienceThroughThePlanner() throws {
        let dir = TemporaryDirectory()
        let text = "token,lang,first_name,discount,badge\n\(tokenHex(1)),es,Ana,10,1\n"
        try Data(GzipCompressor().compress(Array(text.utf8), finish: true)).write(to: URL(fileURLWithPath: dir.file("a.csv.gz")))
        let job = try CampaignJob(json: JSONValue.parse(springJob), path: "job.json")
        let summary = try Planner(job: job, options: PlanOptions(now: 1))
            .run(reader: AudienceFile.open(dir.file("a.csv.gz")), plan: PlanWriter(path: dir.file("plan")), rejects: nil)
        #expect(summary.planned == 1 && summary.perLanguage == ["es": 1])
    }
}

/// The planner prepares rows on one thread and de-duplicates them on another,
/// in batches; the outcome must be what one row after another would give.
@Suite struct PlannerStageTests {
    func uniqueToken(_ n: Int) -> String { String(repeating: "ab", count: 24) + String(format: "%016x", n) }

    @Test func checksKeepTheirOrderAcrossBatches() throws {
        var store = FeedbackStore()
        var suppressedTokens = Set<String>()
        for n in stride(from: 130, to: 6_000, by: 13) {
            store.record(token: DeviceToken(hex: uniqueToken(n))!.bytes, timestamp: 1_690_000_000)
            suppressedTokens.insert(uniqueToken(n))
        }
        // Row i (line i + 2) has token i, except: every 7th repeats the token of
        // a row 1,500 earlier (another batch), and every 11th has no discount
        // (missing variable); every 13th token is suppressed by feedback.
        var rows = ["token,lang,first_name,discount,badge,registered_at"]
        var expected: [(line: Int, code: String)] = []
        var planned: [String] = []
        var seen = Set<String>()
        for i in 0..<5_000 {
            let token = i % 7 == 0 && i >= 1_500 ? uniqueToken(i - 1_500) : uniqueToken(i)
            let missing = i % 11 == 0
            rows.append("\(token),\(i % 3 == 0 ? "es" : "en"),N\(i),\(missing ? "" : "5"),1,")
            let line = i + 2
            if seen.contains(token) { expected.append((line, "duplicate_token")) }
            else if suppressedTokens.contains(token) { expected.append((line, "suppressed_by_feedback")) }
            else if missing { expected.append((line, "missing_variable")) }
            else { seen.insert(token); planned.append(token) }
        }
        let run = try PlanRun(audience: rows.joined(separator: "\n") + "\n", store: store)
        #expect(run.summary.rowsRead == 5_000)
        #expect(run.records.map { DeviceToken(bytes: $0.token).hex } == planned)
        #expect(run.records.map(\.seq) == Array(1...UInt64(planned.count)))
        let got = run.rejects.map { (line: Int($0["line"]!.integerValue!), code: $0["code"]!.stringValue!) }
        #expect(got.count == expected.count)
        let firstDifference = zip(got, expected).first { $0.line != $1.line || $0.code != $1.code }
        #expect(firstDifference == nil, "first difference (got, expected): \(String(describing: firstDifference))")
        // Each kind is there, and some of each cross a batch.
        let codes = Set(expected.map(\.code))
        #expect(codes == ["duplicate_token", "suppressed_by_feedback", "missing_variable"])
        #expect(run.reader.isComplete)
    }
}

@Suite struct SeqTextTests {
    @Test func countsLikeDecimalNumbers() {
        let text = SeqText()
        for n in 1...12_345 {
            text.increment()
            let line = ByteArena(capacity: 16)
            text.appendLineStart(to: line)
            if n < 130 || n % 997 == 0 || [999, 1_000, 9_999, 10_000].contains(n) {
                #expect(String(decoding: line.all, as: UTF8.self) == #"{"seq":\#(n)"#)
            }
        }
        let line = ByteArena(capacity: 16)
        text.appendLineStart(to: line)
        #expect(String(decoding: line.all, as: UTF8.self) == #"{"seq":12345"#)
    }
}

@Suite struct DeduplicationSizingTests {
    /// Sized once from the estimate, the table must not grow when the
    /// estimate is a little low (growing holds two tables at once).
    @Test func aSlightlyLowEstimateDoesNotGrowTheTable() throws {
        let dir = TemporaryDirectory("sizing")
        let rows = 20_000
        var text = "token,lang,first_name,discount,badge\n"
        for i in 0..<rows { text += String(format: "%064x", i + 1) + ",en,N,5,1\n" }
        try Data(text.utf8).write(to: URL(fileURLWithPath: dir.file("a.csv")))
        var options = PlanOptions(now: 1)
        options.expectedRows = rows * 97 / 100
        let planner = try Planner(job: CampaignJob(json: JSONValue.parse(springJob), path: "job.json"), options: options)
        let summary = try planner.run(reader: AudienceFile.open(dir.file("a.csv")), plan: PlanWriter(path: dir.file("plan")), rejects: nil)
        #expect(summary.planned == rows)
        #expect(planner.seen.count == rows)
        // Sized once: under 1.5 slots of 33 bytes a token. A table that grew
        // near the end has about 1.8 (and held the old one beside it).
        #expect(planner.seen.allocatedBytes <= rows * 3 / 2 * 33, "\(planner.seen.allocatedBytes) bytes")
    }
}

extension PlannerStageTests {
    /// The reading stage passes schema changes with each batch: a key first
    /// seen in the middle of a batch is a column from that row on. A read
    /// error ends the run after every row read before it was planned.
    @Test func lateKeysAndReadErrorsKeepTheirPlaceAcrossBatches() throws {
        let dir = TemporaryDirectory("late")
        var text = ""
        for i in 0..<3_000 {
            let token = String(repeating: "cd", count: 24) + String(format: "%016x", i)
            text += "{\"token\":\"\(token)\",\"lang\":\"en\",\"discount\":5,\"badge\":1\(i >= 1_500 ? ",\"first_name\":\"N\(i)\"" : "")}\n"
        }
        let gz = GzipCompressor().compress(Array(text.utf8), finish: true)
        try Data(gz).write(to: URL(fileURLWithPath: dir.file("whole.ndjson.gz")))
        try Data(gz.prefix(gz.count - 12)).write(to: URL(fileURLWithPath: dir.file("cut.ndjson.gz")))
        let job = try CampaignJob(json: JSONValue.parse(springJob), path: "job.json")

        let rejects = try RejectsWriter(path: dir.file("rejects.ndjson"))
        let summary = try Planner(job: job, options: PlanOptions(now: 1))
            .run(reader: AudienceFile.open(dir.file("whole.ndjson.gz")), plan: PlanWriter(path: dir.file("whole.plan")), rejects: rejects)
        #expect(summary.rowsRead == 3_000)
        #expect(summary.planned == 1_500)
        #expect(summary.rejected == [.missingVariable: 1_500])
        let reader = try PlanReader(path: dir.file("whole.plan"))
        var first: PlanRecord? = nil
        while let r = try reader.next() { if first == nil { first = r } }
        #expect(try JSONValue.parse(first!.payload)["aps"]?["alert"]?.stringValue == "Hi N1500, 5% off until Sunday")

        // Cut short: an error, after the rows before the cut were planned
        // (written in place, as to a pipe; a plan file goes only once complete).
        let planner = try Planner(job: job, options: PlanOptions(now: 1))
        #expect(throws: (any Error).self) {
            try planner.run(reader: AudienceFile.open(dir.file("cut.ndjson.gz")), plan: PlanWriter(path: dir.file("cut.plan"), inPlace: true), rejects: nil)
        }
        let cut = try PlanReader(path: dir.file("cut.plan"))
        var records = 0
        while try cut.next() != nil { records += 1 }
        #expect(records > 1_000 && records <= 1_500)
        #expect(!cut.isComplete)
    }
}
