import Foundation
import Synchronization
import Testing
import ByteStreams
import CampaignIO
import CampaignTestSupport

@Suite(.ownThreads) struct BatchPipelineTests {
    final class Numbers: @unchecked Sendable {
        var values: [Int] = []
    }

    final class Counter: @unchecked Sendable {
        var next = 0
        let end: Int
        init(end: Int) { self.end = end }

        /// Fills with the next 10 numbers; the last batch may be short.
        func fill(_ batch: Numbers) -> Bool {
            batch.values.removeAll()
            while batch.values.count < 10, next < end {
                batch.values.append(next)
                next += 1
            }
            return next < end
        }
    }

    @Test(arguments: [1, 2, 5])
    func handsOutEveryBatchInOrderWithFewBuffers(buffers: Int) {
        let counter = Counter(end: 1_005)
        let pipeline = BatchPipeline(batches: (0..<buffers).map { _ in Numbers() }) { counter.fill($0) }
        var seen: [Int] = []
        var batches = 0
        while let batch = pipeline.next() {
            seen += batch.values
            batches += 1
            pipeline.recycle(batch)
        }
        #expect(seen == Array(0..<1_005))
        #expect(batches == 101)
        #expect(pipeline.next() == nil)
    }

    @Test func aLaterStageSeesEveryBatchInOrderAndGivesThemBack() {
        let counter = Counter(end: 2_003)
        let first = BatchPipeline(batches: (0..<3).map { _ in Numbers() }) { counter.fill($0) }
        let second = BatchPipeline(after: first) { batch in batch.values = batch.values.map { $0 * 2 } }
        var seen: [Int] = []
        while let batch = second.next() {
            seen += batch.values
            second.recycle(batch)  // back to the first stage, to be filled again
        }
        #expect(seen == (0..<2_003).map { $0 * 2 })
        #expect(second.next() == nil)
    }

    @Test func stoppingALaterStageEndsBothThreads() {
        let freed = DispatchSemaphore(value: 0)
        do {
            let sentinel = Sentinel(freed)
            let first = BatchPipeline(batches: [Numbers(), Numbers()]) { batch in
                _ = sentinel
                batch.values = [1]
                return true  // would go on for ever
            }
            let second = BatchPipeline(after: first) { _ in }
            #expect(second.next()?.values == [1])
            second.stop()
        }
        #expect(freed.wait(timeout: .now() + 30) == .success, "the first stage's thread did not end")
    }

    /// Signals when freed: the filling closure holds it, the thread holds
    /// the pipeline, so it is freed only when the thread has ended.
    final class Sentinel: @unchecked Sendable {
        let freed: DispatchSemaphore
        init(_ freed: DispatchSemaphore) { self.freed = freed }
        deinit { freed.signal() }
    }

    @Test func aConsumerThatStopsEarlyEndsTheFillingThread() {
        let filled = Atomic<Int>(0)
        let freed = DispatchSemaphore(value: 0)
        do {
            let sentinel = Sentinel(freed)
            let pipeline = BatchPipeline(batches: [Numbers(), Numbers()]) { batch in
                _ = sentinel
                batch.values = [filled.add(1, ordering: .relaxed).newValue]
                return true  // would go on for ever
            }
            #expect(pipeline.next()?.values == [1])
            pipeline.stop()
        }
        #expect(freed.wait(timeout: .now() + 30) == .success, "the filling thread did not end")
        // Two buffers, one never given back: it filled one or both, then stopped.
        #expect((1...2).contains(filled.load(ordering: .relaxed)))
    }
}

