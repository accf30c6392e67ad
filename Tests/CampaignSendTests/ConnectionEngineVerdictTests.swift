import Foundation
import Testing
import CampaignIO
import CampaignTLS
import CampaignTestSupport
import PlanStream
@testable import SendJournal
@testable import GatewayClient
@testable import SendEngine

// Only the engine closes a link: a protocol returns a verdict about its
// connection, and the engine lets the protocol go of it, closes the link,
// and does what the protocol says comes before the next dial. Driven by a
// scripted protocol over the in-memory links and the test clock of
// ConnectionEngineClockTests.swift.

/// A protocol whose every turn's timers return the next verdict of a script
/// (one turn per connection for a verdict that ends it), and that records
/// what the engine asked of it.
final class ScriptedWire: WireConnection {
    enum Call: Equatable { case opened, closing, closed, lost, lostSilently, end }

    private let shared: SendShared
    private var verdicts: [WireVerdict]
    private let afterClose: [AfterClose]
    private var closes = 0
    private(set) var calls: [Call] = []

    init(shared: SendShared, verdicts: [WireVerdict], afterClose: [AfterClose] = []) {
        (self.shared, self.verdicts, self.afterClose) = (shared, verdicts, afterClose)
    }

    var hasWork: Bool { !verdicts.isEmpty }
    var nextRetryDue: UInt64? { nil }
    func beginTurn() -> Bool { !verdicts.isEmpty && !shared.isStopping }
    func opened(_ link: ConnectionLink) -> Bool { calls.append(.opened); return true }
    func frame() -> WireVerdict { .keep }
    var moreCanJoin: Bool { false }
    var watchesQueue: Bool { false }
    var nextWakeUp: UInt64? { nil }
    func waited(since: UInt64) {}
    func received(_ bytes: ArraySlice<UInt8>) -> WireVerdict { .keep }
    func lost() { calls.append(.lost) }
    func lostSilently() { calls.append(.lostSilently) }
    func wroteAll() -> Bool { true }
    func checkTimers() -> WireVerdict { verdicts.isEmpty ? .keep : verdicts.removeFirst() }
    func closing() { calls.append(.closing) }
    func closed() -> AfterClose {
        calls.append(.closed)
        defer { closes += 1 }
        return closes < afterClose.count ? afterClose[closes] : .dial
    }
    func end() -> Bool { calls.append(.end); return true }
}

/// A protocol with nothing in flight that goes on until a take tells it no
/// work will come: its second turn finds the queue closed (as when another
/// connection took the last frame).
final class EndLearningWire: WireConnection {
    private let queue: WorkQueue
    weak var engine: ConnectionEngine?
    private var turns = 0

    init(queue: WorkQueue) { self.queue = queue }

    private var endKnown: Bool { engine?.inputFinished ?? true }
    var hasWork: Bool { !endKnown }
    var nextRetryDue: UInt64? { nil }
    func beginTurn() -> Bool { !endKnown }
    func opened(_ link: ConnectionLink) -> Bool { true }
    func frame() -> WireVerdict {
        turns += 1
        if turns == 2, let engine {
            queue.close()
            var out: [UInt8] = []
            _ = engine.take(maxBytes: 1 << 16, maxFrames: 1, into: &out) { _, _ in }
        }
        return .keep
    }
    var moreCanJoin: Bool { false }
    var watchesQueue: Bool { !endKnown }
    var nextWakeUp: UInt64? { nil }
    func waited(since: UInt64) {}
    func received(_ bytes: ArraySlice<UInt8>) -> WireVerdict { .keep }
    func lost() {}
    func lostSilently() {}
    func wroteAll() -> Bool { true }
    func checkTimers() -> WireVerdict { .keep }
    func closing() {}
    func closed() -> AfterClose { .dial }
    func end() -> Bool { true }
}

/// One engine over in-memory links running a ``ScriptedWire``.
final class ScriptedEngineRun: @unchecked Sendable {
    let dir = TemporaryDirectory("engine-verdict")
    let clock = TestClock()
    let shared: SendShared
    let dialer: InMemoryDialer
    let wire: ScriptedWire
    let engine: ConnectionEngine
    let queue: WorkQueue
    private let lines = Locked<[String]>([])
    var log: [String] { lines.value }

    init(verdicts: [WireVerdict], afterClose: [AfterClose] = []) throws {
        let settings = SendSettings(gatewayHost: "api.push.test", gatewayPort: 443, certificate: "")
        let header = PlanHeader(campaign: "verdicts", wire: .http2, expiry: 0, priority: nil, maxPayload: 4096, shards: 1, created: 1)
        let journal = try Journal.create(directory: dir.file("journal"), settings: settings, planHeader: header.json)
        let lines = self.lines
        shared = try SendShared(journal: journal, context: TestCertificates.clientContext(), cancellation: CancellationPipe(), workers: 1,
                                maxConnectAttempts: 8, clock: clock, logger: { line in lines.update { $0.append(line) } })
        queue = try WorkQueue(capacity: 16)
        shared.attach(queues: [queue])
        if !verdicts.isEmpty { queue.close() }
        dialer = InMemoryDialer(clock: clock, shared: shared) { _ in .acceptAll }
        engine = ConnectionEngine(index: 0, queue: queue, shared: shared, settings: settings, shards: 1, dialer: dialer)
        wire = ScriptedWire(shared: shared, verdicts: verdicts, afterClose: afterClose)
    }

