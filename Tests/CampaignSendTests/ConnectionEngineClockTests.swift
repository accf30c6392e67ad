#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import APNSWire
import CampaignHTTP2
import CampaignIO
import LocalTime
import CampaignTLS
import CampaignTestSupport
import PlanStream
@testable import CampaignSend
@testable import SendJournal
@testable import GatewayClient
@testable import SendEngine
@testable import H2Provider

// The connection engine and the HTTP/2 plug-in, driven without a socket
// and without waiting: a test clock whose time moves only when the engine
// would wait, and an in-memory HTTP/2 server (nghttp2 in the server role)
// that answers by a script. A 30 s answer timeout passes in microseconds.
//
// (These live here rather than in CampaignTestSupport: the engine's seams,
// `SendClock`, `ConnectionLink` and `LinkDialer`, are internal to CampaignSend.)

// MARK: - The test clock

/// A ``SendClock`` whose time moves only when the engine would wait: a poll
/// first looks at the real descriptors (the stop, the halt and the queue's
/// doorbell are real pipes) and at the in-memory links without waiting; when
/// nothing is ready it moves time on by the poll's timeout and returns at
/// once. A sleep moves time on by its duration.
final class TestClock: SendClock, @unchecked Sendable {
    private let lock = Lock()
    private var nanoseconds: UInt64 = 1_000_000_000
    private let start: UInt64 = 1_000_000_000
    /// The wall clock when the test clock starts (a fixed moment: 2023-11-14).
    static let wallStart = 1_700_000_000.0
    /// Links the engine may poll, by their descriptor: their readiness is theirs to say.
    private var links: [Int32: InMemoryH2Peer] = [:]

    var now: UInt64 { lock.withLock { nanoseconds } }
    var wallSeconds: Double { Self.wallStart + Double(now - start) / 1e9 }
    /// Test-clock seconds since the clock was made.
    var elapsedSeconds: Double { Double(now - start) / 1e9 }

    func advance(nanoseconds delta: UInt64) { lock.withLock { nanoseconds += delta } }

    func register(_ peer: InMemoryH2Peer) { lock.withLock { links[peer.pollDescriptor] = peer } }

    private func link(for fd: Int32) -> InMemoryH2Peer? { lock.withLock { links[fd] } }

    func poll(_ fds: inout [pollfd], count: Int, milliseconds: Int32) {
        for i in 0..<count { fds[i].revents = 0 }
        _ = Glibc.poll(&fds, nfds_t(count), 0)
        var ready = false
        for i in 0..<count {
            if fds[i].fd >= 0, let peer = link(for: fds[i].fd) {
                // An in-memory link is always writable, and readable when the peer has bytes for the client.
                var events: Int16 = 0
                if fds[i].events & Int16(POLLIN) != 0 && peer.hasBytesForClient { events |= Int16(POLLIN) }
                if fds[i].events & Int16(POLLOUT) != 0 { events |= Int16(POLLOUT) }
                fds[i].revents = events
            }
            ready = ready || fds[i].revents != 0
        }
        if !ready { advance(nanoseconds: UInt64(max(0, milliseconds)) * 1_000_000) }
    }

    func sleep(seconds: Double, cancellation: CancellationPipe?) -> Bool {
        if cancellation?.isCancelled == true { return false }
        advance(nanoseconds: UInt64(max(0, seconds) * 1e9))
        return true
    }
}

// MARK: - The in-memory HTTP/2 peer

/// What a scripted server answers to one request.
enum PeerAnswer {
    case status(Int, body: String = "")
    /// No answer at all (the stream stays open).
    case silence

    static let accepted = PeerAnswer.status(200)
    static func unregistered(atMilliseconds ms: Int64) -> PeerAnswer {
        .status(410, body: #"{"reason":"Unregistered","timestamp":\#(ms)}"#)
    }
}

/// How one connection's server behaves.
struct PeerScript {
    /// The answer to the `n`th request (from 0) on this connection, for device token `token` (hex).
    var answer: (_ token: String, _ n: Int) -> PeerAnswer = { _, _ in .accepted }
    /// After answering this many requests, a GOAWAY naming the last answered
    /// stream; later requests are left unanswered (the client learns they were never processed).
    var goAwayAfterAnswers: Int? = nil
    /// Called (on the engine's thread, in the write) once this many requests have arrived.
    var whenReceived: (count: Int, action: () -> Void)? = nil

