import Foundation
import Testing
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignTestSupport
import FeedbackStore
@testable import CampaignPlan
@testable import PlanStream

/// `plan --parts`: the records of one planning run split by shard into plans
/// that are each complete, and together exactly the one plan.
@Suite(.ownThreads) struct PlanPartsTests {
    /// The `i`th of distinct 32-byte tokens.
    static func token(_ i: Int) -> String {
        var rng = SplitMix64(seed: UInt64(i) &+ 1)
        return (0..<4).map { _ in String(format: "%016llx", rng.next()) }.joined()
    }

    /// Plans `rows` random-ish rows (with a few bad and duplicate ones) into
    /// `parts` plans; returns each part's records and the whole plan's.
    static func plan(rows: Int, parts: Int, shards: Int = 16, hash: String = "0123456789abcdef")
        throws -> (dir: TemporaryDirectory, parts: [[PlanRecord]], whole: [PlanRecord], summary: PlanSummary) {
        let dir = TemporaryDirectory("parts")
        var csv = "token,lang,first_name,discount,badge\n"
        for i in 0..<rows { csv += "\(Self.token(i)),\(i % 3 == 0 ? "es" : "en"),Ann \(i),\(i % 50),\(i % 9)\n" }
        csv += "nothex,en,Bad,1,1\n\(Self.token(5)),en,Dup,1,1\n"
        try csv.write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        let job = try CampaignJob(json: JSONValue.parse(springJob), path: "job.json")
        var options = PlanOptions(now: 1_700_000_000)
        options.shards = shards
        let whole = try Planner(job: job, options: options)
        _ = try whole.run(reader: AudienceFile.open(dir.file("a.csv")), plan: PlanWriter(path: dir.file("whole.plan")), rejects: nil)
        options.parts = parts
        options.campaignHash = hash
        let parted = try Planner(job: job, options: options)
        let writers = try (0..<parts).map { try PlanWriter(path: dir.file(PlanPart.fileName(index: $0, count: parts))) }
        let summary = try parted.run(reader: AudienceFile.open(dir.file("a.csv")), plans: writers, rejects: nil)
        func read(_ path: String) throws -> [PlanRecord] {
            let reader = try PlanReader(path: path)
            var out: [PlanRecord] = []
            while let r = try reader.next() { out.append(r) }
            #expect(reader.trailer?.records == out.count)
            return out
        }
        return (dir, try (0..<parts).map { try read(dir.file(PlanPart.fileName(index: $0, count: parts))) },
                try read(dir.file("whole.plan")), summary)
    }

    @Test func thePartsHoldExactlyTheWholePlansRecordsEachByItsShard() throws {
        let run = try Self.plan(rows: 3_000, parts: 5)
        let whole = run.whole.map { "\($0.token) \($0.payload)" }
        let split = run.parts.flatMap { $0 }.map { "\($0.token) \($0.payload)" }
        #expect(split.count == whole.count)
        #expect(Set(split) == Set(whole))
        #expect(run.summary.planned == whole.count)
        #expect(run.summary.rejectedTotal == 2)
        for (k, records) in run.parts.enumerated() {
            #expect(!records.isEmpty)
            #expect(records.allSatisfy { $0.shard % 5 == k }, "part \(k) holds a record of another part's shard")
            #expect(records.map(\.seq) == (1...UInt64(records.count)).map { $0 }, "part \(k) is numbered 1…n")
            let header = try PlanReader(path: run.dir.file(PlanPart.fileName(index: k, count: 5))).header
            #expect(header.part == PlanPart(index: k, count: 5, campaignHash: "0123456789abcdef"))
            #expect(try PlanReader.checkComplete(path: run.dir.file(PlanPart.fileName(index: k, count: 5))) == records.count)
        }
    }

