import Foundation
import Testing
import CampaignJSON
import CampaignTestSupport
import CampaignTLS
import GatewaySimulator
@testable import CampaignCommands

/// `campaign doctor` against the simulator: all ok with good credentials,
/// and each set-up fault named in one sentence with its exit code.
@Suite(.ownThreads) struct DoctorTests {
    static let job = #"{"campaign":"night","format":"h2","topic":"com.example.campaign","messages":{"en":{"alert":"Hi"}}}"#

    /// `campaign doctor ARGS --json`: its exit status and the checks by name.
    static func doctor(_ arguments: [String], in dir: TemporaryDirectory) throws -> (status: Int32?, checks: [String: JSONValue], err: String) {
        let run = try ChannelsTests.run(["doctor", "--json"] + arguments, in: dir)
        var checks: [String: JSONValue] = [:]
        if case .array(let items)? = try? JSONValue.parse(run.out) {
            for item in items { if let name = item["check"]?.stringValue { checks[name] = item } }
        }
        return (run.status, checks, run.err)
    }

    static func certificateFlags(cert: String = TestCertificates.path("client.pem"), key: String = TestCertificates.path("client.key"),
                                 ca: String = TestCertificates.path("ca.pem")) -> [String] {
        ["--cert", cert, "--key", key, "--ca", ca]
    }

    /// A client certificate for the app, issued by the development CA, valid until `notAfter`.
    static func certificate(in dir: TemporaryDirectory, name: String, notBefore: Date, notAfter: Date) throws -> (cert: String, key: String) {
        let ca = try CertificateAuthority(certificate: TestCertificates.path("ca.pem"), key: TestCertificates.path("ca.key"))
        let identity = try ca.issue(subject: [("UID", "com.example.campaign"), ("CN", "Apple Push Services: com.example.campaign")],
                                    role: .client, notBefore: notBefore, notAfter: notAfter)
        try Data(identity.certificate.pem()).write(to: URL(fileURLWithPath: dir.file("\(name).pem")))
        try Data(identity.key.pem()).write(to: URL(fileURLWithPath: dir.file("\(name).key")))
        return (dir.file("\(name).pem"), dir.file("\(name).key"))
    }

    @Test(.timeLimit(.minutes(2))) func withGoodCredentialsEveryCheckIsOk() throws {
        let dir = TemporaryDirectory("doctor-ok")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        try Self.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let (csv, _) = randomAudienceCSV(count: 200, seed: 50)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        #expect(try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson"], in: dir).status == 0)
        try FileManager.default.createDirectory(atPath: dir.file("ledger"), withIntermediateDirectories: true)
        let result = try Self.doctor(["--gateway", "127.0.0.1:\(simulator.port)", "--job", "job.json", "--plan", "plan.ndjson",
                                      "--journal", "out/night", "--ledger", "ledger", "--probe"] + Self.certificateFlags(), in: dir)
        #expect(result.status == 0, "\(result.err)")
        for name in ["certificate", "job", "plan", "topic", "journal directory", "ledger", "route", "clock", "probe"] {
            #expect(result.checks[name]?["status"]?.stringValue == "ok", "\(name): \(String(describing: result.checks[name]))")
        }
        #expect(result.checks["route"]?["sentence"]?.stringValue?.contains("its chain ending in") == true)
        #expect(result.checks["probe"]?["sentence"]?.stringValue?.contains("400 BadDeviceToken") == true)
        #expect(result.checks["clock"]?["sentence"]?.stringValue?.contains("within") == true, "the simulator's answer carries a date")
        // The text: one line a check.
        let text = try ChannelsTests.run(["doctor", "--gateway", "127.0.0.1:\(simulator.port)"] + Self.certificateFlags(), in: dir)
        #expect(text.status == 0 && ChannelsTests.lines(text.out).allSatisfy { $0.hasPrefix("ok ") }, "\(text.out)")
    }