    static var acceptAll: PeerScript { PeerScript() }
    static var silent: PeerScript { PeerScript(answer: { _, _ in .silence }) }
}

/// What every connection's server saw and did, in order, for the assertions.
final class PeerRecord: @unchecked Sendable {
    struct Request: Equatable { var connection: Int; var stream: Int32; var token: String }
    struct Answer: Equatable { var connection: Int; var stream: Int32; var token: String; var status: Int }
    enum Ending: Equatable { case open, closedCleanly, aborted }

    private let lock = Lock()
    private var _requests: [Request] = []
    private var _answers: [Answer] = []
    private var _goAways: [(connection: Int, lastStream: Int32)] = []
    private var _endings: [Int: Ending] = [:]
    private var _violations: [String] = []

    var requests: [Request] { lock.withLock { _requests } }
    var answers: [Answer] { lock.withLock { _answers } }
    var goAways: [(connection: Int, lastStream: Int32)] { lock.withLock { _goAways } }
    /// How each connection (from 1) ended.
    var endings: [Int: Ending] { lock.withLock { _endings } }
    var violations: [String] { lock.withLock { _violations } }

    func requests(on connection: Int) -> [Request] { requests.filter { $0.connection == connection } }

    func received(_ r: Request) { lock.withLock { _requests.append(r) } }
    func answered(_ a: Answer) { lock.withLock { _answers.append(a) } }
    func wentAway(_ connection: Int, last: Int32) { lock.withLock { _goAways.append((connection, last)) } }
    func ended(_ connection: Int, _ how: Ending) { lock.withLock { _endings[connection] = how } }
    func violation(_ what: String) { lock.withLock { _violations.append(what) } }
}

/// One connection's server, in memory: what the client writes goes into an
/// `H2Session(role: .server)`; its requests are answered by a ``PeerScript``;
/// what the session then has to send is what the client reads.
final class InMemoryH2Peer: ConnectionLink {
    let connection: Int
    private let script: PeerScript
    private let record: PeerRecord
    private let session: H2Session
    /// A real descriptor for the engine's poll; the test clock asks this peer whether it is ready.
    private let descriptor: CancellationPipe
    private var toClient: [UInt8] = []
    private var readOffset = 0
    private var receivedCount = 0
    private var answeredCount = 0
    private var goneAway = false
    private var peerClosed = false
    private var ending = PeerRecord.Ending.open

    init(connection: Int, script: PeerScript, record: PeerRecord) throws {
        self.connection = connection
        self.script = script
        self.record = record
        descriptor = try CancellationPipe()
        // Apple's SETTINGS, as the simulator sends them.
        session = try H2Session(role: .server, settings: [(id: 3, value: 1000), (id: 4, value: 65_535), (id: 5, value: 16_384), (id: 6, value: 8_000)])
        try session.send(into: &toClient)
    }

    var pollDescriptor: Int32 { descriptor.pollDescriptor }
    var negotiatedProtocol: String? { "h2" }
    var hasBytesForClient: Bool { readOffset < toClient.count || (peerClosed && ending == .open) }

    func tryRead(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> TLSConnection.IOResult {
        let available = toClient.count - readOffset
        guard available > 0 else { return peerClosed ? .closed : .wantRead }
        let n = min(available, buffer.count)
        toClient.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + readOffset, byteCount: n) }
        readOffset += n
        if readOffset == toClient.count { toClient.removeAll(keepingCapacity: true); readOffset = 0 }
        return .bytes(n)
    }

    func writeAvailable(_ bytes: [UInt8], from offset: inout Int) throws(TLSError) -> Bool {
        guard ending == .open, !peerClosed else { return false }
        let chunk = bytes[offset...]
        offset = bytes.count
        do {
            try chunk.withUnsafeBytes { raw in try session.receive(raw) }
        } catch {
            record.violation("connection \(connection): \(error)")
            peerClosed = true
        }
        for event in session.drainEvents() {
            guard case .message(let stream, let headers, _) = event else { continue }
            let path = headers.first { $0.name == ":path" }?.value ?? ""
            let token = String(path.split(separator: "/").last ?? "")
            record.received(.init(connection: connection, stream: stream, token: token))
            let n = receivedCount
            receivedCount += 1
            if let (count, action) = script.whenReceived, receivedCount == count { action() }
            guard !goneAway, case .status(let status, let body) = script.answer(token, n) else { continue }
            var fields = [H2Session.Header(":status", String(status))]
            if !body.isEmpty { fields.append(.init("content-type", "application/json")) }
            do throws(H2Error) { try session.submitResponse(stream: stream, headers: fields, body: Array(body.utf8)) } catch {
                record.violation("connection \(connection): cannot answer stream \(stream): \(error)")
                continue
            }
            record.answered(.init(connection: connection, stream: stream, token: token, status: status))
            answeredCount += 1
            if let k = script.goAwayAfterAnswers, answeredCount == k {
                session.submitGoAway(lastStreamID: stream)
                record.wentAway(connection, last: stream)
                goneAway = true
            }
        }
        do throws(H2Error) { try session.send(into: &toClient) } catch { record.violation("connection \(connection): \(error)") }
        return true
    }