    @Test func aDeviceAlwaysLandsInTheSamePart() throws {
        let first = try Self.plan(rows: 500, parts: 4)
        let second = try Self.plan(rows: 900, parts: 4, hash: "fedcba9876543210")
        var partOf: [[UInt8]: Int] = [:]
        for (k, records) in first.parts.enumerated() { for r in records { partOf[r.token] = k } }
        var compared = 0
        for (k, records) in second.parts.enumerated() {
            for r in records { if let p = partOf[r.token] { #expect(p == k); compared += 1 } }
        }
        #expect(compared == 500)
    }

    @Test func aPartHeaderRoundTripsAndAPlainHeaderStaysAsItWas() throws {
        let plain = PlanHeader(campaign: "c", wire: .binary(.enhanced), expiry: 0, priority: nil, maxPayload: 256, shards: 8, created: 1)
        #expect(String(decoding: plain.json.serialized(), as: UTF8.self) ==
                #"{"header":{"version":1,"campaign":"c","format":"enhanced","expiry":0,"priority":null,"maxPayload":256,"shards":8,"created":1}}"#)
        let part = plain.forPart(3, of: 4, campaignHash: "abc")
        #expect(try PlanHeader(json: part.json) == part)
        #expect(try PlanHeader(json: plain.json).part == nil)
    }

    @Test(arguments: [
        #"{"header":{"version":1,"campaign":"c","format":"enhanced","expiry":0,"priority":null,"maxPayload":256,"shards":8,"created":1,"part":1}}"#,
        #"{"header":{"version":1,"campaign":"c","format":"enhanced","expiry":0,"priority":null,"maxPayload":256,"shards":8,"created":1,"part":4,"parts":4,"campaignHash":"x"}}"#,
        #"{"header":{"version":1,"campaign":"c","format":"enhanced","expiry":0,"priority":null,"maxPayload":256,"shards":8,"created":1,"part":0,"parts":9,"campaignHash":"x"}}"#,
        #"{"header":{"version":1,"campaign":"c","format":"enhanced","expiry":0,"priority":null,"maxPayload":256,"shards":8,"created":1,"part":0,"parts":2,"campaignHash":""}}"#,
    ])
    func aPartHeaderWithoutItsFieldsOrOutOfRangeIsRefused(text: String) throws {
        #expect(throws: PlanError.Reason.self) { try PlanHeader(json: JSONValue.parse(text)) }
    }

    @Test func aRecordOfAnotherPartsShardIsRefusedWithItsLine() throws {
        let dir = TemporaryDirectory("wrongpart")
        let header = PlanHeader(campaign: "c", wire: .binary(.enhanced), expiry: 0, priority: nil, maxPayload: 256, shards: 8, created: 1)
            .forPart(1, of: 2, campaignHash: "h")
        let text = String(decoding: header.json.serialized(), as: UTF8.self) + "\n"
            + #"{"seq":1,"shard":3,"token":"\#(tokenHex(1))","lang":"en","payload":{"aps":{}}}"# + "\n"
            + #"{"seq":2,"shard":4,"token":"\#(tokenHex(2))","lang":"en","payload":{"aps":{}}}"# + "\n"
        try text.write(toFile: dir.file("p.plan"), atomically: true, encoding: .utf8)
        let reader = try PlanReader(path: dir.file("p.plan"))
        #expect(try reader.next()?.shard == 3)
        let error = try #require(throws: PlanError.self) { try reader.next() }
        #expect(error.line == 3)
        #expect(error.description.contains("shard 4 does not belong to part 1 of 2"))
    }

    @Test func moreCannotBeMadeOfFewerShards() throws {
        let job = try CampaignJob(json: JSONValue.parse(springJob), path: "job.json")
        var options = PlanOptions(now: 1)
        options.shards = 4
        options.parts = 5
        #expect { try Planner(job: job, options: options) } throws: { ($0 as? JobError)?.reason == .partsOutOfRange(parts: 5, shards: 4) }
    }

    @Test func partFileNamesSortInOrder() {
        #expect(PlanPart.fileName(index: 7, count: 8) == "part-007.plan")
        #expect(PlanPart.fileName(index: 42, count: 1_500) == "part-0042.plan")
        let names = (0..<1_500).map { PlanPart.fileName(index: $0, count: 1_500) }
        #expect(names == names.sorted())
    }

    @Test func aManifestRoundTripsAndABadOneNamesItsFile() throws {
        let dir = TemporaryDirectory("manifest")
        let m = PlanManifest(campaign: "c", campaignHash: "h", format: "enhanced", shards: 8, created: 5, rowsRead: 10, rejected: 1,
                             parts: [.init(part: 0, file: "part-000.plan", records: 4, crc32: "aa"),
                                     .init(part: 1, file: "part-001.plan", records: 5, crc32: "bb")])
        try Data(m.json.serialized()).write(to: URL(fileURLWithPath: dir.file("manifest.json")))
        #expect(try PlanManifest.load(path: dir.file("manifest.json")) == m)
        #expect(m.records == 9)
        try #"{"version":1,"campaign":"c"}"#.write(toFile: dir.file("bad.json"), atomically: true, encoding: .utf8)
        let error = #expect(throws: IOError.self) { try PlanManifest.load(path: dir.file("bad.json")) }
        #expect(error?.description.contains("bad.json") == true)
        #expect(PlanManifest.campaignHash(of: [[1], [2]]) != PlanManifest.campaignHash(of: [[1, 2]]))
        #expect(PlanManifest.campaignHash(of: [[1], [2]]).count == 16)
    }
}

/// The parts of one plan, sent at once, share one suppression store.
@Suite(.ownThreads) struct SharedFeedbackStoreTests {
    @Test func concurrentUpdatesOfOneStoreLoseNoEntry() throws {
        let dir = TemporaryDirectory("sharedstore")
        let path = dir.file("store.ndjson")
        let writers = 8, rounds = 25
        let failures = Lock()
        nonisolated(unsafe) var errors: [String] = []
        // Threads, each with its own lock descriptor: flock excludes them as it does processes.
        let threads = (0..<writers).map { w in
            startThread {
                for r in 0..<rounds {
                    do {
                        try FeedbackStore.update(path: path) { store in
                            store.record(token: [UInt8(w), UInt8(r)] + [UInt8](repeating: 7, count: 30), timestamp: UInt32(1000 + r))
                        }
                    } catch {
                        failures.lock(); errors.append("\(error)"); failures.unlock()
                    }
                }
            }
        }
        for t in threads { pthread_join(t, nil) }
        #expect(errors.isEmpty, "\(errors.count) updates failed, the first: \(errors.first ?? "")")
        #expect(try FeedbackStore.load(path: path).count == writers * rounds)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)
    }
}

/// h2 jobs whose collapseId is a template: rendered per row, carried by each record.
@Suite struct CollapseIdTemplateTests {
    static let job = #"{"campaign":"c","format":"h2","topic":"com.a","collapseId":"sale-{group}","fallback":["en"],"messages":{"en":{"alert":"Hi {name}"}}}"#

    @Test func eachRecordCarriesItsRenderedCollapseIdAndBadOnesAreRejected() throws {
        let dir = TemporaryDirectory("collapse")
        var csv = "token,name,group\n"
        csv += "\(PlanPartsTests.token(1)),Ann,north\n"                                   // line 2: sale-north
        csv += "\(PlanPartsTests.token(2)),Bob,\n"                                        // line 3: no group
        csv += "\(PlanPartsTests.token(3)),Cy,\(String(repeating: "g", count: 60))\n"     // line 4: 65 bytes
        csv += "\(PlanPartsTests.token(4)),Di,\"q\"\"uote\"\n"                            // line 5: an escape in JSON
        try csv.write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        let planner = try Planner(job: CampaignJob(json: JSONValue.parse(Self.job), path: "job"), options: PlanOptions(now: 1))
        let rejects = try RejectsWriter(path: dir.file("rejects.ndjson"))
        let summary = try planner.run(reader: AudienceFile.open(dir.file("a.csv")), plan: PlanWriter(path: dir.file("p.plan")), rejects: rejects)
        #expect(summary.planned == 2)
        #expect(summary.rejected[.missingVariable] == 1 && summary.rejected[.invalidCollapseId] == 1)
        let reader = try PlanReader(path: dir.file("p.plan"))
        #expect(reader.header.http2?.collapseIdTemplate == "sale-{group}" && reader.header.http2?.collapseId == nil)
        var ids: [String] = []
        while let r = try reader.next() { ids.append(try #require(r.collapseId)) }
        #expect(ids == ["sale-north", #"sale-q"uote"#])
        // The in-place reader sees the same, the escaped one decoded by the general path.
        let view = try PlanReader(path: dir.file("p.plan"))
        var viewed: [String] = []
        while try view.nextView({ viewed.append(String(decoding: $0.collapseId ?? UnsafeRawBufferPointer(start: nil, count: 0), as: UTF8.self)) }) {}
        #expect(viewed == ids)
        let text = try String(contentsOfFile: dir.file("rejects.ndjson"), encoding: .utf8)
        #expect(text.contains("missing variable {group} (used by collapseId)"))
        #expect(text.contains("invalid collapse id: 65 bytes after rendering, where APNs takes 1 to 64"))
    }

    @Test func aLiteralCollapseIdStaysInTheHeader() throws {
        let job = try CampaignJob(json: JSONValue.parse(#"{"campaign":"c","format":"h2","collapseId":"one","messages":{"en":{"alert":"a"}}}"#), path: "j")
        let planner = try Planner(job: job, options: PlanOptions(now: 1))
        #expect(planner.header.http2?.collapseId == "one" && planner.header.http2?.collapseIdTemplate == nil)
    }
}

extension SharedFeedbackStoreTests {
    @Test(.timeLimit(.minutes(5))) func aStoreLockedForLongIsReportedNotWaitedForForEver() throws {
        let dir = TemporaryDirectory("lockedstore")
        let path = dir.file("store.ndjson")
        // Another process's lock: a child holds it while this one tries.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = [path + ".lock", "sleep", "4"]   // it lets go by itself
        try holder.run()
        defer { holder.waitUntilExit() }
        // Held once the child has it: a non-blocking attempt fails.
        let probe = open(path + ".lock", O_RDWR | O_CREAT, 0o600)
        defer { close(probe) }
        let deadline = Date().addingTimeInterval(10)
        while flock(probe, LOCK_EX | LOCK_NB) == 0 {
            flock(probe, LOCK_UN)
            #expect(Date() < deadline)
            if Date() >= deadline { return }
            usleep(10_000)
        }
        let started = Date()
        let error = #expect(throws: IOError.self) { try FeedbackStore.update(path: path, lockWaitSeconds: 0.5) { _ in } }
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(error?.description.contains("is locked by another process") == true)
    }
}
