import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignTestSupport
import GatewaySimulator
import PlanStream

/// `campaign results` over the whole loop: an A/B job with a 10 % holdout
/// planned and sent to the simulator, events made with known conversion
/// rates per group (and events that must not count, and lines that cannot
/// be read), then every count checked exactly against the design and every
/// statistic against scipy and statsmodels (scripts/results_stats_peer.py).
@Suite(.ownThreads) struct ResultsTests {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let rates = ["A": 0.12, "B": 0.09, "control": 0.08]
    static let weights = ["A": 45, "B": 45, "control": 10]

    /// Who is in which group: the plans' records and the holdout file, read here as any reader of the formats would.
    static func membership(plans: [String], holdout: String) throws -> [String: String] {
        var group: [String: String] = [:]
        for path in plans {
            let reader = try PlanReader(path: path)
            while let r = try reader.next() {
                group[r.token.map { String(format: "%02x", $0) }.joined()] = try #require(r.variant)
            }
        }
        for line in try String(contentsOfFile: holdout, encoding: .utf8).split(separator: "\n") {
            let v = try JSONValue.parse(String(line))
            group[try #require(v["token"]?.stringValue)] = try #require(v["variant"]?.stringValue)
        }
        return group
    }

    /// What the events are made to give.
    struct Expected {
        var converted: [String: Int] = [:]
        var counted = 0, unknown = 0, before = 0, outside = 0, other = 0, rejected = 0, read = 0
    }

    /// Two exports of the app's events, `events.csv.gz` (RFC 3339 times) and
    /// `events.ndjson` (UNIX seconds), columns device_id, name, ts. `start`:
    /// a moment at or before every device's (the send's start); windows are
    /// 72 h and every event is an hour or more from an edge.
    static func writeEvents(in dir: TemporaryDirectory, group: [String: String], start: Int64, seed: UInt64) throws -> Expected {
        var rng = SplitMix64(seed: seed)
        func uniform() -> Double { Double(rng.next() >> 11) / Double(1 << 53) }
        var expected = Expected()
        var csv = "device_id,name,ts\n", ndjson = ""
        var n = 0
        func add(_ token: String, _ name: String, _ at: Int64) {
            n += 1
            expected.read += 1
            if n % 2 == 0 {
                let date = Date(timeIntervalSince1970: TimeInterval(at))
                let f = ISO8601DateFormatter()
                f.timeZone = TimeZone(secondsFromGMT: n % 4 == 0 ? 3600 : 0)
                csv += "\(n % 3 == 0 ? token.uppercased() : token),\(name),\(f.string(from: date))\n"
            } else {
                ndjson += #"{"device_id":"\#(token)","name":"\#(name)","ts":\#(at)}"# + "\n"
            }
        }
        for (token, g) in group.sorted(by: { $0.key < $1.key }) {
            if uniform() < rates[g]! {
                expected.converted[g, default: 0] += 1
                let count = 1 + Int(rng.next() % 2)   // a device converts once, however many it has
                for k in 0..<count { add(token, "purchase", start + 3600 + Int64(k * 60) + Int64(rng.next() % 3600)); expected.counted += 1 }
            }
            let u = uniform()
            if u < 0.05 { add(token, "open", start + 7200); expected.other += 1 }
            else if u < 0.08 { add(token, "purchase", start - 7200); expected.before += 1 }
            else if u < 0.11 { add(token, "purchase", start + 80 * 3600); expected.outside += 1 }
        }
        for _ in 0..<200 {
            add((0..<4).map { _ in String(format: "%016llx", rng.next()) }.joined(), "purchase", start + 3600)
            expected.unknown += 1
        }
        // Lines that cannot be read: listed, counted, and they stop nothing.
        for i in 0..<7 { csv += "\(String(repeating: "ab", count: 32)),purchase,yesterday \(i)\n"; expected.rejected += 1; expected.read += 1 }
        for _ in 0..<5 { ndjson += #"{"device_id":"zz-not-hex","name":"purchase","ts":1}"# + "\n"; expected.rejected += 1; expected.read += 1 }
        try csv.write(toFile: dir.file("events.csv"), atomically: true, encoding: .utf8)
        try ndjson.write(toFile: dir.file("events.ndjson"), atomically: true, encoding: .utf8)
        let gz = try runTool("gzip", ["-f", dir.file("events.csv")])
        #expect(gz.status == 0, "\(gz.out)")
        return expected
    }

    /// `campaign results … --json`, parsed.
    static func results(_ arguments: [String], in dir: TemporaryDirectory) throws -> JSONValue {
        let run = try PlanProcessTests.run(["results", "--events", "events.csv.gz", "--events", "events.ndjson", "--event", "purchase",
                                            "--columns", "token=device_id,event=name,time=ts", "--json"] + arguments, in: dir)
        #expect(run.status == 0, "\(run.err)")
        #expect(run.err.contains("12 unreadable event lines listed in results.rejects.ndjson"), "\(run.err)")
        return try JSONValue.parse(Array(run.out))
    }

    /// Every count exactly; every statistic within 1e-9 of scipy's and statsmodels'.
    static func check(_ json: JSONValue, group: [String: String], expected: Expected, in dir: TemporaryDirectory) throws {
        let groups = try #require(json["groups"])
        for name in ["A", "B", "control"] {
            let g = try #require(groups[name], "\(json)")
            let members = group.values.filter { $0 == name }.count
            #expect(g["population"]?.integerValue == Int64(members), "\(name): every device accepted or held out")
            #expect(g["planned"]?.integerValue == Int64(members))
            #expect(g["converted"]?.integerValue == Int64(expected.converted[name, default: 0]), "\(name)")
        }
        #expect(json["control"]?.stringValue == "control")
        #expect(json["events_read"]?.integerValue == Int64(expected.read))
        #expect(json["events_counted"]?.integerValue == Int64(expected.counted))
        #expect(json["events_unknown_device"]?.integerValue == Int64(expected.unknown))
        #expect(json["events_before_moment"]?.integerValue == Int64(expected.before))
        #expect(json["events_outside_window"]?.integerValue == Int64(expected.outside))
        #expect(json["events_other_event"]?.integerValue == Int64(expected.other))
        #expect(json["events_rejected"]?.integerValue == Int64(expected.rejected))
        #expect(json["events_not_reached"]?.integerValue == 0)
        #expect(json["window_seconds"]?.integerValue == Int64(259_200))
        let rejects = try String(contentsOfFile: dir.file("results.rejects.ndjson"), encoding: .utf8).split(separator: "\n")
        #expect(rejects.count == expected.rejected)
        #expect(rejects.allSatisfy { (try? JSONValue.parse(String($0)))?["line"]?.integerValue != nil })

        // The peer: the same counts through scipy and statsmodels.
        let input = JSONValue.object([
            ("confidence", .number("0.95")), ("control", .string("control")),
            ("weights", .object(weights.sorted { $0.key < $1.key }.map { ($0.key, .number(String($0.value))) })),
            ("groups", .array(["A", "B", "control"].map { name in
                let g = groups[name]!
                return .object([("name", .string(name)), ("population", g["population"]!), ("converted", g["converted"]!), ("planned", g["planned"]!)])
            })),
        ])
        try Data(input.serialized()).write(to: URL(fileURLWithPath: dir.file("peer-in.json")))
        let peer = try runTool("sh", ["-c", "python3 \"$0\" < \"$1\"", repo + "/scripts/results_stats_peer.py", dir.file("peer-in.json")])
        #expect(peer.status == 0, "\(peer.out)")
        let truth = try JSONValue.parse(Array(peer.out.utf8))
        func close(_ a: JSONValue?, _ b: JSONValue?, _ what: String) {
            switch (a, b) {
            case (.array(let x)?, .array(let y)?):
                #expect(x.count == y.count, "\(what)")
                for (u, v) in zip(x, y) { close(u, v, what) }
            case (let x?, let y?) where x.doubleValue != nil && y.doubleValue != nil:
                let (u, v) = (x.doubleValue!, y.doubleValue!)
                #expect(abs(u - v) <= 1e-9 * max(abs(v), 1e-300), "\(what): \(u) against the peer's \(v)")
            default:
                #expect((a ?? .null) == .null && (b ?? .null) == .null, "\(what): \(String(describing: a)) against the peer's \(String(describing: b))")
            }
        }
        guard case .array(let peerGroups)? = truth["groups"] else { Issue.record("the peer said \(peer.out)"); return }
        for p in peerGroups {
            let name = try #require(p["name"]?.stringValue)
            for key in ["rate", "rate_ci", "diff", "diff_ci", "lift", "p_value"] where name != "control" || key.hasPrefix("rate") {
                close(groups[name]?[key], p[key], "\(name).\(key)")
            }
        }
        for key in ["chi2", "chi2_p_value", "srm_chi2", "srm_p_value"] { close(json[key], truth[key], key) }
        #expect(json["chi2_df"]?.integerValue == truth["chi2_df"]?.integerValue)
        // The design's A converts at 12 % against 8 %: with thousands a group, that shows.
        #expect((groups["A"]?["p_value"]?.doubleValue ?? 1) < 0.001)
    }

    @Test(.timeLimit(.minutes(3))) func theWholeLoopAgreesWithScipyAndStatsmodels() throws {
        let dir = TemporaryDirectory("results")
        let (csv, _) = randomAudienceCSV(count: 20_000, seed: 43)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try VariantSendTests.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let plan = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson"], in: dir)
        #expect(plan.status == 0, "\(plan.err)")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let start = Int64(Date().timeIntervalSince1970) - 1
        let send = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)"]
                                       + SendProcessTests.credentials(), in: dir.path)
        #expect(send.wait(timeout: 120) == 0, "\(send.stderr)")
        let group = try Self.membership(plans: [dir.file("plan.ndjson")], holdout: dir.file("plan.ndjson.holdout.ndjson"))
        #expect(group.count == 20_000)
        let expected = try Self.writeEvents(in: dir, group: group, start: start, seed: 44)
        let json = try Self.results(["journal"], in: dir)
        try Self.check(json, group: group, expected: expected, in: dir)
        #expect(json["srm_mismatch"] == .bool(false), "the planner's split is the job's")

        // The text says the same in words, and the page draws it.
        let text = try PlanProcessTests.run(["results", "--events", "events.csv.gz", "--events", "events.ndjson", "--event", "purchase",
                                             "--columns", "token=device_id,event=name,time=ts", "journal", "--html", "results.html",
                                             "--rejects", "text.rejects.ndjson"], in: dir)
        #expect(text.status == 0, "\(text.err)")
        let said = String(decoding: text.out, as: UTF8.self)
        #expect(said.contains("A: converted more than control"), "\(said)")
        #expect(said.contains("the split is as the job asked"), "\(said)")
        let page = try String(contentsOfFile: dir.file("results.html"), encoding: .utf8)
        #expect(page.contains("<svg") && page.contains("Difference from control") && !page.contains("<script"))
    }