    @Test(.timeLimit(.minutes(2))) func eachFaultIsNamedInOneSentenceWithItsExitCode() throws {
        let dir = TemporaryDirectory("doctor-faults")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let gateway = ["--gateway", "127.0.0.1:\(simulator.port)"]

        // A CA that does not sign the gateway's chain.
        #expect(try PlanProcessTests.run(["certs", "other", "--bundle-id", "com.example.other"], in: dir).status == 0)
        let untrusted = try Self.doctor(gateway + Self.certificateFlags(ca: dir.file("other/ca.pem")), in: dir)
        #expect(untrusted.status == 77, "\(untrusted.checks)")
        #expect(untrusted.checks["route"]?["sentence"]?.stringValue?.contains("not trusted") == true, "\(untrusted.checks)")

        // A certificate expired, and one expiring in 10 days (a warning: exit 0).
        let expired = try Self.certificate(in: dir, name: "expired", notBefore: Date().addingTimeInterval(-90 * 86_400), notAfter: Date().addingTimeInterval(-86_400))
        let old = try Self.doctor(gateway + Self.certificateFlags(cert: expired.cert, key: expired.key), in: dir)
        #expect(old.status == 77 && old.checks["certificate"]?["sentence"]?.stringValue?.contains("expired on") == true, "\(old.checks)")
        let soon = try Self.certificate(in: dir, name: "soon", notBefore: Date().addingTimeInterval(-86_400), notAfter: Date().addingTimeInterval(10 * 86_400 + 3600))
        let warned = try Self.doctor(gateway + Self.certificateFlags(cert: soon.cert, key: soon.key), in: dir)
        #expect(warned.status == 0, "\(warned.checks)")
        #expect(warned.checks["certificate"]?["status"]?.stringValue == "warning"
                && warned.checks["certificate"]?["sentence"]?.stringValue?.contains("in 10 days") == true, "\(warned.checks)")

        // A job whose topic is not the certificate's.
        try #"{"campaign":"night","format":"h2","topic":"com.example.other","messages":{"en":{"alert":"Hi"}}}"#
            .write(toFile: dir.file("other.json"), atomically: true, encoding: .utf8)
        let topic = try Self.doctor(gateway + Self.certificateFlags() + ["--job", "other.json"], in: dir)
        #expect(topic.status == 65 && topic.checks["topic"]?["sentence"]?.stringValue?.contains("is not the certificate's") == true, "\(topic.checks)")

        // A journal directory with too little space for the plan.
        try Self.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let (csv, _) = randomAudienceCSV(count: 200, seed: 51)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        #expect(try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson"], in: dir).status == 0)
        let full = try Self.doctor(gateway + Self.certificateFlags() + ["--plan", "plan.ndjson", "--journal", "j", "--assume-free-bytes", "1000"], in: dir)
        #expect(full.status == 73 && full.checks["journal directory"]?["sentence"]?.stringValue?.contains("less than the plan's") == true, "\(String(describing: full.status)) \(full.checks) \(full.err)")

        // A proxy that refuses the tunnel (it opens them to port 443 only).
        let proxy = try TinyProxy(in: dir, connectPorts: [443])
        defer { proxy.stop() }
        let refused = try Self.doctor(gateway + Self.certificateFlags() + ["--proxy", proxy.url()], in: dir)
        #expect(refused.status == 69, "\(refused.checks) \(refused.err)")
        #expect(refused.checks["route"]?["sentence"]?.stringValue?.contains("through the proxy") == true, "\(refused.checks)")
    }

    /// A key the gateway does not know (another team's): the probe says APNs' reason.
    @Test(.timeLimit(.minutes(2))) func aKeyOfAnotherTeamIsRefusedWithApplesReason() throws {
        let dir = TemporaryDirectory("doctor-key")
        let simulator = try startHTTP2Simulator(in: dir, tokens: true)
        defer { simulator.stop() }
        let good = try Self.doctor(["--gateway", "127.0.0.1:\(simulator.port)", "--probe", "--topic", "com.example.campaign"] + ChannelsTests.tokenFlags(), in: dir)
        #expect(good.status == 0 && good.checks["probe"]?["status"]?.stringValue == "ok", "\(good.checks)")
        let other = ["--auth-key", TestCertificates.path(DevelopmentCertificates.authKey), "--key-id", "OTHERKEY01", "--team-id", "OTHERTEAM1",
                     "--ca", TestCertificates.path("ca.pem")]
        let refused = try Self.doctor(["--gateway", "127.0.0.1:\(simulator.port)", "--probe", "--topic", "com.example.campaign"] + other, in: dir)
        #expect(refused.status == 77, "\(refused.checks)")
        #expect(refused.checks["probe"]?["sentence"]?.stringValue?.contains("403 InvalidProviderToken") == true, "\(refused.checks)")
    }

    /// A clock five minutes off (this machine's, as the checks are given it) is a warning: tokens would be refused.
    @Test(.timeLimit(.minutes(2))) func aClockMinutesOffIsAWarning() throws {
        let dir = TemporaryDirectory("doctor-clock")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        var input = DoctorInput(host: "127.0.0.1", port: simulator.port, proxy: nil)
        (input.certificate, input.key, input.ca) = (TestCertificates.path("client.pem"), TestCertificates.path("client.key"), TestCertificates.path("ca.pem"))
        input.topic = "com.example.campaign"
        input.probe = true
        input.now = Date().addingTimeInterval(300)
        let checks = DoctorChecks.run(input)
        let clock = try #require(checks.first { $0.name == "clock" })
        #expect(clock.status == .warning && clock.sentence.contains("ahead of the server's"), "\(clock)")
        #expect(!checks.contains { $0.status == .failed }, "\(checks)")
    }
}
