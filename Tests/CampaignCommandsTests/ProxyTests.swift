import Foundation
import Testing
import APNSWire
import CampaignJSON
import FeedbackStore
import CampaignSend
import CampaignTestSupport
import CampaignTLS
import GatewaySimulator
import SendJournal

/// `send` and `feedback` through a real HTTP proxy (Debian's tinyproxy, on
/// 127.0.0.1, configured by the test) in front of the simulator.
@Suite(.ownThreads) struct ProxyTests {
    static let password = "pr0xy-S3cret-9"
    /// Variables that must not leak in from the machine running the tests.
    static let cleanEnvironment = ["HTTPS_PROXY": "", "https_proxy": "", "NO_PROXY": "", "no_proxy": ""]

    static let tokenCredentials = ["--auth-key", TestCertificates.path(DevelopmentCertificates.authKey), "--key-id", DevelopmentCertificates.authKeyID,
                                   "--team-id", DevelopmentCertificates.authTeamID, "--ca", TestCertificates.path("ca.pem")]

    enum Setup: String, CaseIterable { case binaryCertificate, http2Certificate, http2Token }

    /// A plan for `proto` of `count` devices and a simulator that takes it; the tokens.
    static func setUp(_ proto: Setup, count: Int, in dir: TemporaryDirectory) throws -> (GatewaySimulator, Set<String>, [String]) {
        switch proto {
        case .binaryCertificate:
            let tokens = try SendProcessTests.plan(count: count, into: dir.file("plan.ndjson"), seed: 7)
            return (try SendProcessTests.simulator(in: dir), tokens, SendProcessTests.credentials())
        case .http2Certificate, .http2Token:
            let tokens = Set(try H2SendTests.plan(count: count, in: dir))
            let simulator = try startHTTP2Simulator(in: dir, tokens: proto == .http2Token)
            return (simulator, tokens, proto == .http2Token ? Self.tokenCredentials : SendProcessTests.credentials())
        }
    }

