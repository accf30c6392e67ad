import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import FeedbackStore
import GatewaySimulator
import SendJournal
import GatewayClient
import SendEngine

/// `campaign send` in front of HTTP/2 servers that misbehave on purpose
/// (issue 21): every one ends by itself within a bound, a first SIGTERM ends
/// it within 10 s, a server's trouble makes nothing final, a notification is
/// never sent without limit, and what the server says is bounded and checked.
@Suite(.ownThreads) struct HostileHTTP2Tests {
    typealias Behaviour = HostileHTTP2Server.Behaviour

    /// Short bounds, so each case ends in seconds.
    static let quick = ["--answer-timeout", "2", "--outage-limit", "4", "--ping-after", "1"]

    static func send(_ dir: TemporaryDirectory, port: Int, _ extra: [String]) throws -> CampaignProcess {
        try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(port)"]
                            + SendProcessTests.credentials() + extra, in: dir.path)
    }

    // MARK: - Never without limit

    /// Servers that take a request and lose the connection before answering
    /// (or break the protocol once it is open): the one notification goes at
    /// most three times, and the send ends 69 with it pending.
    @Test(.timeLimit(.minutes(2)), arguments: [Behaviour.acceptThenReset, .pushPromise, .hugeHeaderBlock, .hugeBody, .continuationFlood])
    func aNotificationOpenOnLostConnectionsIsSentAtMostThreeTimes(_ behaviour: Behaviour) throws {
        let dir = TemporaryDirectory("h2x-resend")
        let tokens = try H2SendTests.plan(count: 1, in: dir)
        let server = try HostileHTTP2Server(behaviour)
        defer { server.stop() }
        let started = Date()
        let run = try Self.send(dir, port: server.port, ["--connections", "1"] + Self.quick)
        let status = run.wait(timeout: 60)
        server.stop()
        #expect(status == 69, "\(behaviour): \(status.map(String.init) ?? "still running") \(run.stderr.suffix(2000))")
        #expect(Date().timeIntervalSince(started) < 45, "\(behaviour)")
        #expect(server.requests <= H2NotificationLimits.maxLosses, "\(behaviour): record 1 reached the server \(server.requests) times")
        #expect(server.connections <= 12, "\(behaviour): \(server.connections) connections for one notification")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.doneCount == 0 && state.failures.isEmpty, "\(behaviour): nothing is final")
        #expect(state.duplicatesRisked <= 1, "\(behaviour): one notification is at most one possible duplicate, not \(state.duplicatesRisked)")
        // And the resume against a healthy gateway delivers it once.
        try Self.resumeDeliversEachOnce(dir, tokens: tokens)
    }

    // MARK: - Every wait has a bound

    /// Each of these would hold a send for ever; each ends by itself, 69, resumable.
    @Test(.timeLimit(.minutes(2)), arguments: [
        Behaviour.neverGrowsWindow, .holdsStreams, .informationalThenNothing, .hugeBody, .hugeHeaderBlock, .dripsAnswer,
        .noStreamsAllowed, .throttledForever, .tokenUpdatesForever, .refusedStreamForever, .goAwayZero, .pingFlood,
        .settingsFlood, .continuationFlood, .dataOnUnopenedStream, .windowUpdateOverflow, .closeAfterHandshake,
        .closeAfterSettings, .acceptThenReset, .neverSpeaksTLS,
    ])
    func aServerThatNeverFinishesEndsTheSendWith69(_ behaviour: Behaviour) throws {
        let dir = TemporaryDirectory("h2x-hang")
        _ = try H2SendTests.plan(count: 300, in: dir)
        let server = try HostileHTTP2Server(behaviour)
        defer { server.stop() }
        let started = Date()
        let run = try Self.send(dir, port: server.port, ["--connections", "2"] + Self.quick)
        let status = run.wait(timeout: 60)
        let seconds = Date().timeIntervalSince(started)
        if status == nil { run.kill9() }
        server.stop()
        #expect(status == 69, "\(behaviour): \(status.map(String.init) ?? "still running after 60 s") \(run.stderr.suffix(2000))")
        #expect(seconds < 45, "\(behaviour): \(Int(seconds)) s")
        // What is said is said once per event, not once per notification (a
        // line per parked notification flooded the terminal).
        let lines = run.stderr.split(separator: "\n").count
        #expect(lines < 60, "\(behaviour): \(lines) lines on standard error for 300 notifications")
        // A request the server says it did not process (REFUSED_STREAM, 429,
        // above a GOAWAY's last stream) goes again after a growing backoff;
        // one it may have processed, at most 3 times.
        let unprocessed = [Behaviour.refusedStreamForever, .tokenUpdatesForever, .throttledForever, .goAwayZero].contains(behaviour)
        #expect(server.requests <= (unprocessed ? 8 : 3) * 300, "\(behaviour): \(server.requests) requests for 300 notifications")
        #expect(server.connections < 60, "\(behaviour): \(server.connections) connections")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.isEmpty && state.outcome == .gaveUp, "\(behaviour): \(state.failures.count) made final")
        #expect(state.duplicatesRisked <= 300, "\(behaviour): \(state.duplicatesRisked) possible duplicates for 300 notifications")
    }

    /// With the default bounds (30 s), a first SIGTERM still ends the send
    /// within 10 s, exit 75, whatever the server is doing.
    @Test(.timeLimit(.minutes(2)), arguments: [
        Behaviour.neverGrowsWindow, .holdsStreams, .informationalThenNothing, .hugeBody, .hugeHeaderBlock, .dripsAnswer,
        .noStreamsAllowed, .throttledForever, .neverSpeaksTLS,
    ])
    func aFirstSignalEndsTheSendWithin10Seconds(_ behaviour: Behaviour) throws {
        let dir = TemporaryDirectory("h2x-term")
        _ = try H2SendTests.plan(count: 300, in: dir)
        let server = try HostileHTTP2Server(behaviour)
        defer { server.stop() }
        let run = try Self.send(dir, port: server.port, ["--connections", "2"])
        #expect(eventually(within: 60) { server.connections >= 1 && (server.requests >= 1 || ![.holdsStreams, .dripsAnswer, .informationalThenNothing].contains(behaviour)) })
        #expect(eventually(within: 60) { FileManager.default.fileExists(atPath: dir.file("journal/journal.log")) })
        let signalled = Date()
        kill(run.process.processIdentifier, SIGTERM)
        let status = run.wait(timeout: 20)
        let seconds = Date().timeIntervalSince(signalled)
        if status == nil { run.kill9() }
        server.stop()
        #expect(status == 75, "\(behaviour): \(status.map(String.init) ?? "still running 20 s after SIGTERM") \(run.stderr.prefix(1500))")
        #expect(seconds < 10, "\(behaviour): \(String(format: "%.1f", seconds)) s after SIGTERM")
    }

    // MARK: - A sick server makes nothing final

    /// Answers about the server, not the notification: retried, then the send
    /// stops (69, or 65 for a server that refuses everything as malformed)
    /// with nothing final, and the resume against a healthy gateway delivers each once.
    @Test(.timeLimit(.minutes(2)), arguments: [
        Behaviour.internalErrorAlways, .throttledForever, .tokenUpdatesForever, .refusedStreamForever, .resetCancel,
        .resetInternalError, .resetProtocolError, .redirectStatus, .status999, .notFoundEverything, .badRequestNotJSON,
    ])
    func aSickServerMakesNothingFinalAndTheResumeDeliversEachOnce(_ behaviour: Behaviour) throws {
        let dir = TemporaryDirectory("h2x-sick")
        let tokens = try H2SendTests.plan(count: 300, in: dir)
        let server = try HostileHTTP2Server(behaviour)
        let run = try Self.send(dir, port: server.port, ["--connections", "2"] + Self.quick)
        let status = run.wait(timeout: 60)
        if status == nil { run.kill9() }
        server.stop()
        let refusesEverything = [Behaviour.notFoundEverything, .badRequestNotJSON].contains(behaviour)
        #expect(status == (refusesEverything ? 65 : 69), "\(behaviour): \(status.map(String.init) ?? "still running") \(run.stderr.prefix(1500))")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.isEmpty && state.doneCount == 0, "\(behaviour): \(state.failures.count) made final by the server's trouble")
        #expect(server.requests <= 8 * 300, "\(behaviour): \(server.requests) requests for 300 notifications in 4 s: not a busy loop")
        try Self.resumeDeliversEachOnce(dir, tokens: tokens)
    }

    // MARK: - A stream limit that drops to 0

    /// A server that answers a few requests, then sets SETTINGS_MAX_CONCURRENT_STREAMS
    /// to 0 and never raises it (on later connections once a request comes,
    /// or at once): with nothing open and the rest of the plan still queued,
    /// each connection counts as silent after --answer-timeout, and three in
    /// a row end the send, 69, within 3 × --answer-timeout + 10 s. The
    /// accepted stay accepted, nothing else is final, and the resume delivers
    /// the rest once. (`--streams 5` keeps most of the 50 in the queue, as a
    /// large plan would.)
    @Test(.timeLimit(.minutes(2)), arguments: [Behaviour.noStreamsMidSend, .noStreamsOnReconnect])
    func aStreamLimitThatDropsToZeroEndsTheSendWith69(_ behaviour: Behaviour) throws {
        let dir = TemporaryDirectory("h2x-zero")
        let tokens = try H2SendTests.plan(count: 50, in: dir)
        let server = try HostileHTTP2Server(behaviour)
        defer { server.stop() }
        let answerTimeout = 2.0
        let started = Date()
        let run = try Self.send(dir, port: server.port, ["--connections", "1", "--streams", "5", "--answer-timeout", "\(Int(answerTimeout))",
                                                         "--outage-limit", "5", "--ping-after", "1"])
        let status = run.wait(timeout: 60)
        let seconds = Date().timeIntervalSince(started)
        if status == nil { run.kill9() }
        server.stop()
        #expect(status == 69, "\(behaviour): \(status.map(String.init) ?? "still running after 60 s") \(run.stderr.suffix(2000))")
        #expect(seconds < answerTimeout * 3 + 10, "\(behaviour): \(String(format: "%.1f", seconds)) s")
        let state = try Journal.read(directory: dir.file("journal"))
        let ok = HostileHTTP2Server.okBeforeNoStreams
        #expect(state.accepted == ok && state.doneCount == ok, "\(behaviour): \(state.accepted) accepted, \(state.doneCount) final")
        #expect(state.failures.isEmpty && state.outcome == .gaveUp, "\(behaviour): \(state.failures.count) failed, \(state.outcome?.rawValue ?? "no outcome")")
        // Nothing was open when a connection was dropped: refused streams go again exactly.
        #expect(state.duplicatesRisked == 0, "\(behaviour): \(state.duplicatesRisked) possible duplicates")
        try Self.resumeDeliversTheRestOnce(dir, tokens: tokens, alreadyAccepted: ok)
    }

    /// `send --resume journal` against the simulator after `alreadyAccepted`
    /// were accepted elsewhere: 0, the others each recorded once, and the journal complete.
    static func resumeDeliversTheRestOnce(_ dir: TemporaryDirectory, tokens: [String], alreadyAccepted: Int) throws {
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let resume = try CampaignProcess(["send", "--resume", "journal", "--gateway", "127.0.0.1:\(simulator.port)"], in: dir.path)
        #expect(resume.wait(timeout: 60) == 0, "\(resume.stderr.suffix(1500))")
        simulator.stop()
        let recorded = try H2SendTests.recorded(dir).map(\.token)
        let rest = tokens.count - alreadyAccepted
        #expect(recorded.count == rest && Set(recorded).count == rest && Set(recorded).isSubset(of: tokens),
                "\(recorded.count) recorded (\(Set(recorded).count) distinct) for the \(rest) left")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.outcome == .complete && state.accepted == tokens.count && state.failures.isEmpty)
    }

    // MARK: - No retry faster than its backoff

    /// 429 on every request with `retry-after: 0` (or -5): each notification
    /// goes again no sooner than its backoff (`retry-after` is a floor, not
    /// an order), so in the time the send ran each reached the server at most
    /// once more per backoff step that fits (counting every wait at its
    /// shortest); the outage limit ends the send, 69, with nothing final.
    @Test(.timeLimit(.minutes(2)), arguments: [Behaviour.throttledRetryAfterZero, .throttledRetryAfterNegative])
    func aRetryAfterOfZeroDoesNotShortenTheBackoff(_ behaviour: Behaviour) throws {
        let dir = TemporaryDirectory("h2x-retry-after")
        let count = 20
        _ = try H2SendTests.plan(count: count, in: dir)
        let server = try HostileHTTP2Server(behaviour)
        defer { server.stop() }
        let started = Date()
        let run = try Self.send(dir, port: server.port, ["--connections", "1", "--answer-timeout", "2", "--outage-limit", "5"])
        let status = run.wait(timeout: 60)
        let seconds = Date().timeIntervalSince(started)
        if status == nil { run.kill9() }
        server.stop()
        #expect(status == 69, "\(behaviour): \(status.map(String.init) ?? "still running after 60 s") \(run.stderr.suffix(2000))")
        let bound = count * Self.mostSends(within: seconds)
        #expect(server.requests <= bound, "\(behaviour): \(server.requests) requests for \(count) notifications in \(String(format: "%.1f", seconds)) s (at most \(bound))")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.isEmpty && state.doneCount == 0 && state.outcome == .gaveUp, "\(behaviour): \(state.failures.count) failed, \(state.doneCount) final")
    }

    /// How often one notification refused again and again can be sent in
    /// `seconds`: the first time, then once per retry whose shortest backoff
    /// (``RetryBackoff/shortestSeconds(retries:)``), added to those before
    /// it, still fits.
    static func mostSends(within seconds: Double) -> Int {
        var sends = 1, waited = 0.0
        while true {
            waited += RetryBackoff.shortestSeconds(retries: sends)
            if waited > seconds { return sends }
            sends += 1
        }
    }

    /// `send --resume journal` against the simulator: 0, and each token in its record once.
    static func resumeDeliversEachOnce(_ dir: TemporaryDirectory, tokens: [String]) throws {
        try resumeDeliversTheRestOnce(dir, tokens: tokens, alreadyAccepted: 0)
    }

    // MARK: - The server's words

    @Test(.timeLimit(.minutes(2))) func trailersAfterA200KeepItAccepted() throws {
        let dir = TemporaryDirectory("h2x-trailers")
        _ = try H2SendTests.plan(count: 300, in: dir)
        let server = try HostileHTTP2Server(.okWithTrailers)
        defer { server.stop() }
        let run = try Self.send(dir, port: server.port, Self.quick)
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr.prefix(1500))")
        server.stop()
        #expect(server.requests == 300, "\(server.requests - 300) sent again")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.accepted == 300 && state.duplicatesRisked == 0 && state.resends == 0)
    }

    @Test(.timeLimit(.minutes(2)), arguments: [Behaviour.escapeReasonSometimes, .longReasonSometimes])
    func aReasonIsAShortIdentifierOrANote(_ behaviour: Behaviour) throws {
        let dir = TemporaryDirectory("h2x-reason")
        _ = try H2SendTests.plan(count: 300, in: dir)
        let server = try HostileHTTP2Server(behaviour)
        defer { server.stop() }
        let run = try Self.send(dir, port: server.port, ["--connections", "1"] + Self.quick)
        #expect(run.wait(timeout: 60) == 0, "\(behaviour): \(run.stderr.prefix(1500))")
        server.stop()
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.count == 60 && state.accepted == 240, "\(behaviour): \(state.failures.count) failed")
        for f in state.failures {
            let reason = f.cause.journaledReason ?? ""
            #expect(reason.hasPrefix("(a reason of ") && reason.utf8.allSatisfy { (0x20...0x7E).contains($0) }, "\(behaviour): \(reason.prefix(80))")
        }
        let stderr = run.stderr
        #expect(!stderr.utf8.contains(0x1B) && !stderr.utf8.contains(0x07), "\(behaviour): a control character reached the terminal")
        #expect(stderr.utf8.count < 100_000, "\(behaviour): \(stderr.utf8.count) bytes of standard error")
        let journalBytes = try FileManager.default.attributesOfItem(atPath: dir.file("journal/journal.log"))[.size] as? Int ?? 0
        #expect(journalBytes < 200_000, "\(behaviour): a journal of \(journalBytes) bytes")
    }

    @Test(.timeLimit(.minutes(2))) func aFutureUnregisteredTimeIsClampedToTheAnswer() throws {
        let dir = TemporaryDirectory("h2x-future")
        let tokens = try H2SendTests.plan(count: 50, in: dir)
        let server = try HostileHTTP2Server(.futureUnregistered)
        defer { server.stop() }
        let before = UInt32(Date().timeIntervalSince1970)
        let run = try Self.send(dir, port: server.port, ["--feedback-store", "store.ndjson"] + Self.quick)
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr.prefix(1500))")
        let after = UInt32(Date().timeIntervalSince1970) + 1
        let store = try FeedbackStore.load(path: dir.file("store.ndjson"))
        #expect(store.count == tokens.count)
        #expect(store.entries.values.allSatisfy { (before...after).contains($0) }, "\(store.entries.values.max() ?? 0)")
    }
}
