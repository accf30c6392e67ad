import ArgumentParser
import Foundation
import Testing
import APNSWire
import CampaignJSON
import CampaignTestSupport
import GatewaySimulator
@testable import CampaignCommands
@testable import CampaignSend
@testable import SendJournal

/// The operator's small frictions (issue 16, item 6 and the status items).
@Suite(.ownThreads) struct OperatorTests {
    /// A cron job that resumes a send already complete still gets the
    /// report it reads: the whole send as the journal holds it, nothing this run.
    @Test(.timeLimit(.minutes(2))) func aResumeOfACompleteSendStillWritesItsReport() throws {
        let dir = TemporaryDirectory("complete-report")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        _ = try SendProcessTests.plan(count: 40, into: dir.file("plan.ndjson"), seed: 61)
        let first = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                         "127.0.0.1:\(simulator.port)", "--report", dir.file("first.json")] + SendProcessTests.credentials(), in: dir.path)
        #expect(first.wait(timeout: 120) == 0, "\(first.stderr)")
        let again = try CampaignProcess(["send", "--resume", dir.file("journal"), "--report", dir.file("again.json")]
                                        + SendProcessTests.credentials(), in: dir.path)
        #expect(again.wait(timeout: 120) == 0, "\(again.stderr)")
        #expect(again.stderr.contains("already complete; nothing to do"), "\(again.stderr)")
        let report = try JSONValue.parse(Array(Data(contentsOf: URL(fileURLWithPath: dir.file("again.json")))))
        #expect(report["outcome"]?.stringValue == "complete")
        #expect(report["plan_records"]?.integerValue == 40 && report["accepted"]?.integerValue == 40 && report["runs"]?.integerValue == 1, "\(report)")
        #expect(report["this_run"]?["accepted"]?.integerValue == 0 && report["this_run"]?["already_done"]?.integerValue == 40, "\(report)")
        #expect(simulator.currentStatistics().accepted == 40, "nothing sent again")
        // A resume that asks for no report leaves the send's own as its last run wrote it (its pool, round trip, seconds).
        let written = try Data(contentsOf: URL(fileURLWithPath: dir.file("first.json")))
        let quiet = try CampaignProcess(["send", "--resume", dir.file("journal")] + SendProcessTests.credentials(), in: dir.path)
        #expect(quiet.wait(timeout: 120) == 0, "\(quiet.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir.file("first.json"))) == written, "the send's report was overwritten")
    }

    /// A send shorter than its first once-a-second progress record still
    /// tells `status` the connections it had and the round trip it measured
    /// (it said 0 in the pool, at most 0, beside its reconnects).
    @Test(.timeLimit(.minutes(2))) func statusOfASendShorterThanASecondTellsItsPool() throws {
        let dir = TemporaryDirectory("short-pool")
        _ = try H2SendTests.plan(count: 30, in: dir)
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let run = try H2SendTests.send(dir, simulator, ["--connections", "2"])
        #expect(run.wait(timeout: 120) == 0, "\(run.stderr)")
        let status = try PlanProcessTests.run(["status", "journal", "--json"], in: dir)
        #expect(status.status == 0, "\(status.err)")
        let json = try JSONValue.parse(Array(status.out))
        let connections = json["reconnects"]?.integerValue ?? -1
        #expect(connections >= 1, "\(json)")
        #expect(json["pool_connections"]?.integerValue == min(2, connections) && json["pool_connections_peak"]?.integerValue == min(2, connections), "\(json)")
        #expect(json["round_trip_ms"]?.doubleValue != nil, "\(json)")
        let text = try PlanProcessTests.run(["status", "journal"], in: dir)
        #expect(!String(decoding: text.out, as: UTF8.self).contains("0 in the pool"), "\(String(decoding: text.out, as: UTF8.self))")
        #expect(String(decoding: text.out, as: UTF8.self).contains("(at most \(min(2, connections))), \(connections) opened"), "\(String(decoding: text.out, as: UTF8.self))")
        // Two sends that are no plan's parts, named together: journals, not parts.
        let other = try H2SendTests.send(dir, simulator, ["--connections", "1"], journal: "other")
        #expect(other.wait(timeout: 120) == 0, "\(other.stderr)")
        let both = String(decoding: try PlanProcessTests.run(["status", "journal", "other"], in: dir).out, as: UTF8.self)
        #expect(both.contains("journals: 2 complete,") && !both.contains("parts:"), "\(both)")
    }

    /// `validate` tells the campaign rules a job carries (variants with their
    /// shares and the holdout, a frequencyCap) and, for a broadcast naming no
    /// fallback, that the first message goes (it printed "fallback: en").
    @Test func validateTellsTheRulesAndABroadcastsImpliedMessage() throws {
        let dir = TemporaryDirectory("validate-rules")
        var ab = try String(contentsOfFile: PlanProcessTests.repo + "/jobs/spring-ab.json", encoding: .utf8)
        ab = ab.replacingOccurrences(of: #""expiresIn": 86400,"#, with: #""expiresIn": 86400, "frequencyCap": {"max": 2, "per": "24h", "scope": "marketing"},"#)
        try ab.write(toFile: dir.file("ab.json"), atomically: true, encoding: .utf8)
        let rules = try PlanProcessTests.run(["validate", "ab.json"], in: dir)
        let text = String(decoding: rules.out, as: UTF8.self)
        #expect(rules.status == 0, "\(rules.err)")
        #expect(text.contains("  variants: A 45/100, B 45/100, control 10/100 (holdout: planned into PLAN.holdout.ndjson, never sent)"), "\(text)")
        #expect(text.contains("  frequencyCap: at most 2 notifications of scope \"marketing\" per device per "), "\(text)")
        let broadcast = try String(contentsOfFile: PlanProcessTests.repo + "/jobs/match-night.json", encoding: .utf8)
            .replacingOccurrences(of: #""fallback": ["en"],"#, with: "")
        try broadcast.write(toFile: dir.file("bc.json"), atomically: true, encoding: .utf8)
        let implied = try PlanProcessTests.run(["validate", "bc.json"], in: dir)
        let words = String(decoding: implied.out, as: UTF8.self)
        #expect(implied.status == 0, "\(implied.err)")
        #expect(words.contains("fallback: none given: a channel whose row has no lang, or one without a message, gets the first message"), "\(words)")
        #expect(!words.contains("variants:") && !words.contains("frequencyCap:"))
    }

    @Test func certsRefusesToReplaceACAWithoutForce() throws {
        let dir = TemporaryDirectory()
        let first = try PlanProcessTests.run(["certs", dir.file("c")], in: dir)
        #expect(first.status == 0)
        let ca = try Data(contentsOf: URL(fileURLWithPath: dir.file("c/ca.pem")))
        let again = try PlanProcessTests.run(["certs", dir.file("c")], in: dir)
        #expect(again.status == 73)
        #expect(again.err.contains("--force"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir.file("c/ca.pem"))) == ca, "the CA is untouched")
        let forced = try PlanProcessTests.run(["certs", dir.file("c"), "--force"], in: dir)
        #expect(forced.status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir.file("c/ca.pem"))) != ca)
    }

    @Test func aDashMeansStandardOutputForTheSummary() throws {
        let dir = TemporaryDirectory()
        let result = try PlanProcessTests.run(["plan", PlanProcessTests.repo + "/jobs/spring.json", PlanProcessTests.repo + "/samples/audience.csv",
                                               "--out", dir.file("plan"), "--summary", "-"], in: dir)
        #expect(result.status == 0, "\(result.err)")
        let summary = try JSONValue.parse(Array(result.out))
        #expect(summary["planned"]?.integerValue ?? 0 > 0)
        #expect(!FileManager.default.fileExists(atPath: dir.file("-")), "no file named -")
    }

    @Test func aHeaderWithoutAVariableFailsBeforeAnyRowAndTooManyRejectsExit65() throws {
        let dir = TemporaryDirectory()
        try #"{"campaign":"v","messages":{"en":{"alert":"Hi {first_name}"}}}"#.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let token = String(repeating: "ab", count: 32)
        try "token,lang,name\n\(token),en,Ann\n".write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        let missing = try PlanProcessTests.run(["plan", dir.file("job.json"), dir.file("a.csv"), "--out", dir.file("plan")], in: dir)
        #expect(missing.status == 66)
        #expect(missing.err.contains("no column for the job's variable {first_name}"), "\(missing.err)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("plan")))

        // Two rows of three rejected (not hex): over the default 0.5.
        try "token,lang,first_name\n\(token),en,Ann\nnot-hex,en,Bob\nzz,en,Cy\n".write(toFile: dir.file("b.csv"), atomically: true, encoding: .utf8)
        let rejected = try PlanProcessTests.run(["plan", dir.file("job.json"), dir.file("b.csv"), "--out", dir.file("plan"),
                                                 "--summary", dir.file("summary.json")], in: dir)
        #expect(rejected.status == 65)
        #expect(rejected.err.contains("2 of 3 rows were rejected"), "\(rejected.err)")
        #expect(FileManager.default.fileExists(atPath: dir.file("summary.json")), "the summary is still written")
        let allowed = try PlanProcessTests.run(["plan", dir.file("job.json"), dir.file("b.csv"), "--out", dir.file("plan"),
                                                "--max-reject-rate", "0.9"], in: dir)
        #expect(allowed.status == 0)
    }

    @Test func aSemicolonSeparatedAudienceGetsAHintThenPlansWithDelimiter() throws {
        let dir = TemporaryDirectory()
        try #"{"campaign":"d","messages":{"en":{"alert":"Hi {first_name}"}}}"#.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let token = String(repeating: "cd", count: 32)
        try "token;lang;first_name\n\(token);en;\"Ann; Jr\"\n".write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        let plain = try PlanProcessTests.run(["plan", dir.file("job.json"), dir.file("a.csv"), "--out", dir.file("plan")], in: dir)
        #expect(plain.status == 66)
        #expect(plain.err.contains("give --delimiter ';'"), "\(plain.err)")
        let semicolons = try PlanProcessTests.run(["plan", dir.file("job.json"), dir.file("a.csv"), "--out", dir.file("plan"), "--delimiter", ";"], in: dir)
        #expect(semicolons.status == 0, "\(semicolons.err)")
        let text = try String(contentsOfFile: dir.file("plan"), encoding: .utf8)
        #expect(text.contains("Hi Ann; Jr"))
        try "token\tlang\tfirst_name\n\(token)\ten\tBo\n".write(toFile: dir.file("t.csv"), atomically: true, encoding: .utf8)
        let tabs = try PlanProcessTests.run(["plan", dir.file("job.json"), dir.file("t.csv"), "--out", dir.file("plan"), "--delimiter", "\\t"], in: dir)
        #expect(tabs.status == 0, "\(tabs.err)")
    }

    @Test func aDashMeansStandardOutputForRejectsAndTheSimulatorsStatistics() throws {
        let dir = TemporaryDirectory()
        let rejected = try PlanProcessTests.run(["plan", PlanProcessTests.repo + "/jobs/spring.json", PlanProcessTests.repo + "/samples/audience.csv",
                                                 "--out", dir.file("plan"), "--rejects", "-"], in: dir)
        #expect(rejected.status == 0, "\(rejected.err)")
        let lines = String(decoding: rejected.out, as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 8 && lines.allSatisfy { (try? JSONValue.parse(String($0)))?["reason"] != nil })
        #expect(!FileManager.default.fileExists(atPath: dir.file("-")))
        let both = try PlanProcessTests.run(["plan", PlanProcessTests.repo + "/jobs/spring.json", "-", "--rejects", "-"], in: dir)
        #expect(both.status == 64)
        let stats = try PlanProcessTests.run(["simulator", "--certs", TestCertificates.directory, "--port", "0", "--feedback-port", "0",
                                              "--stats", "-", "--max-seconds", "0.5"], in: dir)
        #expect(stats.status == 0, "\(stats.err)")
        #expect((try JSONValue.parse(Array(stats.out)))["accepted"]?.integerValue == 0)
    }

    @Test func aPassphraseFileSavedOnWindowsIsRead() {
        #expect(CredentialOptions.firstLine(of: "s3cret\r\n") == "s3cret")
        #expect(CredentialOptions.firstLine(of: "s3cret\r\nsecond line\r\n") == "s3cret")
        #expect(CredentialOptions.firstLine(of: "s3cret") == "s3cret")
        #expect(CredentialOptions.firstLine(of: "with space \n") == "with space ")
    }

    @Test func helpShowsTheDefaults() {
        let help = Campaign.helpMessage(for: Send.self, columns: 200).split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for expected in ["auto (the default)", "default 64", "default 262144", "default 5", "default 0: by time", "default 2"] {
            #expect(help.contains(expected), "\(expected)")
        }
    }

    /// `status --failures` lists every final failure; `status` of a send that
    /// is running says so, with its pid, instead of "crash or kill".
    @Test(.timeLimit(.minutes(3))) func statusListsFailuresAndKnowsARunningSend() throws {
        let dir = TemporaryDirectory("status")
        let tokens = Array(try SendProcessTests.plan(count: 12_000, into: dir.file("plan.ndjson"), seed: 31))
        var faults = FaultPlan()
        faults.badTokens = Set(tokens.prefix(3).map { DeviceToken(hex: $0)!.bytes })
        let simulator = try SendProcessTests.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--rate", "3000"] + SendProcessTests.credentials(), in: dir.path)
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted >= 1000 })
        let during = try PlanProcessTests.run(["status", dir.file("journal"), "--json"], in: dir)
        let value = try JSONValue.parse(Array(during.out))
        #expect(value["outcome"]?.stringValue == "running", "\(value)")
        #expect(value["pid"]?.integerValue == Int64(run.process.processIdentifier))
        #expect(run.wait(timeout: 120) == 0, "\(run.stderr)")
        let listed = try PlanProcessTests.run(["status", dir.file("journal"), "--failures"], in: dir)
        let lines = try String(decoding: listed.out, as: UTF8.self).split(separator: "\n").map { try JSONValue.parse(String($0)) }
        #expect(Set(lines.compactMap { $0["token"]?.stringValue }) == Set(tokens.prefix(3)))
        #expect(lines.allSatisfy { $0["status"]?.integerValue == 8 && $0["reason"]?.stringValue == "invalid token" && $0["attempts"]?.integerValue == 1 })
    }

    @Test func sendKeepsAMetricsFile() throws {
        let dir = TemporaryDirectory("metrics")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        _ = try SendProcessTests.plan(count: 500, into: dir.file("plan.ndjson"), seed: 32)
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--metrics", dir.file("metrics.prom")] + SendProcessTests.credentials(), in: dir.path)
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
        let text = try String(contentsOfFile: dir.file("metrics.prom"), encoding: .utf8)
        #expect(text.contains("campaign_send_accepted_total{journal=\"\(dir.file("journal"))\"} 500"), "\(text)")
        #expect(text.contains("campaign_send_in_flight{journal=\"\(dir.file("journal"))\"} 0"))
        #expect(text.contains("campaign_send_plan_records{journal=\"\(dir.file("journal"))\"} 500"))
    }

    /// The send journals its counts once a second, and `status --html`
    /// draws them in one page that needs nothing else.
    @Test(.timeLimit(.minutes(2))) func statusDrawsTheSendInOneSelfContainedPage() throws {
        let dir = TemporaryDirectory("html")
        var faults = FaultPlan()
        let tokens = Array(try SendProcessTests.plan(count: 6000, into: dir.file("plan.ndjson"), seed: 33))
        faults.badTokens = Set(tokens.prefix(2).map { DeviceToken(hex: $0)!.bytes })
        let simulator = try SendProcessTests.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--rate", "2000"] + SendProcessTests.credentials(), in: dir.path)
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.timeline.count == 1 && state.timeline[0].count >= 2, "one tick a second: \(state.timeline)")
        #expect(state.timeline[0].map(\.accepted) == state.timeline[0].map(\.accepted).sorted(), "counts only grow")
        #expect(state.timeline[0].last?.accepted == 5998 && state.timeline[0].last?.failed == 2, "the last, partial second too: \(state.timeline)")
        // The binary interface has no pool; status still tells the connections it opened.
        let told = String(decoding: try PlanProcessTests.run(["status", dir.file("journal")], in: dir).out, as: UTF8.self)
        #expect(state.reconnects > 0 && told.contains("  connections: \(state.reconnects) opened\n"), "\(told)")
        let result = try PlanProcessTests.run(["status", dir.file("journal"), "--html", dir.file("report.html")], in: dir)
        #expect(result.status == 0, "\(result.err)")
        let page = try String(contentsOfFile: dir.file("report.html"), encoding: .utf8)
        #expect(page.hasPrefix("<!DOCTYPE html>") && page.hasSuffix("</html>\n"))
        #expect(page.components(separatedBy: "<svg").count - 1 == 4, "rate, outcomes, connections, resends (each on its own axis since issue 24)")
        #expect(page.contains("<polyline"))
        #expect(page.contains(">5998</td>"), "the accepted count in the summary")
        #expect(page.contains(">8 invalid token<"), "failures by status and reason, as issue 24 names them")
        for forbidden in ["<script", "src=", "href=", "<link", "@import", "url("] {
            #expect(!page.contains(forbidden), "self-contained: \(forbidden)")
        }
    }

    @Test func statusNamesReplanWhenTheSpoolWasCutWhilePlanning() throws {
        let dir = TemporaryDirectory("status-replan")
        var settings = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 1, certificate: "c.pem")
        settings.planPath = nil
        do { _ = try Journal.create(directory: dir.file("j"), settings: settings, planHeader: .null) }
        let result = try PlanProcessTests.run(["status", dir.file("j")], in: dir)
        #expect(String(decoding: result.out, as: UTF8.self).contains("--replan"))
    }
}