    func close() { end(.closedCleanly) }
    func abort() { end(.aborted) }

    private func end(_ how: PeerRecord.Ending) {
        guard ending == .open else { return }
        ending = how
        record.ended(connection, how)
    }
}

/// Opens in-memory peers, one per connection, each with the script its
/// connection number (from 1) gets; counts connects and backoffs. A
/// fruitless connection's backoff passes on the test clock.
final class InMemoryDialer: LinkDialer {
    let clock: TestClock
    let shared: SendShared
    let record = PeerRecord()
    private let script: (Int) -> PeerScript
    private(set) var connects = 0
    private(set) var backoffs = 0
    /// Test-clock time of each connect.
    private(set) var connectedAt: [UInt64] = []
    static let backoffSeconds = 1.0

    init(clock: TestClock, shared: SendShared, script: @escaping (Int) -> PeerScript) {
        self.clock = clock
        self.shared = shared
        self.script = script
    }

    func connect() -> ConnectionLink? {
        guard !shared.halt.isCancelled else { return nil }   // as a dial the stop cancels
        connects += 1
        connectedAt.append(clock.now)
        guard let peer = try? InMemoryH2Peer(connection: connects, script: script(connects), record: record) else {
            record.violation("cannot make peer \(connects)")
            return nil
        }
        clock.register(peer)
        shared.connected()
        return peer
    }

    func openSpare() {}
    func dropSpare() {}
    func productive() {}
    func backOffAfterFruitlessConnection() {
        backoffs += 1
        _ = clock.sleep(seconds: Self.backoffSeconds, cancellation: shared.halt)
    }
}

// MARK: - A send of one connection

/// One engine with the HTTP/2 plug-in over in-memory peers: `count`
/// notifications queued (and the queue closed), run on a thread of its own
/// with a real-time bound.
final class ClockedH2Send {
    let dir = TemporaryDirectory("engine-clock")
    let clock = TestClock()
    let settings: SendSettings
    let journal: Journal
    let shared: SendShared
    let queue: WorkQueue
    let dialer: InMemoryDialer
    let engine: ConnectionEngine
    let worker: H2ConnectionWorker
    /// Device tokens by plan ordinal, as hex.
    let tokens: [String]
    private let log = Locked<[String]>([])
    var logLines: [String] { log.value }

