#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// Reads rows on a thread of its own, in batches, while the caller plans the
/// rows read before: on two cores, tokenizing and planning overlap.
///
/// Rows, records and errors come out exactly as the wrapped reader gives
/// them, in order; an error comes after every row read before it. Row
/// buffers travel between the threads by swapping, so nothing is copied or
/// allocated per row once the batches are warm.
public final class PrefetchingAudienceReader: AudienceReader, @unchecked Sendable {
    /// A copy of the wrapped reader's schema, as of the batch being consumed
    /// (the wrapped one changes on the reading thread).
    public let schema = AudienceSchema()

    private final class Batch: @unchecked Sendable {
        var rows: [AudienceRow]
        var records: [AudienceRecord?]
        var count = 0
        var schemaNames: [String] = []
        var failure: Error?
        var ended = false

        init(size: Int) {
            rows = Array(repeating: AudienceRow(), count: size)
            records = Array(repeating: nil, count: size)
        }
    }

    private let pipeline: BatchPipeline<Batch>
    private var current: Batch?
    private var position = 0
    private var done = false

    /// Starts reading `inner` at once, `batches` batches of `batchRows` rows ahead at most.
    public init(_ inner: AudienceReader, batchRows: Int = 512, batches: Int = 4) {
        let filler = Filler(inner: inner)
        pipeline = BatchPipeline(batches: (0..<batches).map { _ in Batch(size: batchRows) }) { filler.fill($0) }
    }

    deinit {
        // A caller that stops early: the reading thread ends at its next batch.
        pipeline.stop()
    }

    /// The reading thread's side: the wrapped reader, touched only there.
    private final class Filler: @unchecked Sendable {
        let inner: AudienceReader
        var schemaCount = -1
        init(inner: AudienceReader) { self.inner = inner }

        func fill(_ batch: Batch) -> Bool {
            batch.count = 0
            batch.failure = nil
            do {
                while batch.count < batch.rows.count {
                    guard let record = try inner.next(into: &batch.rows[batch.count]) else {
                        batch.ended = true
                        break
                    }
                    batch.records[batch.count] = record
                    batch.count += 1
                }
            } catch {
                batch.failure = error
                batch.ended = true
            }
            if inner.schema.count != schemaCount {
                schemaCount = inner.schema.count
                batch.schemaNames = inner.schema.names
            } else {
                batch.schemaNames = []
            }
            return !batch.ended
        }
    }

    public func next(into row: inout AudienceRow) throws -> AudienceRecord? {
        while true {
            if let batch = current {
                if position < batch.count {
                    swap(&row, &batch.rows[position])
                    let record = batch.records[position]!
                    batch.records[position] = nil
                    position += 1
                    return record
                }
                current = nil
                if let failure = batch.failure {
                    done = true
                    throw failure
                }
                if batch.ended {
                    done = true
                    return nil
                }
                pipeline.recycle(batch)
            }
            if done { return nil }
            guard let batch = pipeline.next() else { return nil }
            for name in batch.schemaNames { schema.add(name) }
            current = batch
            position = 0
        }
    }
}