    /// Runs the engine with `wire` (the ``ScriptedWire`` by default) to its
    /// end on a thread of its own, within 10 s of real time.
    func run(_ other: (any WireConnection)? = nil) {
        let ended = DispatchSemaphore(value: 0)
        let box = UncheckedBox(other ?? wire)
        Thread { self.engine.run(box.value); ended.signal() }.start()
        if ended.wait(timeout: .now() + 10) == .timedOut {
            Issue.record("the engine did not end within 10 s of real time")
            shared.cancellation.cancel()
            shared.requestStop()
            _ = ended.wait(timeout: .now() + 10)
        }
    }
}

@Suite struct ConnectionEngineVerdictTests {
    /// A turn whose take learns that the queue is closed and empty does not
    /// then wait on a link with nothing in flight: the loop ends at once
    /// (it waited a second, and a rate-limited send of four connections
    /// idled a second after its last answer).
    @Test func aConnectionThatLearnsTheEndDoesNotWaitBeforeEnding() throws {
        let run = try ScriptedEngineRun(verdicts: [])
        let wire = EndLearningWire(queue: run.queue)
        wire.engine = run.engine
        run.run(wire)
        #expect(run.engine.inputFinished)
        #expect(run.dialer.connects == 1)
        #expect(run.clock.elapsedSeconds < 0.5, "\(run.clock.elapsedSeconds) s of test-clock time")
    }

    /// `.close`: the protocol lets go of the connection, the link closes
    /// cleanly (the peer reads every byte first), then the protocol says what
    /// comes before the next dial. At the loop's end the protocol says
    /// whether the last may close cleanly, then lets go of it.
    @Test func aCloseVerdictClosesTheLinkCleanlyAfterTheProtocolLetsGo() throws {
        let run = try ScriptedEngineRun(verdicts: [.close, .keep])
        run.run()

        #expect(run.dialer.connects == 2)
        #expect(run.dialer.record.endings == [1: .closedCleanly, 2: .closedCleanly])
        #expect(run.wire.calls == [.opened, .closing, .closed, .opened, .end, .closing])
        #expect(run.shared.failureReason == nil)
    }

    /// `.lost`: aborted, with no word of silence; what the protocol asks
    /// for after the close happens before the next dial: the dialer's
    /// growing pause, or a pause of its own on the send's clock.
    @Test func aLostVerdictAbortsAndThePauseItAsksForComesBeforeTheNextDial() throws {
        let run = try ScriptedEngineRun(verdicts: [.lost, .lost, .lost, .close], afterClose: [.backOff, .pause(seconds: 7), .dial])
        run.run()

        #expect(run.dialer.connects == 4)
        #expect(run.dialer.record.endings == [1: .aborted, 2: .aborted, 3: .aborted, 4: .closedCleanly])
        #expect(run.dialer.backoffs == 1, "one fruitless connection: one growing pause")
        let at = run.dialer.connectedAt.map { Double($0) / 1e9 }
        #expect(at[1] - at[0] >= InMemoryDialer.backoffSeconds)
        #expect(at[2] - at[1] >= 7, "the protocol's own pause, on the test clock")
        #expect(at[3] - at[2] < 1, "then the next at once")
        #expect(!run.wire.calls.contains(.lostSilently))
        #expect(run.shared.failureReason == nil, "lost connections alone do not make a gateway silent")
    }

    /// `.silent`: the protocol hears of it (as lost, blaming nothing), the
    /// link is aborted and the engine says why; three in a row end the send
    /// as unreachable, and an answer between them (`.close`) starts the count again.
    @Test func threeSilentVerdictsInARowEndTheSendAndAnAnswerBetweenStartsAgain() throws {
        let answered = try ScriptedEngineRun(verdicts: [.silent("quiet"), .silent("quiet"), .close, .silent("quiet"), .silent("quiet"), .close])
        answered.run()
        #expect(answered.dialer.connects == 6)
        #expect(answered.shared.failureReason == nil)
        #expect(answered.wire.calls.filter { $0 == .lostSilently }.count == 4)
        #expect(answered.log.filter { $0.contains("quiet; reconnecting") }.count == 4)

        let silent = try ScriptedEngineRun(verdicts: [.silent("quiet"), .silent("quiet"), .silent("quiet"), .close])
        silent.run()
        #expect(silent.dialer.connects == 3, "the third silence ends the send: no fourth connection")
        #expect(silent.dialer.record.endings == [1: .aborted, 2: .aborted, 3: .aborted])
        if case .unreachable? = silent.shared.failureReason {} else {
            Issue.record("the send should end as unreachable, not \(String(describing: silent.shared.failureReason))")
        }
    }
}