    /// The same over `plan --parts 3`, one part killed with kill -9 mid-send and resumed.
    @Test(.timeLimit(.minutes(4))) func partsWithOneKilledAndResumedAgreeToo() throws {
        let dir = TemporaryDirectory("results-parts")
        let (csv, _) = randomAudienceCSV(count: 20_000, seed: 45)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try VariantSendTests.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let plan = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--parts", "3", "--out", "parts"], in: dir)
        #expect(plan.status == 0, "\(plan.err)")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let start = Int64(Date().timeIntervalSince1970) - 1
        let flags = ["--gateway", "127.0.0.1:\(simulator.port)"] + SendProcessTests.credentials()
        let manifest = try PlanManifest.load(path: dir.file("parts/manifest.json"))
        for entry in manifest.parts where entry.part != 1 {
            let run = try CampaignProcess(["send", "parts/\(entry.file)", "--journal", String(format: "j/%03d", entry.part)] + flags, in: dir.path)
            #expect(run.wait(timeout: 120) == 0, "\(run.stderr)")
        }
        let before = simulator.currentStatistics().accepted
        let part1 = manifest.parts[1]
        let (kills, finished) = try killRepeatedlyThenFinish(kills: 1, of: part1.records, seed: 45, recorded: { simulator.currentStatistics().accepted - before }, next: {
            let resume = FileManager.default.fileExists(atPath: dir.file("j/001/journal.log"))
            return try CampaignProcess(resume ? ["send", "--resume", "j/001"] + SendProcessTests.credentials()
                                              : ["send", "parts/\(part1.file)", "--journal", "j/001", "--rate", "3000"] + flags, in: dir.path)
        }, kill: { $0.kill9() })
        #expect(kills == 1 && finished)
        let group = try Self.membership(plans: manifest.parts.map { dir.file("parts/\($0.file)") }, holdout: dir.file("parts/holdout.ndjson"))
        #expect(group.count == 20_000)
        let expected = try Self.writeEvents(in: dir, group: group, start: start, seed: 46)
        let json = try Self.results(["--manifest", "parts/manifest.json", "--journals", "j/*"], in: dir)
        try Self.check(json, group: group, expected: expected, in: dir)
    }