    /// - Parameter closeQueue: whether the queue is closed before the run
    ///   (the whole plan read); else the test closes it (``queue``).
    /// - Parameter schedule: a scheduled plan's rule, every record's moment being the test clock's start.
    init(count: Int, closeQueue: Bool = true, schedule: DeliverySchedule? = nil, configure: (inout SendSettings) -> Void = { _ in },
         script: @escaping (Int) -> PeerScript) throws {
        var s = SendSettings(gatewayHost: "api.push.test", gatewayPort: 443, certificate: "")
        s.connections = 1
        configure(&s)
        settings = s
        var header = PlanHeader(campaign: "clock", wire: .http2, expiry: 0, priority: nil, maxPayload: 4096, shards: 1, created: 1)
        header.http2 = .init(topic: "com.example.campaign", pushType: "alert", collapseId: nil)
        journal = try Journal.create(directory: dir.file("journal"), settings: s, planHeader: header.json)
        let log = self.log
        shared = try SendShared(journal: journal, context: TestCertificates.clientContext(), cancellation: CancellationPipe(), workers: 1,
                                maxConnectAttempts: 8, clock: clock, logger: { line in log.update { $0.append(line) } })
        queue = try WorkQueue(capacity: max(count, 16))
        shared.attach(queues: [queue])
        var tokens: [String] = []
        var batch = FrameBatch()
        for i in 0..<count {
            let token = (0..<32).map { UInt8(truncatingIfNeeded: i &* 31 &+ $0 &+ 1) }
            tokens.append(token.map { String(format: "%02x", $0) }.joined())
            let payload = Array(#"{"aps":{"alert":"number \#(i)"}}"#.utf8)
            batch.append(seq: UInt64(i + 1), shard: 0, ordinal: Int32(i), moment: schedule == nil ? 0 : Int64(TestClock.wallStart)) { bytes in
                H2QueuedRequest.append(token: token, collapseId: [UInt8](), payload: payload, to: &bytes)
            }
        }
        self.tokens = tokens
        #expect(queue.push(&batch, cancellation: shared.cancellation))
        if closeQueue { queue.close() }
        dialer = InMemoryDialer(clock: clock, shared: shared, script: script)
        let release = schedule.map { WireRelease(rule: ReleaseRule(schedule: $0), zones: ZoneRegistry(), token: { Array($0[H2QueuedRequest.tokenRange($0)]) }) }
        engine = ConnectionEngine(index: 0, queue: queue, shared: shared, settings: s, shards: 1, release: release, dialer: dialer)
        worker = H2ConnectionWorker(engine: engine, fields: RequestFields(header: header), tokens: nil, malformed: MalformedRefusals())
    }

    /// The bound on real time for one run: far above what a run takes (a
    /// few milliseconds), far below what its test-clock time would take.
    static let realTimeBound = 10.0

    /// Runs the engine until it ends; the real seconds it took. Past
    /// ``realTimeBound`` the send is cancelled and the test fails.
    @discardableResult
    func run() -> Double {
        let started = Deadline.now()
        let ended = DispatchSemaphore(value: 0)
        let worker = self.worker
        let thread = Thread { worker.run(); ended.signal() }
        thread.start()
        if ended.wait(timeout: .now() + Self.realTimeBound) == .timedOut {
            Issue.record("the engine did not end within \(Self.realTimeBound) s of real time (test clock at \(clock.elapsedSeconds) s)")
            shared.cancellation.cancel()
            shared.requestStop()
            _ = ended.wait(timeout: .now() + Self.realTimeBound)
        }
        return Double(Deadline.now().nanoseconds - started.nanoseconds) / 1e9
    }

    /// What the journal holds now.
    func journalState() throws -> JournalState {
        try journal.flush()
        return try Journal.read(directory: dir.file("journal"))
    }
}

// MARK: - The tests

@Suite struct ConnectionEngineClockTests {
    /// Real time a whole run may take: the engine never waits on the real clock.
    static let realSeconds = 1.0

    /// N notifications, every one answered 200: all accepted on the one
    /// connection, journaled as done, and nothing sent twice.
    @Test func everyNotificationAnsweredTwoHundredIsAcceptedOnOneConnection() throws {
        let send = try ClockedH2Send(count: 20) { _ in .acceptAll }
        let real = send.run()

        let report = send.shared.report
        #expect(report.accepted == 20)
        #expect(report.failed == 0 && report.resends == 0 && report.duplicatesRisked == 0)
        #expect(send.dialer.connects == 1)
        #expect(send.dialer.record.requests.map(\.token) == send.tokens, "each token once, in plan order")
        #expect(send.dialer.record.answers.count == 20)
        #expect(send.dialer.record.endings == [1: .closedCleanly], "nothing was left open, so the close is clean")
        #expect(send.dialer.record.violations.isEmpty)
        let journal = try send.journalState()
        #expect(journal.accepted == 20 && journal.doneCount == 20)
        #expect(journal.failures.isEmpty)
        #expect(send.shared.runState.since == nil, "the send was never stopped")
        #expect(send.clock.elapsedSeconds < 1, "answered at once: \(send.clock.elapsedSeconds) s of test-clock time")
        #expect(real < Self.realSeconds, "\(real) s of real time")
    }