@Suite struct BufferedFileWriterTests {
    @Test func writingBehindKeepsEveryByteAndTheMode() throws {
        let dir = TemporaryDirectory("writer")
        let path = dir.file("big")
        let writer = try BufferedFileWriter(path: path, writeBehind: true)
        var expected: [UInt8] = []
        var rng = SplitMix64(seed: 3)
        var block = [UInt8](repeating: 0, count: 1 << 20)
        for i in stride(from: 0, to: block.count, by: 8) {
            withUnsafeBytes(of: rng.next()) { block.replaceSubrange(i..<(i + 8), with: $0) }
        }
        // Past several write-behind steps, in odd-sized pieces.
        expected.reserveCapacity(26 << 20)
        while expected.count < 3 * 8 << 20 {
            let start = Int.random(in: 0..<block.count, using: &rng)
            let piece = block[start..<min(block.count, start + Int.random(in: 1...70_000, using: &rng))]
            writer.buffer += piece
            expected += piece
            try writer.flushIfFull()
        }
        try writer.sync()
        let written = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(written.count == expected.count)
        #expect(written == expected)
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }
}

@Suite struct ByteArenaTests {
    @Test func growsKeepsAndTruncatesBytesLikeAnArray() {
        let arena = ByteArena(capacity: 16)
        var mirror: [UInt8] = []
        var rng = SplitMix64(seed: 5)
        var largest = 0
        for step in 0..<2_000 {
            switch Int.random(in: 0..<5, using: &rng) {
            case 0:
                let piece = (0..<Int.random(in: 0...300, using: &rng)).map { UInt8(truncatingIfNeeded: $0 &+ step) }
                arena.append(piece)
                mirror += piece
            case 1:
                arena.append(UInt8(truncatingIfNeeded: step))
                mirror.append(UInt8(truncatingIfNeeded: step))
            case 2:
                arena.append(#"{"seq":"#)
                mirror += Array(#"{"seq":"#.utf8)
            case 3:
                arena.append(upTo: 8) { p in p[0] = 0x41; p[1] = 0x42; return 2 }
                mirror += [0x41, 0x42]
            default:
                let keep = Int.random(in: 0...mirror.count, using: &rng)
                arena.truncate(to: keep)
                mirror.removeLast(mirror.count - keep)
            }
            #expect(arena.count == mirror.count)
            largest = max(largest, mirror.count)
        }
        #expect(Array(arena.all) == mirror)
        #expect(largest > 1_000, "the arena grew well past its first capacity")
        if mirror.count >= 10 { #expect(arena.copy(3..<10) == Array(mirror[3..<10])) }
    }
}

/// The CRC-32 of plans and journal records: the folded (PCLMULQDQ) path for
/// long inputs must give zlib's value, at every length, alignment and split.
@Suite struct CRC32Tests {
    /// Bit by bit, straight from the definition (reflected 0xEDB88320).
    static func reference(_ bytes: some Sequence<UInt8>, from start: UInt32 = 0) -> UInt32 {
        var crc = ~start
        for b in bytes {
            crc ^= UInt32(b)
            for _ in 0..<8 { crc = (crc >> 1) ^ (crc & 1 == 1 ? 0xEDB8_8320 : 0) }
        }
        return ~crc
    }

    @Test func theCheckValue() {
        var crc = CRC32()
        crc.update(Array("123456789".utf8))
        #expect(crc.value == 0xCBF4_3926)
    }

    @Test func everyLengthToElevenHundredAtEveryAlignment() {
        var rng = SplitMix64(seed: 32)
        let data = (0..<1200).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        for length in 0...1100 {
            let offset = length % 16
            let slice = data[offset..<(offset + length)]
            var crc = CRC32()
            crc.update(slice)
            #expect(crc.value == Self.reference(slice), "length \(length)")
        }
    }

    @Test func runsChainWhereverTheyAreSplit() {
        var rng = SplitMix64(seed: 33)
        let data = (0..<70_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let whole = Self.reference(data)
        for _ in 0..<40 {
            var crc = CRC32()
            var at = 0
            while at < data.count {
                let n = min(data.count - at, Int(rng.next() % 5000))
                crc.update(data[at..<(at + n)])
                at += n
            }
            #expect(crc.value == whole)
        }
        // All ones and all zeros: the folding constants' edge cases.
        for byte: UInt8 in [0x00, 0xFF] {
            let run = [UInt8](repeating: byte, count: 4096)
            var crc = CRC32()
            crc.update(run)
            #expect(crc.value == Self.reference(run))
        }
    }
}