    static func send(_ dir: TemporaryDirectory, _ simulator: GatewaySimulator, _ credentials: [String], _ extra: [String],
                     environment: [String: String] = [:]) throws -> CampaignProcess {
        try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway", "127.0.0.1:\(simulator.port)",
                             "--report", dir.file("report.json")] + credentials + extra,
                            in: dir.path, environment: cleanEnvironment.merging(environment) { $1 })
    }

    /// Every file of the journal, the report and standard error: none may hold the password.
    static func expectNoPassword(in dir: TemporaryDirectory, stderr: String) throws {
        #expect(!stderr.contains(Self.password), "standard error")
        let files = (try FileManager.default.subpathsOfDirectory(atPath: dir.file("journal"))).map { dir.file("journal/\($0)") } + [dir.file("report.json")]
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            #expect(!String(decoding: data, as: UTF8.self).contains(Self.password), "\(file)")
        }
    }

    @Test(.timeLimit(.minutes(2)), arguments: Setup.allCases)
    func everythingGoesThroughTheProxyOnceWithItsPasswordNowhere(proto: Setup) throws {
        let dir = TemporaryDirectory("proxy")
        let proxy = try TinyProxy(in: dir, user: ("campaign", Self.password))
        let (simulator, tokens, credentials) = try Self.setUp(proto, count: 1_500, in: dir)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, credentials, ["--connections", "2", "--proxy", proxy.url(credentials: "campaign:\(Self.password)")])
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr.prefix(2000))")
        simulator.stop()
        let recorded = try SendProcessTests.recorded(dir)
        #expect(recorded.count == tokens.count && Set(recorded) == tokens, "each accepted exactly once")
        #expect(proxy.connectsLogged >= 2, "the connections went through the proxy")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.settings.proxy?.description == "http://campaign@127.0.0.1:\(proxy.port)", "the journal keeps the URL without the password")
        try Self.expectNoPassword(in: dir, stderr: run.stderr)
    }

    @Test(.timeLimit(.minutes(2))) func missingOrWrongProxyCredentialsExit77AndSendNothing() throws {
        let dir = TemporaryDirectory("proxyauth")
        let proxy = try TinyProxy(in: dir, user: ("campaign", Self.password))
        let (simulator, _, credentials) = try Self.setUp(.http2Certificate, count: 50, in: dir)
        defer { simulator.stop() }
        let missing = try Self.send(dir, simulator, credentials, ["--proxy", proxy.url()])
        #expect(missing.wait(timeout: 60) == 77, "\(missing.stderr)")
        #expect(missing.stderr.contains("wants credentials (407)"), "\(missing.stderr)")
        try? FileManager.default.removeItem(atPath: dir.file("journal"))
        let wrong = try Self.send(dir, simulator, credentials, ["--proxy", proxy.url(), "--proxy-user-env", "CAMPAIGN_PROXY_USER"],
                                  environment: ["CAMPAIGN_PROXY_USER": "campaign:not-\(Self.password)"])
        #expect(wrong.wait(timeout: 60) == 77, "\(wrong.stderr)")
        #expect(wrong.stderr.contains("refused our credentials (401)"), "tinyproxy answers 401 to a wrong password: \(wrong.stderr)")
        #expect(!wrong.stderr.contains("not-\(Self.password)"))
        simulator.stop()
        #expect(((try? SendProcessTests.recorded(dir)) ?? []).isEmpty, "nothing was sent")
    }

    @Test(.timeLimit(.minutes(3))) func aProxyKilledMidSendIsWaitedForAndTheSendLosesNothing() throws {
        let dir = TemporaryDirectory("proxykill")
        let proxy = try TinyProxy(in: dir, user: ("campaign", Self.password))
        let (simulator, tokens, credentials) = try Self.setUp(.http2Certificate, count: 6_000, in: dir)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, credentials, ["--connections", "2", "--rate", "1500", "--proxy", proxy.url(),
                                                              "--proxy-user-env", "CAMPAIGN_PROXY_USER"],
                                environment: ["CAMPAIGN_PROXY_USER": "campaign:\(Self.password)"])
        #expect(eventually(within: 30) { ((try? SendProcessTests.recorded(dir)) ?? []).count >= 1_000 })
        proxy.stop()   // its tunnels die with it: the connections are lost
        #expect(eventually(within: 60) { run.stderr.contains("Cannot connect to the proxy") }, "\(run.stderr.suffix(1500))")
        try proxy.start()
        #expect(run.wait(timeout: 120) == 0, "\(run.stderr.suffix(2000))")
        simulator.stop()
        let recorded = try SendProcessTests.recorded(dir)
        #expect(Set(recorded) == tokens, "nothing lost")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(recorded.count - tokens.count <= state.duplicatesRisked, "duplicates no more than reported")
        try Self.expectNoPassword(in: dir, stderr: run.stderr)
    }

    @Test(.timeLimit(.minutes(3))) func aSendThroughHTTPSProxyWithAPasswordResumesTheSameWay() throws {
        let dir = TemporaryDirectory("proxyenvresume")
        let proxy = try TinyProxy(in: dir, user: ("campaign", Self.password))
        let (simulator, tokens, credentials) = try Self.setUp(.http2Certificate, count: 3_000, in: dir)
        defer { simulator.stop() }
        let environment = ["HTTPS_PROXY": proxy.url(credentials: "campaign:\(Self.password)")]
        let first = try Self.send(dir, simulator, credentials, ["--connections", "2", "--rate", "1000"], environment: environment)
        #expect(eventually(within: 30) { ((try? SendProcessTests.recorded(dir)) ?? []).count >= 500 })
        first.kill9()
        func resume(_ extra: [String], _ environment: [String: String]) throws -> CampaignProcess {
            try CampaignProcess(["send", "--resume", dir.file("journal")] + extra, in: dir.path,
                                environment: Self.cleanEnvironment.merging(environment) { $1 })
        }
        // Without the variable the password is nowhere: one sentence, a usage error.
        let bare = try resume([], [:])
        #expect(bare.wait(timeout: 30) == 64, "\(bare.stderr)")
        #expect(bare.stderr.contains("set HTTPS_PROXY as before"), "\(bare.stderr)")
        let unset = try resume(["--proxy-user-env", "NOT_SET_ANYWHERE"], [:])
        #expect(unset.wait(timeout: 30) == 64, "\(unset.stderr)")
        #expect(unset.stderr.contains("NOT_SET_ANYWHERE"), "\(unset.stderr)")
        // The plain resume `status` suggests, with HTTPS_PROXY as before: through the same proxy.
        let connects = proxy.connectsLogged
        let resumed = try resume([], environment)
        #expect(resumed.wait(timeout: 120) == 0, "\(resumed.stderr)")
        #expect(proxy.connectsLogged > connects, "the resume went through the proxy")
        simulator.stop()
        let recorded = try SendProcessTests.recorded(dir)
        #expect(Set(recorded) == tokens, "nothing lost")
        #expect(recorded.count - tokens.count <= (try Journal.read(directory: dir.file("journal"))).duplicatesRisked)
        try Self.expectNoPassword(in: dir, stderr: first.stderr + bare.stderr + unset.stderr + resumed.stderr)
    }

    @Test(.timeLimit(.minutes(2))) func httpsProxyIsHonouredAndNoProxyNamingTheGatewayBypassesIt() throws {
        let dir = TemporaryDirectory("proxyenv")
        let proxy = try TinyProxy(in: dir)
        let (simulator, tokens, credentials) = try Self.setUp(.http2Certificate, count: 300, in: dir)
        defer { simulator.stop() }
        let viaEnvironment = try Self.send(dir, simulator, credentials, [], environment: ["HTTPS_PROXY": proxy.url()])
        #expect(viaEnvironment.wait(timeout: 60) == 0, "\(viaEnvironment.stderr)")
        #expect(proxy.connectsLogged >= 1)
        #expect(Set(try SendProcessTests.recorded(dir)) == tokens)
        let before = proxy.connectsLogged
        try FileManager.default.removeItem(atPath: dir.file("journal"))
        let bypassed = try Self.send(dir, simulator, credentials, [], environment: ["https_proxy": proxy.url(), "NO_PROXY": "localhost,.example.com,127.0.0.1"])
        #expect(bypassed.wait(timeout: 60) == 0, "\(bypassed.stderr)")
        #expect(proxy.connectsLogged == before, "NO_PROXY names the gateway: no tunnel")
        try FileManager.default.removeItem(atPath: dir.file("journal"))
        let ignored = try Self.send(dir, simulator, credentials, ["--no-proxy"], environment: ["HTTPS_PROXY": "http://127.0.0.1:9"])
        #expect(ignored.wait(timeout: 60) == 0, "--no-proxy ignores HTTPS_PROXY: \(ignored.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func aProxyThatNeverAnswersOrRefusesTheTunnelEndsWith69() throws {
        let dir = TemporaryDirectory("proxysilent")
        let (simulator, _, credentials) = try Self.setUp(.http2Certificate, count: 20, in: dir)
        defer { simulator.stop() }
        // Accepts, reads, never answers CONNECT.
        let silent = try Listener(port: 0)
        defer { silent.close() }
        let start = Date()
        let run = try Self.send(dir, simulator, credentials, ["--proxy", "http://127.0.0.1:\(silent.port)", "--answer-timeout", "2"])
        #expect(run.wait(timeout: 90) == 69, "\(run.stderr)")
        #expect(Date().timeIntervalSince(start) < 80)
        #expect(run.stderr.contains("waiting for the proxy"), "\(run.stderr)")
        // A proxy that cannot reach the gateway: tinyproxy's 500.
        let proxy = try TinyProxy(in: dir)
        try FileManager.default.removeItem(atPath: dir.file("journal"))
        let refused = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway", "127.0.0.1:9",
                                           "--proxy", proxy.url()] + credentials, in: dir.path, environment: Self.cleanEnvironment)
        #expect(refused.wait(timeout: 90) == 69, "\(refused.stderr)")
        #expect(refused.stderr.contains("refused to open a tunnel to the gateway (500"), "\(refused.stderr)")
        // Its status line only, not the header fields after it.
        #expect(!refused.stderr.contains("Server: tinyproxy") && !refused.stderr.contains("Content-Type"), "\(refused.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func aResumeGoesThroughTheSameProxyWithThePasswordFromTheSameVariable() throws {
        let dir = TemporaryDirectory("proxyresume")
        let proxy = try TinyProxy(in: dir, user: ("campaign", Self.password))
        let (simulator, tokens, credentials) = try Self.setUp(.http2Certificate, count: 4_000, in: dir)
        defer { simulator.stop() }
        let variable = ["CAMPAIGN_PROXY_USER": "campaign:\(Self.password)"]
        // 4,000 at 400/s: the kill comes at about 500, with seconds to spare on a loaded machine
        // (at 2,000/s a late look found the first run complete, and the resume had nothing to send).
        let first = try Self.send(dir, simulator, credentials, ["--rate", "400", "--proxy", proxy.url(), "--proxy-user-env", "CAMPAIGN_PROXY_USER"],
                                  environment: variable)
        #expect(eventually(within: 30) { ((try? SendProcessTests.recorded(dir)) ?? []).count >= 500 })
        first.kill9()
        #expect(first.wait(timeout: 10) != nil && first.process.terminationReason == .uncaughtSignal, "killed mid-send: \(first.stderr)")
        let tunnels = proxy.connectsLogged
        let resumed = try CampaignProcess(["send", "--resume", dir.file("journal")] + credentials, in: dir.path,
                                          environment: Self.cleanEnvironment.merging(variable) { $1 })
        #expect(resumed.wait(timeout: 90) == 0, "\(resumed.stderr)")
        // The proxy's log is its own process's writing: looked at until it shows the resume's tunnel.
        #expect(eventually(within: 10) { proxy.connectsLogged > tunnels }, "the resume went through the proxy too")
        simulator.stop()
        #expect(Set(try SendProcessTests.recorded(dir)) == tokens)
        try Self.expectNoPassword(in: dir, stderr: first.stderr + resumed.stderr)
    }

    @Test(.timeLimit(.minutes(5))) func feedbackIsReadThroughTheProxy() throws {
        let dir = TemporaryDirectory("proxyfeedback")
        let proxy = try TinyProxy(in: dir, user: ("campaign", Self.password))
        let tuples = (0..<20).map { FeedbackTuple(timestamp: 1_700_000_000 + UInt32($0), token: Array(repeating: UInt8($0), count: 32)) }
        let simulator = try FeedbackNightlyTests.simulator(in: dir, feedback: tuples)
        defer { simulator.stop() }
        let run = try CampaignProcess(["feedback", "--store", dir.file("store.ndjson"), "--feedback", "127.0.0.1:\(simulator.feedbackPort)",
                                       "--proxy", proxy.url(credentials: "campaign:\(Self.password)")] + SendProcessTests.credentials(),
                                      in: dir.path, environment: Self.cleanEnvironment)
        #expect(run.wait(timeout: 30) == 0, "\(run.stderr)")
        #expect(try FeedbackStore.load(path: dir.file("store.ndjson")).count == 20)
        #expect(proxy.connectsLogged == 1)
        #expect(!run.stderr.contains(Self.password))
    }

    @Test func proxyURLsAndNoProxyReadAsCurlReadsThem() throws {
        let p = try HTTPProxy(url: "http://us%40er:p%3Ass@proxy.corp:3128/")
        #expect(p.host == "proxy.corp" && p.port == 3128 && p.credentials == "us@er:p:ss")
        #expect(p.description == "http://us@er@proxy.corp:3128")
        #expect(try HTTPProxy(url: "proxy.corp").port == 1080)
        #expect(try HTTPProxy(url: "http://[::1]:8080").host == "::1")
        #expect(throws: HTTPProxy.URLError.self) { try HTTPProxy(url: "socks5://proxy:1080") }
        #expect(throws: HTTPProxy.URLError.self) { try HTTPProxy(url: "http://proxy:99999") }
        #expect(HTTPProxy.redacted("http://u:secret@h:1") == "http://u:***@h:1")
        #expect(HTTPProxy.bypasses("api.push.apple.com", list: "apple.com"))
        #expect(HTTPProxy.bypasses("api.push.apple.com", list: "localhost, .push.apple.com"))
        #expect(HTTPProxy.bypasses("anything", list: "*"))
        #expect(!HTTPProxy.bypasses("api.push.apple.com", list: "notapple.com,push.apple"))
        let env = ["HTTPS_PROXY": "http://p:3128", "NO_PROXY": "sandbox.push.apple.com"]
        #expect(try HTTPProxy.fromEnvironment(for: "api.push.apple.com", environment: env)?.port == 3128)
        #expect(try HTTPProxy.fromEnvironment(for: "api.sandbox.push.apple.com", environment: env) == nil)
        #expect(try HTTPProxy.fromEnvironment(for: "x", environment: ["https_proxy": "http://a:1", "HTTPS_PROXY": "http://b:2"])?.host == "a",
                "the lowercase one first, as curl")
    }
}