    /// A final answer: 410 Unregistered for one token fails that
    /// notification for good and records the suppression with the server's
    /// timestamp; the others are accepted.
    @Test func aFourTenIsFinalAndRecordsTheSuppression() throws {
        let unregisteredMs: Int64 = 1_699_000_000_000
        var gone = ""
        let send = try ClockedH2Send(count: 8) { _ in
            PeerScript(answer: { token, _ in token == gone ? .unregistered(atMilliseconds: unregisteredMs) : .accepted })
        }
        gone = send.tokens[3]
        let real = send.run()

        let report = send.shared.report
        #expect(report.accepted == 7)
        #expect(report.failedByStatus == [410: 1])
        #expect(report.resends == 0 && report.duplicatesRisked == 0)
        var cursor = 0
        let suppressions = send.shared.suppressions(after: &cursor)
        #expect(suppressions.count == 1)
        #expect(suppressions.first.map { hex($0.0) } == gone)
        #expect(suppressions.first?.1 == UInt32(unregisteredMs / 1000))
        #expect(send.dialer.connects == 1)
        #expect(send.dialer.record.requests.filter { $0.token == gone }.count == 1, "a final answer is never sent again")
        let journal = try send.journalState()
        #expect(journal.doneCount == 8, "the refusal is final too")
        #expect(journal.failures.map(\.status) == [410])
        #expect(journal.failures.first?.ordinal == 3)
        #expect(journal.suppressions.first?.1 == UInt32(unregisteredMs / 1000))
        #expect(send.clock.elapsedSeconds < 1, "answered at once: \(send.clock.elapsedSeconds) s of test-clock time")
        #expect(real < Self.realSeconds, "\(real) s of real time")
    }

    /// A server that never answers: each connection is dropped once a
    /// request has waited the answer timeout (test-clock time) and the
    /// notifications go again on the next; the third silent connection in a
    /// row ends the send as unreachable. Nothing is accepted, and what was
    /// open is counted once as a possible duplicate.
    @Test func threeSilentConnectionsInARowEndTheSendAsUnreachable() throws {
        let send = try ClockedH2Send(count: 5) { _ in .silent }
        let timeout = send.settings.answerTimeoutSeconds
        let real = send.run()

        #expect(send.dialer.connects == 3)
        guard case .failed(.unreachable, _) = send.shared.runState else {
            Issue.record("the run state is \(send.shared.runState), not failed as unreachable")
            return
        }
        #expect(send.shared.isFinished)
        let report = send.shared.report
        #expect(report.accepted == 0 && report.failed == 0)
        #expect(report.duplicatesRisked == 5, "each open notification counted once, however many connections it was lost with")
        #expect(report.drops == 3)
        for connection in 1...3 {
            #expect(Set(send.dialer.record.requests(on: connection).map(\.token)) == Set(send.tokens),
                    "connection \(connection) got every notification again")
        }
        #expect(send.dialer.record.answers.isEmpty)
        #expect(send.dialer.record.endings == [1: .aborted, 2: .aborted, 3: .aborted])
        // Each connection lived at least the answer timeout of test-clock time, and not much longer.
        let at = send.dialer.connectedAt.map { Double($0) / 1e9 }
        for i in 1..<at.count {
            #expect(at[i] - at[i - 1] >= timeout && at[i] - at[i - 1] <= timeout + 3, "connection \(i) lived \(at[i] - at[i - 1]) s")
        }
        #expect(send.clock.elapsedSeconds >= 3 * timeout, "\(send.clock.elapsedSeconds) s of test-clock time")
        #expect(send.clock.elapsedSeconds <= 3 * (timeout + 3))
        let journal = try send.journalState()
        #expect(journal.doneCount == 0, "nothing is final: all of it is left for --resume")
        #expect(real < Self.realSeconds, "\(real) s of real time for \(send.clock.elapsedSeconds) s of test-clock time")
    }

