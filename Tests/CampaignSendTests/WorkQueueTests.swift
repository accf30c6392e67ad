import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignPlan
import PlanStream
import CampaignTLS
import CampaignTestSupport
import GatewaySimulator
@testable import CampaignSend
@testable import SendJournal
@testable import ByteStreams
@testable import SendEngine

/// Hands out the plan's bytes up to `gate`, then waits on `open` before the rest:
/// an upstream planner that has stalled.
final class GatedSource: ByteSource, @unchecked Sendable {
    let name = "gated plan"
    private let bytes: [UInt8]
    private let gate: Int
    private var offset = 0
    private let open: DispatchSemaphore
    private(set) var waited = false

    init(_ bytes: [UInt8], gate: Int, open: DispatchSemaphore) {
        self.bytes = bytes
        self.gate = gate
        self.open = open
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> Int {
        if offset == gate, !waited {
            waited = true
            open.wait()
        }
        let end = offset < gate ? gate : bytes.count
        let n = min(buffer.count, end - offset)
        guard n > 0 else { return 0 }
        bytes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
        offset += n
        return n
    }
}

/// A value shared between a test and a thread it starts.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.lock(); defer { lock.unlock() }; return stored }
    func set(_ value: Value) { lock.lock(); stored = value; lock.unlock() }
    func update(_ body: (inout Value) -> Void) { lock.lock(); body(&stored); lock.unlock() }
}

@Suite(.ownThreads) struct WorkQueueTests {
    func frame(_ seq: UInt64, _ length: Int) -> (inout [UInt8]) -> Void {
        { bytes in bytes += [UInt8](repeating: UInt8(truncatingIfNeeded: seq), count: length) }
    }

    @Test func batchesComeOutInOrderWithTheirOwnBytes() throws {
        let queue = try WorkQueue(capacity: 64)
        let cancellation = try CancellationPipe()
        var batch = FrameBatch()
        var expected: [(UInt64, Int)] = []
        for seq in 1...300 as ClosedRange<UInt64> {
            let length = 1 + Int(seq % 7)
            batch.append(seq: seq, shard: Int32(seq % 5), ordinal: Int32(seq), encode: frame(seq, length))
            expected.append((seq, length))
            if batch.frames.count == 10 {
                // Room is made before a push that would wait: this test has one thread.
                #expect(queue.push(&batch, cancellation: cancellation))
                #expect(batch.isEmpty)
                if seq % 60 == 0 { try drain(queue, into: &expected) }
            }
        }
        #expect(queue.push(&batch, cancellation: cancellation))
        queue.close()
        try drain(queue, into: &expected)
        #expect(expected.isEmpty)
        #expect(queue.state.finished)
    }

    /// Takes everything queued, checking each frame against the head of `expected`.
    func drain(_ queue: WorkQueue, into expected: inout [(UInt64, Int)]) throws {
        while true {
            var out: [UInt8] = [0xEE]
            var taken: [(QueuedFrame, Int)] = []
            let (n, _) = queue.take(maxBytes: 40, maxFrames: 1000, into: &out) { taken.append(($0, $1)) }
            if n == 0 { return }
            for (frame, offset) in taken {
                let (seq, length) = try #require(expected.first)
                expected.removeFirst()
                #expect(frame.seq == seq && frame.count == length && frame.ordinal == Int32(seq))
                #expect(out[offset..<(offset + length)].allSatisfy { $0 == UInt8(truncatingIfNeeded: seq) })
            }
        }
    }

    @Test func aFullQueueHoldsTheReaderUntilTheConnectionTakes() throws {
        let queue = try WorkQueue(capacity: 16)
        let cancellation = try CancellationPipe()
        let pushed = Locked(0)
        let producer = Thread {
            var batch = FrameBatch()
            for seq in 1...200 as ClosedRange<UInt64> {
                batch.append(seq: seq, shard: 0, ordinal: Int32(seq)) { $0.append(UInt8(truncatingIfNeeded: seq)) }
                if batch.frames.count == 8 || seq == 200 {
                    _ = queue.push(&batch, cancellation: cancellation)
                    pushed.update { $0 += 1 }
                }
            }
            queue.close()
        }
        producer.start()
        var seen: [UInt64] = []
        while true {
            var out: [UInt8] = []
            let (n, finished) = queue.take(maxBytes: 1 << 20, maxFrames: 5, into: &out) { frame, _ in seen.append(frame.seq) }
            if finished { break }
            if n == 0 {
                // Nothing queued yet: sleep on the doorbell as a connection does.
                if queue.prepareToSleep() {
                    var fd = pollfd(fd: queue.doorbell.pollDescriptor, events: Int16(POLLIN), revents: 0)
                    _ = poll(&fd, 1, 1000)
                }
            }
        }
        #expect(seen == Array(1...200))
        #expect(pushed.value == 25)
    }

    /// A plan that arrives in two parts, with a pause between them: what came
    /// before the pause is sent during it, not held back for a fuller batch.
    @Test func framesReadBeforeAStalledUpstreamAreSentDuringTheStall() throws {
        let harness = try SendHarness(faults: FaultPlan())
        let tokens = try makePlan(count: 3000, in: harness.dir)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: harness.dir.file("plan.ndjson"))))
        // The gate falls after the 100th record (the header is line 1).
        var newlines = 0
        let gate = bytes.firstIndex { b in
            if b == 0x0A { newlines += 1 }
            return newlines == 101
        }! + 1
        let open = DispatchSemaphore(value: 0)
        let source = GatedSource(bytes, gate: gate, open: open)
        nonisolated(unsafe) let plan = try PlanReader(source: source, path: "gated plan")
        let s = harness.settings(connections: 2)
        let journal = try Journal.create(directory: harness.dir.file("journal"), settings: s, planHeader: plan.header.json)
        let sender = try Sender(settings: s, journal: journal, context: TestCertificates.clientContext(), cancellation: CancellationPipe())
        let outcome = Locked<SendReport?>(nil)
        let ended = DispatchSemaphore(value: 0)
        let sending = Thread {
            outcome.set(try? sender.run(plan: plan))
            ended.signal()
        }
        sending.start()
        let during = harness.simulator.waitForStatistics(timeout: 20) { $0.accepted >= 100 }
        open.signal()
        #expect(during, "the 100 records read before the stall did not reach the gateway during it")
        #expect(ended.wait(timeout: .now() + 60) == .success)
        #expect(outcome.value?.outcome == .complete)
        #expect(outcome.value?.accepted == tokens.count)
        #expect(source.waited)
        let recorded = try harness.recordedTokens()
        #expect(Set(recorded) == Set(tokens) && recorded.count == tokens.count)
    }
}