    @Test func aFileThatCannotBeReadIs66AndOneWithoutItsColumnsIs65() throws {
        let dir = TemporaryDirectory("results-bad")
        let (csv, _) = randomAudienceCSV(count: 300, seed: 47)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try VariantSendTests.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        #expect(try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson"], in: dir).status == 0)
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let send = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)"]
                                       + SendProcessTests.credentials(), in: dir.path)
        #expect(send.wait(timeout: 60) == 0, "\(send.stderr)")
        let missing = try PlanProcessTests.run(["results", "--events", "nowhere.csv", "journal"], in: dir)
        #expect(missing.status == 66, "\(missing.err)")
        #expect(missing.err.contains("nowhere.csv"), "\(missing.err)")
        try "user,what,when\nab,open,1\n".write(toFile: dir.file("odd.csv"), atomically: true, encoding: .utf8)
        let odd = try PlanProcessTests.run(["results", "--events", "odd.csv", "journal"], in: dir)
        #expect(odd.status == 65, "\(odd.err)")
        #expect(odd.err.contains("odd.csv") && odd.err.contains("--columns token=NAME"), "\(odd.err)")
        try "token,event\nab,open\n".write(toFile: dir.file("notime.csv"), atomically: true, encoding: .utf8)
        let notime = try PlanProcessTests.run(["results", "--events", "notime.csv", "journal"], in: dir)
        #expect(notime.status == 65 && notime.err.contains("no time column \"time\""), "\(notime.err)")
        // Times none of which reads, an NDJSON export without the token's key, a bad --columns.
        try "token,event,time\nab,open,2026-11-29 13:52:31\ncd,open,2026-11-29 13:52:32\n".write(toFile: dir.file("sqltime.csv"), atomically: true, encoding: .utf8)
        let sql = try PlanProcessTests.run(["results", "--events", "sqltime.csv", "journal"], in: dir)
        #expect(sql.status == 65 && sql.err.contains("none of the 2 times in \"time\""), "\(sql.err)")
        try #"{"device":"ab","event":"open","time":1}"#.write(toFile: dir.file("keys.ndjson"), atomically: true, encoding: .utf8)
        let keys = try PlanProcessTests.run(["results", "--events", "keys.ndjson", "journal"], in: dir)
        #expect(keys.status == 65 && keys.err.contains("--columns token=KEY"), "\(keys.err)")
        let columns = try PlanProcessTests.run(["results", "--events", "odd.csv", "journal", "--columns", "foo=bar"], in: dir)
        #expect(columns.status == 64, "\(columns.err)")
        let glob = try PlanProcessTests.run(["results", "--events", "odd.csv", "--manifest", "m.json", "--journals", "nope/*"], in: dir)
        #expect(glob.status == 66 && glob.err.contains("matches no journal"), "\(glob.err)")
        // A plan moved since the send: named with --plan.
        try FileManager.default.moveItem(atPath: dir.file("plan.ndjson"), toPath: dir.file("moved.ndjson"))
        try "token,event,time\nab,open,1\n".write(toFile: dir.file("ok.csv"), atomically: true, encoding: .utf8)
        let moved = try PlanProcessTests.run(["results", "--events", "ok.csv", "journal"], in: dir)
        #expect(moved.status == 66 && moved.err.contains("--plan FILE"), "\(moved.err)")
        try FileManager.default.moveItem(atPath: dir.file("plan.ndjson.holdout.ndjson"), toPath: dir.file("moved.ndjson.holdout.ndjson"))
        let found = try PlanProcessTests.run(["results", "--events", "ok.csv", "journal", "--plan", "moved.ndjson"], in: dir)
        #expect(found.status == 0, "\(found.err)")
        try FileManager.default.moveItem(atPath: dir.file("moved.ndjson"), toPath: dir.file("plan.ndjson"))
        try FileManager.default.moveItem(atPath: dir.file("moved.ndjson.holdout.ndjson"), toPath: dir.file("plan.ndjson.holdout.ndjson"))
        // The holdout file is the only list of who was held out: without it, no results.
        try FileManager.default.moveItem(atPath: dir.file("plan.ndjson.holdout.ndjson"), toPath: dir.file("elsewhere.ndjson"))
        let noHoldout = try PlanProcessTests.run(["results", "--events", "ok.csv", "journal"], in: dir)
        #expect(noHoldout.status == 66 && noHoldout.err.contains("--holdout FILE"), "\(noHoldout.err)")
        let given = try PlanProcessTests.run(["results", "--events", "ok.csv", "journal", "--holdout", "elsewhere.ndjson"], in: dir)
        #expect(given.status == 0, "\(given.err)")
    }
}