    /// GOAWAY after k answers, naming the k-th stream: the server says it
    /// never processed the streams above it, so those go again on a new
    /// connection exactly once, without being counted as possible
    /// duplicates, and every notification is accepted once.
    @Test func afterAGoAwayWhatTheServerNeverProcessedGoesOnceOnTheNextConnection() throws {
        let k = 4
        let send = try ClockedH2Send(count: 10) { connection in
            connection == 1 ? PeerScript(goAwayAfterAnswers: k) : .acceptAll
        }
        let real = send.run()

        let record = send.dialer.record
        #expect(send.dialer.connects == 2)
        #expect(record.goAways.map { $0.lastStream } == [Int32(2 * k - 1)], "client streams are odd: the k-th is 2k-1")
        let first = record.requests(on: 1), second = record.requests(on: 2)
        #expect(first.map(\.token) == send.tokens, "every notification went on the first connection")
        // (In the order their jittered backoffs fall due.)
        #expect(second.map(\.token).sorted() == send.tokens[k...].sorted(), "only those above the last stream went again, once each")
        #expect(record.answers.filter { $0.status == 200 }.map(\.token).sorted() == send.tokens.sorted(), "each accepted exactly once")
        #expect(record.endings == [1: .closedCleanly, 2: .closedCleanly], "the first closed once its answers were in")
        let report = send.shared.report
        #expect(report.accepted == 10)
        #expect(report.duplicatesRisked == 0, "never processed: not a possible duplicate")
        #expect(report.resends == 10 - k)
        #expect(report.resentByKind == ["REFUSED_STREAM": 10 - k])
        #expect(try send.journalState().doneCount == 10)
        let at = send.dialer.connectedAt.map { Double($0) / 1e9 }
        #expect(at.count == 2 && at[1] - at[0] >= RetryBackoff.shortestSeconds(retries: 1, base: send.settings.retryBackoffSeconds),
                "the refused notifications waited out their backoff (test-clock time): \(at)")
        #expect(real < Self.realSeconds, "\(real) s of real time")
    }

    /// The same GOAWAY while the plan is still being read (the queue open
    /// and empty): with no connection, the engine waits for new frames or
    /// the refused notifications' backoff, whichever comes first, and that
    /// wait too passes on the test clock.
    @Test func aBackoffWithThePlanStillBeingReadPassesOnTheTestClock() throws {
        let k = 2
        var closeQueue: () -> Void = {}
        let send = try ClockedH2Send(count: 6, closeQueue: false) { connection in
            connection == 1 ? PeerScript(goAwayAfterAnswers: k) : PeerScript(whenReceived: (6 - k, { closeQueue() }))
        }
        closeQueue = { [queue = send.queue] in queue.close() }
        let real = send.run()

        #expect(send.dialer.connects == 2)
        #expect(send.dialer.record.requests(on: 2).map(\.token).sorted() == send.tokens[k...].sorted())
        #expect(send.shared.report.accepted == 6)
        #expect(send.shared.report.duplicatesRisked == 0)
        let at = send.dialer.connectedAt.map { Double($0) / 1e9 }
        #expect(at.count == 2 && at[1] - at[0] >= RetryBackoff.shortestSeconds(retries: 1, base: send.settings.retryBackoffSeconds),
                "the second connection waited for the refused notifications' backoff: \(at)")
        #expect(real < Self.realSeconds, "\(real) s of real time")
    }

    /// A stop while requests are unanswered: the engine waits for their
    /// answers for the stop grace (test-clock time), then ends leaving them
    /// pending, counted as possible duplicates, none final; no reconnect.
    @Test func aStopWithRequestsUnansweredEndsWithinTheGraceAndLeavesThemPending() throws {
        let stoppedAt = Locked<UInt64?>(nil)
        var stop: () -> Void = {}
        let send = try ClockedH2Send(count: 5) { _ in
            PeerScript(answer: { _, _ in .silence }, whenReceived: (5, { stop() }))
        }
        stop = { [shared = send.shared, clock = send.clock] in
            stoppedAt.set(clock.now)
            shared.requestStop()
        }
        let real = send.run()

        guard let stopped = stoppedAt.value else {
            Issue.record("the peer never received the five requests")
            return
        }
        let afterStop = Double(send.clock.now - stopped) / 1e9
        #expect(afterStop >= SendShared.stopGraceSeconds, "it waited the grace for answers: \(afterStop) s")
        #expect(afterStop <= SendShared.stopGraceSeconds + 1.5, "and ended within the grace and a poll: \(afterStop) s")
        guard case .stopping = send.shared.runState else {
            Issue.record("the run state is \(send.shared.runState), not stopping")
            return
        }
        #expect(send.shared.failureReason == nil)
        #expect(send.dialer.connects == 1, "a stop opens no new connection")
        let report = send.shared.report
        #expect(report.accepted == 0 && report.failed == 0)
        #expect(report.duplicatesRisked == 5, "sent and unanswered: possible duplicates")
        #expect(report.resends == 0)
        #expect(send.dialer.record.endings[1] != .open, "the connection was closed")
        let journal = try send.journalState()
        #expect(journal.doneCount == 0, "left pending for --resume, not final")
        #expect(journal.sentBelow[0] == 5, "the write-ahead says all five may have reached the server")
        #expect(real < Self.realSeconds, "\(real) s of real time")
    }
}

private func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
