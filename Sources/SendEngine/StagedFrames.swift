import CampaignIO
import Synchronization

/// The frames the plan reader has encoded, per connection, until each batch
/// is handed to its connection's queue.
package final class StagedFrames {
    @usableFromInline var batches: [FrameBatch]
    private let queues: [WorkQueue]
    private let cancellation: CancellationPipe
    /// The connections' queues it hands frames to.
    package var queueCount: Int { queues.count }

    package init(queues: [WorkQueue], cancellation: CancellationPipe) {
        self.queues = queues
        self.cancellation = cancellation
        batches = queues.map { _ in
            var b = FrameBatch()
            b.bytes.reserveCapacity(FrameBatch.handOverFrames * 320)
            b.frames.reserveCapacity(FrameBatch.handOverFrames)
            return b
        }
    }

    /// Encodes a frame for connection `queue`; hands the batch over when it
    /// is full. False when cancelled while waiting for room. Inlinable: it
    /// is called for every record from the plan reader's module, and the
    /// encoder it is given is then inlined too.
    @inlinable
    package func append(to queue: Int, seq: UInt64, shard: Int32, ordinal: Int32, moment: Int64 = 0, zone: Int32 = -1,
                encode: (inout [UInt8]) -> Void) -> Bool {
        batches[queue].append(seq: seq, shard: shard, ordinal: ordinal, moment: moment, zone: zone, encode: encode)
        guard batches[queue].isFull else { return true }
        return push(queue)
    }

    /// Hands every non-empty batch over. False when cancelled while waiting.
    package func handOverAll() -> Bool {
        for i in batches.indices where !batches[i].isEmpty {
            if !push(i) { return false }
        }
        return true
    }

    @usableFromInline func push(_ queue: Int) -> Bool {
        let count = batches[queue].frames.count
        return queues[queue].push(&batches[queue], cancellation: cancellation)
    }
}
